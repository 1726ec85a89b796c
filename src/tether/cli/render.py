"""Rendering a session log for people: a plain transcript, or Markdown.

What a tool call is shown as — its tool and its target (the command, the
file, the pattern …), then its other arguments save those its tool shows as
a change (:attr:`~tether.tools.presentation.ToolShown.hidden`) — is
:func:`call_line`, the same here, in the live work view
(:mod:`tether.cli.work`) and in ask mode's question
(:mod:`tether.cli.asking`).

Events are read by their typed payloads (:mod:`tether.session`), never as
dicts by type name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping

from tether.content import ReasoningBlock, TextBlock, ToolCallBlock
from tether.front.outcomes import turn_outcome
from tether.session import (
    AssistantMessageEvent,
    ContextCompacted,
    Event,
    Session,
    Stopped,
    StoppedAgent,
    ToolPreviewed,
    ToolResultEvent,
    ToolStopped,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)
from tether.session.budget import BudgetExhausted
from tether.session.compaction import compaction_notice
from tether.session.elicitation import ElicitationCompleted
from tether.session.prompt_cut import PromptCut, prompt_cut_notice
from tether.tools.presentation import DEFAULT_SHOWN, ToolShown
from tether.tools.registry import Shown, shown_in


def text_of(content: Iterable[object]) -> str:
    """The text blocks of a message's ``content``, joined."""
    return "".join(block.text for block in content if isinstance(block, TextBlock))


MAX_LINE = 240
"""Characters of one shown line (the rest is cut, with ``…``)."""

TARGETS = ("command", "path", "pattern", "description", "task_id", "prompt", "url", "query")
"""The arguments that name what a call acts on, the first one a call has winning."""


def clipped(text: str, limit: int = MAX_LINE) -> str:
    """The first line of ``text``, cut to ``limit`` characters; ``…`` when anything is cut."""
    first = text.splitlines()[0] if text else ""
    if len(first) > limit or first != text:
        return first[:limit] + "…"
    return first


def call_target(arguments: Mapping[str, object], shown: ToolShown = DEFAULT_SHOWN) -> str:
    """What a call acts on: its command or first path as ``shown`` declares them, else
    the first of its :data:`TARGETS` arguments it has ("" if none)."""
    named = _target_names(shown)
    return next((str(arguments[k]) for k in named if isinstance(arguments.get(k), str)), "")


def _target_names(shown: ToolShown) -> tuple[str, ...]:
    return (*((shown.command,) if shown.command is not None else ()), *shown.paths, *TARGETS)


def call_line(name: str, arguments: object, shown: ToolShown = DEFAULT_SHOWN) -> str:
    """A tool call on one line: ``bash ls -la``, then its other arguments as compact JSON
    (``read notes.txt {"offset": 10}``); the arguments ``shown`` hides (an edit's or a
    write's text, shown as a change) are left out, and so are those given as ``null``
    (a model's way of leaving an optional argument out)."""
    args = _plain(arguments)
    args = args if isinstance(args, dict) else {}
    target = call_target(args, shown)
    named = _target_names(shown)
    rest = {
        k: v
        for k, v in args.items()
        if v is not None  # an optional argument left out, as a model may say it
        and k not in shown.hidden
        and not (k in named and isinstance(v, str) and v == target)
    }
    line = f"{name} {clipped(target)}" if target else name
    if rest:
        line += " " + clipped(json.dumps(rest, ensure_ascii=False, default=str))
    return line.rstrip()


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
    to ``new_text``, both starting at line ``first_line``
    (:func:`tether.front.diffs.unified_lines`, the diff the web page shows), cut at
    :data:`MAX_DIFF_LINES` with a note."""
    from tether.front.diffs import unified_lines

    shown = unified_lines(path, old_text, new_text, first_line=first_line)
    if len(shown) > MAX_DIFF_LINES:
        cut = len(shown) - MAX_DIFF_LINES
        shown = [*shown[:MAX_DIFF_LINES], f"… {cut} more lines"]
    return shown


def transcript(
    session: Session, *, markdown: bool = False, thinking: bool = False, shown: Shown | None = None
) -> Iterator[str]:
    """Yield the lines of a readable transcript of ``session``; with
    ``thinking``, the model's reasoning too. ``shown`` is how the session's
    tools are shown (by default as tools that declare nothing)."""
    header = session.header
    shown_of = shown if shown is not None else shown_in(None)
    if markdown:
        yield f"# Session {header.id}"
        yield ""
        yield f"- cwd: `{header.cwd}`"
        yield ""
    else:
        yield f"session {header.id} (cwd {header.cwd})"
    for event in session.events:
        payload = event.payload
        if thinking and isinstance(payload, AssistantMessageEvent):
            yield from _reasoning(payload, markdown)
        yield from _render(event, markdown, shown_of)


def _reasoning(message: AssistantMessageEvent, markdown: bool) -> Iterator[str]:
    for block in message.content:
        if isinstance(block, ReasoningBlock):
            yield f"> _thinking:_ {block.text}" if markdown else f"thinking: {block.text}"


def _render(event: Event, markdown: bool, shown: Shown) -> Iterator[str]:
    match event.payload:
        case TurnStart(turn=turn):
            yield ""
            yield f"## Turn {turn}" if markdown else f"── turn {turn} ──"
        case UserMessageEvent(content=content):
            text = text_of(content)
            yield f"**You:** {text}" if markdown else f"you: {text}"
        case AssistantMessageEvent() as message:
            yield from _answer(message, markdown, shown)
        case ToolResultEvent() as result:
            yield from _result(result, markdown)
        case ToolPreviewed() as previewed:
            yield from _previewed(previewed, markdown)
        case ToolStopped() as receipt:
            for line in stop_lines(receipt):
                yield f"- _{line}_" if markdown else f"  ■ {line}"
        case PromptCut():
            note = prompt_cut_notice(event.data)
            yield f"_{note}_" if markdown else note
        case BudgetExhausted() | ElicitationCompleted() as noted:
            note = noted.describe()
            yield f"_{note}_" if markdown else note
        case ContextCompacted(summary=summary):
            note = compaction_notice(event.data)
            yield f"_{note}_" if markdown else note
            if markdown:
                yield f"> {summary}".replace("\n", "\n> ")
            else:
                for line in summary.splitlines() or [""]:
                    yield f"    {line}"
        case TurnEnd(reason=reason):
            outcome = turn_outcome(reason)
            if outcome is not None:
                yield f"_({outcome})_" if markdown else f"({outcome})"


def _answer(message: AssistantMessageEvent, markdown: bool, shown: Shown) -> Iterator[str]:
    text = text_of(message.content)
    marker = " [interrupted]" if message.interrupted else ""
    if text:
        yield f"**Assistant{marker}:** {text}" if markdown else f"assistant{marker}: {text}"
    for call in message.content:
        if isinstance(call, ToolCallBlock):
            line = call_line(call.name, call.arguments, shown(call.name))
            yield f"- `{line}`" if markdown else f"  → {line}"


def _result(result: ToolResultEvent, markdown: bool) -> Iterator[str]:
    if markdown:
        yield f"```text\n{result.content}\n```"
        return
    yield f"  ← {result.name} {'error' if result.is_error else 'result'}:"
    for line in result.content.splitlines() or [""]:
        yield f"    {line}"


def _previewed(previewed: ToolPreviewed, markdown: bool) -> Iterator[str]:
    for diff in previewed.diffs:
        lines = diff_lines(diff.path, diff.old_text, diff.new_text, first_line=diff.first_line)
        if diff.shortened:
            lines.append(f"({diff.shortened})")
        if not lines:
            continue  # equal texts: an empty diff block would say nothing
        if markdown:
            yield "```diff\n" + "\n".join(lines) + "\n```"
        else:
            yield from (f"    {line}" for line in lines)


def stop_lines(receipt: ToolStopped) -> list[str]:
    """The stop receipt: one line per command and per child agent the stop reached."""
    return [*map(_stopped_line, receipt.stopped), *map(_child_line, receipt.agents)]


def _took(seconds: float | None) -> str:
    return "" if seconds is None else f" in {seconds * 1000:.0f} ms"


def _child_line(entry: StoppedAgent) -> str:
    """The line of one child agent a stop reached."""
    ended = entry.ended if not entry.cause else f"{entry.ended} ({entry.cause})"
    kept = (
        f"; its worktree is kept at {entry.worktree} (branch {entry.branch})"
        if entry.worktree is not None
        else ""
    )
    return f"stopped child agent {entry.id}: its turn ended {ended}{_took(entry.seconds)}{kept}"


def _stopped_line(entry: Stopped) -> str:
    """The line of one command a stop reached."""
    signals = ", then ".join(entry.signals) or "no signal"
    if entry.exit_signal is not None:
        ended = f"ended by {entry.exit_signal}"
    elif entry.exit_code is not None:
        ended = f"exited {entry.exit_code}"
    else:
        ended = "still exiting"
    where = (
        "in the client's terminal" if entry.kind == "terminal" else f"process group {entry.pgid}"
    )
    return (
        f"stopped {entry.kind} {entry.id}: {where}, sent {signals}, {ended}{_took(entry.seconds)}"
    )
