"""Showing the work of a turn as it happens: a session observer for the terminal.

:class:`WorkView` listens to one agent's session events and shows, on a
:class:`~tether.cli.surface.Surface`:

* the answer as it streams, and the model's reasoning when asked
  (:attr:`WorkView.thinking`);
* each tool call with its arguments (``→ bash ls -la``); an ``edit`` as the
  coloured diff of the text it replaces, a ``write`` as the lines it writes
  (both from the call's own arguments);
* each result, folded: its first and last lines, how many were left out and
  where to see them all (``whole_output``; in chat ``/output N`` shows result
  ``N`` whole, :meth:`WorkView.output`);
* the stop receipt after a cancel (what was stopped, and how);
* how the turn ended, when not completed: a failure as one line with what to
  do (:func:`~tether.cli.failures.model_failure`);
* the tokens and cost of the turn, and of the session so far, when the
  provider reported usage (these two, the turn's summary, are left out with
  ``summary`` off: ``tether run`` says how the turn ended itself, last, and
  its JSON result carries the usage);
* transient status through ``status``: ``waiting for the model`` until the
  first token, ``retrying in 2 s: 529 overloaded (2/4)`` between attempts
  (without a status line, a retry is said as a line).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tether.cli.failures import model_failure
from tether.cli.render import stop_lines
from tether.cli.surface import Status, Style, Surface
from tether.frozen import thaw
from tether.session.attempts import RETRY_TYPE, retry_notice
from tether.session.compaction import COMPACTED_TYPE, compaction_notice

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.host import Tether
    from tether.llm.metering import UsageMeter
    from tether.session import Event, Session

FOLD_ABOVE = 8
"""An output of more lines than this is folded."""
FOLD_HEAD = 3
FOLD_TAIL = 3
MAX_LINE = 240
"""Characters of one output line shown (the rest is cut, with ``…``)."""
MAX_DIFF_LINES = 40
WAITING = "waiting for the model"

_TARGETS = ("command", "path", "pattern", "description", "task_id", "prompt")


class WorkView:
    """One agent's session events, shown on ``surface`` (see the module docs)."""

    def __init__(
        self,
        surface: Surface,
        *,
        thinking: bool = False,
        meter: UsageMeter | None = None,
        status: Status | None = None,
        summary: bool = True,
        whole_output: str = "/output {n} shows them all",
    ) -> None:
        self.surface = surface
        self.thinking = thinking
        """Whether the model's reasoning is shown (``--show-thinking``, ``/thinking``)."""
        self._meter = meter
        self._status = status
        self._summary = summary
        self._whole_output = whole_output
        self._outputs: list[tuple[str, str]] = []
        self._turn_usage: dict[str, int] = {}
        self._turn_cost_from: float | None = None

    # -- the session observer ------------------------------------------------

    def __call__(self, session: Session, event: Event) -> None:
        data = event.data
        kind = event.type
        if kind == "assistant/chunk":
            self._say_status(None)
            delta = str(data.get("delta", ""))
            if data.get("kind") == "text":
                self.surface.answer(delta)
            elif self.thinking:
                self.surface.thinking(delta)
        elif kind == "step/start":
            self._say_status(WAITING)
        elif kind == "turn/start":
            self._turn_usage = {}
            cost = self._meter.cost() if self._meter is not None else None
            self._turn_cost_from = cost[0] if cost is not None else None
        elif kind == "assistant/message":
            self._count(event, data)
        elif kind == "session/config" and self._meter is not None:
            self._meter.advance(event)
        elif kind == RETRY_TYPE:
            self.surface.end_block()
            self._retry(data)
        elif kind == COMPACTED_TYPE:
            self.surface.line(compaction_notice(data), "notice")
        elif kind == "tool/call":
            self._say_status(None)
            self._call(data)
        elif kind == "tool/result":
            self._result(data)
        elif kind == "tool/stopped":
            for line in stop_lines(data):
                self.surface.line(f"■ {line}", "notice")
        elif kind == "turn/end":
            self._say_status(None)
            self.surface.end_block()
            self._turn_end(data)

    # -- what each event shows -----------------------------------------------

    def _say_status(self, text: str | None) -> None:
        if self._status is not None:
            self._status(text)

    def _retry(self, data: Mapping[str, object]) -> None:
        if self._status is None:
            self.surface.line(retry_notice(data), "notice")
            return
        attempt = data.get("attempt")
        following = f"{attempt + 1}" if isinstance(attempt, int) else "?"
        allowed = data.get("max_attempts")
        if isinstance(allowed, int):
            following += f"/{allowed}"
        delay = data.get("delay")
        wait = ""
        if isinstance(delay, int | float) and delay > 0:
            wait = " in " + f"{delay:.1f}".removesuffix(".0") + " s"
        reason = data.get("error") or data.get("code") or "model error"
        self._status(f"retrying{wait}: {reason} ({following})")

    def _call(self, data: Mapping[str, object]) -> None:
        name = str(data.get("name"))
        arguments = thaw(data.get("arguments"))
        args = arguments if isinstance(arguments, dict) else {}
        target = next((str(args[k]) for k in _TARGETS if isinstance(args.get(k), str)), "")
        rest = {k: v for k, v in args.items() if k not in _TARGETS or not isinstance(v, str)}
        if name == "edit":
            rest = {k: v for k, v in rest.items() if k not in ("old_string", "new_string", "edits")}
        elif name == "write":
            rest.pop("content", None)
        extra = f" {_compact(rest)}" if rest else ""
        self.surface.line(f"→ {name} {_cut(target)}{extra}".rstrip(), "tool")
        for line, style in _call_diff(name, args):
            self.surface.line(line, style)

    def _result(self, data: Mapping[str, object]) -> None:
        name = str(data.get("name"))
        content = str(data.get("content", ""))
        failed = bool(data.get("is_error"))
        self._outputs.append((name, content))
        number = len(self._outputs)
        lines = content.splitlines()
        count = f"{len(lines)} line{'' if len(lines) == 1 else 's'}"
        verdict = "failed" if failed else "done"
        self.surface.line(f"← {name} {verdict} ({count}) #{number}", "error" if failed else "dim")
        style: Style = "error" if failed else "output"
        for line in _folded(lines, self._whole_output.format(n=number)):
            self.surface.line(f"  │ {line}", style)

    def _count(self, event: Event, data: Mapping[str, object]) -> None:
        usage = data.get("usage")
        if isinstance(usage, Mapping):
            for name, value in usage.items():
                if isinstance(value, int):
                    self._turn_usage[str(name)] = self._turn_usage.get(str(name), 0) + value
        if self._meter is not None:
            self._meter.advance(event)

    def _turn_end(self, data: Mapping[str, object]) -> None:
        reason = thaw(data.get("reason"))
        if not self._summary:
            return
        if isinstance(reason, dict):
            self._say_outcome(reason)
        usage = self.usage_line()
        if usage is not None:
            self.surface.line(usage, "dim")

    def _say_outcome(self, reason: dict[str, object]) -> None:
        kind = reason.get("kind")
        if kind == "error":
            code = reason.get("code")
            failure = model_failure(
                str(reason.get("error")), code if isinstance(code, str) else None
            )
            self.surface.line(f"error: {failure}", "error")
        elif kind == "aborted":
            self.surface.line(f"(turn stopped: cancelled by {reason.get('cause')})", "notice")
        elif kind != "completed":
            self.surface.line(f"(turn ended: {kind})", "notice")

    def usage_line(self) -> str | None:
        """The tokens (and cost) of the last turn, and the session's cost; ``None`` without
        figures."""
        usage = self._turn_usage
        if not usage:
            return None
        spent = f"{usage.get('input_tokens', 0):,} in, {usage.get('output_tokens', 0):,} out"
        cost = self._meter.cost() if self._meter is not None else None
        if cost is not None:
            turn = cost[0] - (self._turn_cost_from or 0.0)
            spent += f" · {turn:.4f} {cost[1]} (session {cost[0]:.4f} {cost[1]})"
        return f"tokens: {spent}"

    # -- on request --------------------------------------------------------------

    def output(self, which: str) -> str:
        """The whole output of result ``which`` (its ``#`` number; empty: the last one)."""
        if not self._outputs:
            return "no tool output yet"
        if not which.strip():
            index = len(self._outputs)
        else:
            try:
                index = int(which.strip().lstrip("#"))
            except ValueError:
                return f"/output takes the number of a result (#1 to #{len(self._outputs)})"
        if not 1 <= index <= len(self._outputs):
            return f"no result #{index} (there are #1 to #{len(self._outputs)})"
        name, content = self._outputs[index - 1]
        return f"#{index} {name}:\n{content}"


def _cut(text: str, limit: int = MAX_LINE) -> str:
    first = text.splitlines()[0] if text else ""
    if len(first) > limit or first != text:
        return first[:limit] + "…"
    return first


def _compact(value: object) -> str:
    return _cut(json.dumps(value, ensure_ascii=False, default=str))


def _folded(lines: list[str], whole: str) -> list[str]:
    """``lines`` cut to their head and tail when there are many; ``whole`` says where
    to see them all."""
    if len(lines) <= FOLD_ABOVE:
        return [_cut(line) for line in lines]
    hidden = len(lines) - FOLD_HEAD - FOLD_TAIL
    return [
        *(_cut(line) for line in lines[:FOLD_HEAD]),
        f"… {hidden} more lines ({whole})",
        *(_cut(line) for line in lines[-FOLD_TAIL:]),
    ]


_DIFF_STYLES: dict[str, Style] = {"+": "added", "-": "removed", "@": "dim"}


def _call_diff(name: str, args: Mapping[str, object]) -> list[tuple[str, Style]]:
    """The lines an ``edit`` or ``write`` call changes, from its own arguments, styled."""
    pairs: list[tuple[str, str]] = []
    if name == "edit":
        edits = args.get("edits")
        if isinstance(edits, list):
            for edit in edits:
                if isinstance(edit, dict):
                    pairs.append((str(edit.get("old_string", "")), str(edit.get("new_string", ""))))
        elif isinstance(args.get("old_string"), str):
            pairs.append((str(args["old_string"]), str(args.get("new_string") or "")))
    elif name == "write" and isinstance(args.get("content"), str):
        pairs.append(("", str(args["content"])))
    if not pairs:
        return []
    import difflib

    shown: list[tuple[str, Style]] = []
    for old, new in pairs:
        diff = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=2)
        for line in diff:
            if line.startswith(("---", "+++")):
                continue
            style = _DIFF_STYLES.get(line[:1], "output")
            shown.append((f"  {_cut(line)}", style))
    if len(shown) > MAX_DIFF_LINES:
        cut = len(shown) - MAX_DIFF_LINES
        shown = [*shown[:MAX_DIFF_LINES], (f"  … {cut} more lines", "dim")]
    return shown


def meter_for(tether: Tether, agent: Agent) -> UsageMeter:
    """``agent``'s session usage so far, priced by the model catalog of the settings."""
    from tether.cli.boot import session_model
    from tether.llm.catalog import ModelCatalog
    from tether.llm.metering import UsageMeter
    from tether.llm.service import LLM

    llm = tether.runtime.ctx.get(LLM)
    catalog = llm.catalog if llm is not None else ModelCatalog()
    meter = UsageMeter(catalog, session_model(agent))
    for event in agent.session.events:
        meter.advance(event)
    return meter
