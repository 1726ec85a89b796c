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
* the person's prompts, through :meth:`WorkView.prompt` (folded when long);
* transient status through ``status``: ``waiting for the model`` until the
  first token, ``retrying in 2 s: 529 overloaded (2/4)`` between attempts
  (without a status line, a retry is said as a line).

:meth:`WorkView.replay` shows the last turns of a stored log the same way
(``chat --resume``): one renderer for the work as it happens and as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tether.cli.render import (
    MAX_DIFF_LINES,
    call_line,
    clipped,
    stop_lines,
    text_of,
    turn_outcome,
)
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
WAITING = "waiting for the model"
ECHO_LINES = 3
"""Lines of a prompt shown (the rest are counted)."""
REPLAYED_TURNS = 3
"""Turns a resumed chat shows before its prompt."""


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
            self.surface.answered()
            self._count(event, data)
        elif kind == "session/config" and self._meter is not None:
            self._meter.advance(event)
        elif kind == RETRY_TYPE:
            self.surface.abandon()
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
        self.surface.line(f"→ {call_line(name, args)}", "tool")
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
        if not self._summary:
            return
        self._say_outcome(data.get("reason"))
        usage = self.usage_line()
        if usage is not None:
            self.surface.line(usage, "dim")

    def _say_outcome(self, reason: object) -> None:
        outcome = turn_outcome(reason)
        if outcome is None:
            return
        kind = reason.get("kind") if isinstance(reason, Mapping) else None
        if kind == "error":
            self.surface.line(outcome, "error")
        elif kind == "aborted":
            self.surface.line(f"(turn stopped: {outcome})", "notice")
        else:
            self.surface.line(f"({outcome})", "notice")

    def turn_cost(self) -> tuple[float, str] | None:
        """What the last turn cost, ``(amount, currency)``, when prices are known."""
        cost = self._meter.cost() if self._meter is not None else None
        if cost is None:
            return None
        return round(cost[0] - (self._turn_cost_from or 0.0), 6), cost[1]

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

    def prompt(self, text: str, *, steer: bool = False) -> None:
        """The person's prompt (``»`` when it steers a running turn), its first
        :data:`ECHO_LINES` lines and how many more there are."""
        lines = text.splitlines() or [""]
        self.surface.line(f"{'»' if steer else '>'} {lines[0]}", "user")
        for line in lines[1:ECHO_LINES]:
            self.surface.line(f"  {line}", "user")
        if len(lines) > ECHO_LINES:
            more = len(lines) - ECHO_LINES
            self.surface.line(f"  … {more:,} more lines ({len(text):,} characters)", "dim")

    def replay(self, session: Session, turns: int = REPLAYED_TURNS) -> None:
        """Show the last ``turns`` turns of ``session``'s log as they were shown live —
        the prompts, the answers, the tool calls and their folded output, how each
        turn ended — after a line saying how many earlier turns are not shown.

        The answer is the text of each stored ``assistant/message`` (what was
        streamed is not needed); reasoning is shown when :attr:`thinking` is on.
        Neither the status line nor the session's usage meter is touched, and a
        turn's own usage line is not repeated: they are about what runs now.
        """
        events = session.events
        starts = [i for i, event in enumerate(events) if event.type == "turn/start"]
        if not starts:
            return
        shown = starts[-turns:] if turns > 0 else []
        earlier = len(starts) - len(shown)
        if earlier:
            plural = "" if earlier == 1 else "s"
            where = f"tether sessions show {session.header.id} prints them"
            self.surface.line(f"… {earlier} earlier turn{plural} not shown ({where})", "dim")
        if not shown:
            return
        kept = self._meter, self._status
        self._meter, self._status = None, None
        try:
            for event in events[shown[0] :]:
                self._replayed(session, event)
        finally:
            self._meter, self._status = kept
        self.surface.end_block()

    def _replayed(self, session: Session, event: Event) -> None:
        data = event.data
        if event.type == "assistant/chunk":
            return
        if event.type == "user/message":
            self.prompt(text_of(data.get("content")))
            return
        if event.type == "assistant/message":
            content = data.get("content")
            for block in content if isinstance(content, tuple | list) and self.thinking else ():
                if isinstance(block, Mapping) and block.get("type") == "reasoning":
                    self.surface.thinking(str(block.get("text", "")))
            text = text_of(content)
            if text:
                self.surface.answer(text)
                self.surface.end_block()
        elif event.type == "turn/end":
            self.surface.end_block()
            self._say_outcome(data.get("reason"))
            return
        self(session, event)

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


def _folded(lines: list[str], whole: str) -> list[str]:
    """``lines`` cut to their head and tail when there are many; ``whole`` says where
    to see them all."""
    if len(lines) <= FOLD_ABOVE:
        return [clipped(line) for line in lines]
    hidden = len(lines) - FOLD_HEAD - FOLD_TAIL
    return [
        *(clipped(line) for line in lines[:FOLD_HEAD]),
        f"… {hidden} more lines ({whole})",
        *(clipped(line) for line in lines[-FOLD_TAIL:]),
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
            shown.append((f"  {clipped(line)}", style))
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
