"""Rendering a session log for people: a plain transcript, or Markdown.

What a tool call is shown as — its tool and its target (the command, the
file, the pattern …), then its other arguments — is :func:`call_line`, the
same here, in the live work view (:mod:`tether.cli.work`) and in ask mode's
question (:mod:`tether.cli.asking`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping

from tether.cli.failures import model_failure
from tether.session import Event, Session
from tether.session.compaction import COMPACTED_TYPE, compaction_notice


def text_of(content: object) -> str:
    """The text blocks of an event's ``content`` (stored form), joined."""
    if not isinstance(content, tuple | list):
        return ""
    parts = []
    for block in content:
        if isinstance(block, Mapping) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


def _calls(content: object) -> list[Mapping[str, object]]:
    if not isinstance(content, tuple | list):
        return []
    return [b for b in content if isinstance(b, Mapping) and b.get("type") == "tool_call"]


MAX_LINE = 240
"""Characters of one shown line (the rest is cut, with ``…``)."""

TARGETS = ("command", "path", "pattern", "description", "task_id", "prompt", "url", "query")
"""The arguments that name what a call acts on, the first one a call has winning."""

UNSHOWN = {"edit": ("old_string", "new_string", "edits"), "write": ("content",)}
"""Arguments a call line leaves out: they are shown as a diff instead."""


def clipped(text: str, limit: int = MAX_LINE) -> str:
    """The first line of ``text``, cut to ``limit`` characters; ``…`` when anything is cut."""
    first = text.splitlines()[0] if text else ""
    if len(first) > limit or first != text:
        return first[:limit] + "…"
    return first


def call_target(arguments: Mapping[str, object]) -> str:
    """What a call acts on: the first of its :data:`TARGETS` arguments it has ("" if none)."""
    return next((str(arguments[k]) for k in TARGETS if isinstance(arguments.get(k), str)), "")


def call_line(name: str, arguments: object) -> str:
    """A tool call on one line: ``bash ls -la``, then its other arguments as compact JSON
    (``read notes.txt {"offset": 10}``); an edit's or a write's text is left out."""
    args = _plain(arguments)
    args = args if isinstance(args, dict) else {}
    target = call_target(args)
    unshown = UNSHOWN.get(name, ())
    rest = {
        k: v
        for k, v in args.items()
        if k not in unshown and not (k in TARGETS and isinstance(v, str) and str(v) == target)
    }
    shown = f"{name} {clipped(target)}"
    if rest:
        shown += " " + clipped(json.dumps(rest, ensure_ascii=False, default=str))
    return shown.rstrip()


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


MAX_DIFF_LINES = 40
"""The most lines of one diff a transcript or a question shows; a note says how many more."""


def diff_lines(path: str, old_text: str | None, new_text: str, *, first_line: int = 1) -> list[str]:
    """The unified diff of a file's change from ``old_text`` (``None``: a new file)
    to ``new_text``, both starting at line ``first_line``, cut at
    :data:`MAX_DIFF_LINES` with a note."""
    import difflib

    old = (old_text or "").splitlines()
    new = new_text.splitlines()
    shown = [
        _at_line(line, first_line - 1)
        for line in difflib.unified_diff(
            old, new, path if old_text is not None else "/dev/null", path, lineterm=""
        )
    ]
    if len(shown) > MAX_DIFF_LINES:
        cut = len(shown) - MAX_DIFF_LINES
        shown = [*shown[:MAX_DIFF_LINES], f"… {cut} more lines"]
    return shown


def _at_line(line: str, offset: int) -> str:
    """A hunk header of a diff of an excerpt, moved to where the excerpt is in its file."""
    if not offset or not line.startswith("@@ "):
        return line
    return re.sub(
        r"([-+])(\d+)",
        lambda found: f"{found[1]}{int(found[2]) + offset}",
        line,
        count=2,
    )


def transcript(
    session: Session, *, markdown: bool = False, thinking: bool = False
) -> Iterator[str]:
    """Yield the lines of a readable transcript of ``session``; with
    ``thinking``, the model's reasoning too."""
    header = session.header
    if markdown:
        yield f"# Session {header.id}"
        yield ""
        yield f"- cwd: `{header.cwd}`"
        yield ""
    else:
        yield f"session {header.id} (cwd {header.cwd})"
    for event in session.events:
        if thinking and event.type == "assistant/message":
            yield from _reasoning(event.data.get("content"), markdown)
        yield from _render(event, markdown)


def _reasoning(content: object, markdown: bool) -> Iterator[str]:
    for block in content if isinstance(content, tuple | list) else ():
        if isinstance(block, Mapping) and block.get("type") == "reasoning":
            text = str(block.get("text", ""))
            yield f"> _thinking:_ {text}" if markdown else f"thinking: {text}"


def _render(event: Event, markdown: bool) -> Iterator[str]:
    data = event.data
    kind = event.type
    if kind == "turn/start":
        yield ""
        yield f"## Turn {data['turn']}" if markdown else f"── turn {data['turn']} ──"
    elif kind == "user/message":
        text = text_of(data.get("content"))
        yield f"**You:** {text}" if markdown else f"you: {text}"
    elif kind == "assistant/message":
        text = text_of(data.get("content"))
        marker = " [interrupted]" if data.get("interrupted") else ""
        if text:
            yield f"**Assistant{marker}:** {text}" if markdown else f"assistant{marker}: {text}"
        for call in _calls(data.get("content")):
            line = call_line(str(call.get("name")), call.get("arguments"))
            yield f"- `{line}`" if markdown else f"  → {line}"
    elif kind == "tool/result":
        status = "error" if data.get("is_error") else "result"
        content = str(data.get("content", ""))
        if markdown:
            yield f"```text\n{content}\n```"
        else:
            yield f"  ← {data.get('name')} {status}:"
            for line in content.splitlines() or [""]:
                yield f"    {line}"
    elif kind == "tool/previewed":
        diffs = _plain(data.get("diffs"))
        for diff in diffs if isinstance(diffs, list) else []:
            if not isinstance(diff, dict):
                continue
            lines = diff_lines(
                str(diff.get("path")),
                diff.get("old_text"),
                str(diff.get("new_text", "")),
                first_line=int(diff.get("first_line", 1)),
            )
            if diff.get("shortened"):
                lines.append(f"({diff['shortened']})")
            if not lines:
                continue  # equal texts: an empty diff block would say nothing
            if markdown:
                yield "```diff\n" + "\n".join(lines) + "\n```"
            else:
                yield from (f"    {line}" for line in lines)
    elif kind == "tool/stopped":
        for line in stop_lines(data):
            yield f"- _{line}_" if markdown else f"  ■ {line}"
    elif kind == COMPACTED_TYPE:
        note = compaction_notice(data)
        yield f"_{note}_" if markdown else note
        summary = str(data.get("summary", ""))
        if markdown:
            yield f"> {summary}".replace("\n", "\n> ")
        else:
            for line in summary.splitlines() or [""]:
                yield f"    {line}"
    elif kind == "turn/end":
        outcome = turn_outcome(data.get("reason"))
        if outcome is not None:
            yield f"_({outcome})_" if markdown else f"({outcome})"


def turn_outcome(reason: object) -> str | None:
    """How a turn ended, in one line, when it did not complete (``None`` when it did),
    from its ``turn/end`` reason: ``error: …`` saying what failed and what to do,
    ``cancelled by user``, ``refused: …``, or ``turn ended: KIND``."""
    plain = _plain(reason)
    if not isinstance(plain, dict):
        return None
    kind = plain.get("kind")
    if kind == "completed":
        return None
    if kind == "error":
        code = plain.get("code")
        failure = model_failure(str(plain.get("error")), code if isinstance(code, str) else None)
        return f"error: {failure}"
    if kind == "aborted":
        return f"cancelled by {plain.get('cause')}"
    if kind == "blocked":
        return "refused: a hook or the provider would not let the turn go on"
    return f"turn ended: {kind}"


def stop_lines(data: Mapping[str, object]) -> list[str]:
    """The stop receipt (``data`` of a ``tool/stopped`` event): one line per command
    and per child agent the stop reached."""
    return [*_receipt(data.get("stopped")), *_children(data.get("agents"))]


def _children(entries: object) -> Iterator[str]:
    """One line per child agent a stop reached (``agents`` of a ``tool/stopped`` event)."""
    plain = _plain(entries)
    for entry in plain if isinstance(plain, list) else []:
        if not isinstance(entry, dict):
            continue
        ended = entry.get("ended")
        if entry.get("cause"):
            ended = f"{ended} ({entry['cause']})"
        seconds = entry.get("seconds")
        took = f" in {seconds * 1000:.0f} ms" if isinstance(seconds, int | float) else ""
        yield f"stopped child agent {entry.get('id')}: its turn ended {ended}{took}"


def _receipt(entries: object) -> Iterator[str]:
    """One line per command a stop reached (a ``tool/stopped`` event's entries)."""
    plain = _plain(entries)
    for entry in plain if isinstance(plain, list) else []:
        if not isinstance(entry, dict):
            continue
        signals = ", then ".join(entry.get("signals") or []) or "no signal"
        if entry.get("exit_signal") is not None:
            ended = f"ended by {entry['exit_signal']}"
        elif entry.get("exit_code") is not None:
            ended = f"exited {entry['exit_code']}"
        else:
            ended = "still exiting"
        seconds = entry.get("seconds")
        took = f" in {seconds * 1000:.0f} ms" if isinstance(seconds, int | float) else ""
        where = (
            "in the client's terminal"
            if entry.get("kind") == "terminal"
            else f"process group {entry.get('pgid')}"
        )
        yield (
            f"stopped {entry.get('kind')} {entry.get('id')}: {where}, sent {signals}, {ended}{took}"
        )
