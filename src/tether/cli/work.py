"""Showing the work of a turn as it happens: a session observer for the terminal.

:class:`WorkView` listens to one agent's session events and shows, on a
:class:`~tether.cli.surface.Surface`:

* the answer as it streams, and the model's reasoning when asked
  (:attr:`WorkView.thinking`);
* each tool call with its arguments (``→ bash ls -la``); a call its tool
  shows as a change (:attr:`~tether.tools.presentation.ToolShown.change`: an
  ``edit``, a ``write``) with the coloured diff of the text it replaces or
  the lines it writes, from the call's own arguments;
* each result, folded: its first and last lines, how many were left out and
  where to see them all (``whole_output``; in chat ``/output N`` shows result
  ``N`` whole, :meth:`WorkView.output`);
* the stop receipt after a cancel (what was stopped, and how);
* how the turn ended, when not completed: a failure as one line with what to
  do (:func:`~tether.front.outcomes.model_failure`);
* the tokens and cost of the turn, and of the session so far, when the
  provider reported usage (these two, the turn's summary, are left out with
  ``summary`` off: ``tether run`` says how the turn ended itself, last, and
  its JSON result carries the usage);
* the person's prompts, through :meth:`WorkView.prompt` (folded when long);
* transient status through ``status``: ``waiting for the model`` until the
  first token, ``retrying in 2 s: 529 overloaded (2/4)`` between attempts
  (without a status line, a retry is said as a line), and while a command
  runs, its time so far and the last lines of its output
  (:meth:`WorkView.progress`, fed ``tool/progress`` by :func:`follow_progress`),
  replaced by its folded result when it ends.

:meth:`WorkView.replay` shows the last turns of a stored log the same way
(``chat --resume``): one renderer for the work as it happens and as it was.
Events are matched by their typed payloads (:mod:`tether.session`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from tether.cli.render import (
    MAX_DIFF_LINES,
    call_line,
    clipped,
    stop_lines,
    text_of,
)
from tether.cli.surface import Status, Style, Surface
from tether.content import ReasoningBlock
from tether.front.outcomes import turn_outcome
from tether.frozen import thaw
from tether.session import (
    Aborted,
    AssistantChunk,
    AssistantMessageEvent,
    ContextCompacted,
    Errored,
    RetryEvent,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    ToolStopped,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessageEvent,
)
from tether.session.attempts import retry_notice
from tether.session.budget import BudgetExhausted
from tether.session.compaction import compaction_notice
from tether.session.elicitation import ElicitationCompleted
from tether.session.prompt_cut import PromptCut, prompt_cut_notice
from tether.session.settings import ConfigChanged, PlanEntry, PlanUpdated
from tether.tools.presentation import ToolShown
from tether.tools.registry import TOOLS, Shown, shown_in

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.cli.own_command import OwnResult
    from tether.host import Tether
    from tether.llm.metering import UsageMeter
    from tether.session import Event, Session
    from tether.tools.progress import ToolProgress

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
        shown: Shown | None = None,
    ) -> None:
        self.surface = surface
        self.thinking = thinking
        """Whether the model's reasoning is shown (``--show-thinking``, ``/thinking``)."""
        self._meter = meter
        self._status = status
        self._summary = summary
        self._whole_output = whole_output
        self._shown = shown if shown is not None else shown_in(None)
        self._outputs: list[tuple[str, str]] = []
        self._turn_usage: dict[str, int] = {}
        self._turn_cost_from: float | None = None
        self._cwd: str | None = None
        self._running: dict[str, str] = {}
        """The calls that started and have no result yet: their lines (``bash ls``)."""
        self._progress: str | None = None
        """The call whose progress the status shows."""
        self.asks_first = False
        """Calls may be put to the person before they run (ask mode): a call's diff
        waits, for its question (:meth:`asked`) or else its result."""
        self._held: dict[str, list[tuple[str, Style]]] = {}
        """The diffs of calls that may be asked, by call id (see :attr:`asks_first`)."""

    # -- the session observer ------------------------------------------------

    def __call__(self, session: Session, event: Event) -> None:
        self._cwd = session.header.cwd
        match event.payload:
            case AssistantChunk(kind=kind, delta=delta):
                self._say_status(None)
                if kind == "text":
                    self.surface.answer(delta)
                elif self.thinking:
                    self.surface.thinking(delta)
            case StepStart():
                self._say_status(WAITING)
            case TurnStart():
                self._turn_usage = {}
                cost = self._meter.cost() if self._meter is not None else None
                self._turn_cost_from = cost[0] if cost is not None else None
            case AssistantMessageEvent(usage=usage):
                self.surface.answered()
                self._count(event, usage)
            case ConfigChanged() if self._meter is not None:
                self._meter.advance(event)
            case RetryEvent() as retry:
                self.surface.abandon()
                self._retry(event, retry)
            case ContextCompacted():
                self.surface.line(compaction_notice(event.data), "notice")
            case PromptCut():
                self.surface.line(prompt_cut_notice(event.data), "notice")
            case BudgetExhausted() | ElicitationCompleted() as noted:
                self.surface.line(noted.describe(), "notice")
            case ToolCallEvent() as call:
                self._say_status(None)
                self._call(call)
            case ToolResultEvent() as result:
                self._result(result)
            case PlanUpdated(entries=entries):
                for line, style in plan_lines(entries):
                    self.surface.line(line, style)
            case ToolStopped() as receipt:
                for line in stop_lines(receipt):
                    self.surface.line(f"■ {line}", "notice")
            case TurnEnd(reason=reason):
                self._held.clear()
                self._say_status(None)
                self.surface.end_block()
                self._turn_end(reason)

    # -- what each event shows -----------------------------------------------

    def _say_status(self, text: str | None) -> None:
        if self._status is not None:
            self._status(text)

    def _retry(self, event: Event, retry: RetryEvent) -> None:
        if self._status is None:
            self.surface.line(retry_notice(event.data), "notice")
            return
        following = f"{retry.attempt + 1}"
        if retry.max_attempts is not None:
            following += f"/{retry.max_attempts}"
        wait = ""
        if retry.delay > 0:
            wait = " in " + f"{retry.delay:.1f}".removesuffix(".0") + " s"
        reason = retry.error or retry.code or "model error"
        self._status(f"retrying{wait}: {reason} ({following})")

    def _call(self, call: ToolCallEvent) -> None:
        arguments = thaw(call.arguments)
        args = arguments if isinstance(arguments, dict) else {}
        shown = self._shown(call.name)
        line = call_line(call.name, args, shown)
        self._running[call.id] = line
        self.surface.line(f"→ {line}", "tool")
        locations = shown.locations(args, self._cwd)
        path = locations[0].path if locations else None
        diff = call_diff(shown, args, path)
        if self.asks_first and diff:
            self._held[call.id] = diff
            return
        for text, style in diff:
            self.surface.line(text, style)

    def asked(self, call_id: str) -> None:
        """Call ``call_id`` is being put to the person, its diff with it: it is not shown
        again here."""
        self._held.pop(call_id, None)

    def _result(self, result: ToolResultEvent) -> None:
        self._running.pop(result.id, None)
        for text, style in self._held.pop(result.id, ()):  # it ran unasked
            self.surface.line(text, style)
        if self._progress == result.id:
            self._progress = None
            self._say_status(None)
        self._output(result.name, result.content, failed=result.is_error)

    def progress(self, progress: ToolProgress) -> None:
        """Show where a running call stands in the status (none without one): its line,
        the seconds it has run, and the last lines of its output; its result replaces it."""
        line = self._running.get(progress.call_id)
        if self._status is None or line is None:
            return
        self._progress = progress.call_id
        self._status(progress_text(line, progress))

    def own_result(self, result: OwnResult) -> None:
        """What a ``!command`` printed, folded like a tool's (``/output N`` shows it)."""
        ended = "stopped" if result.code is None else f"exit code {result.code}"
        self._output(f"$ {result.command}", result.output, failed=result.code != 0, ended=ended)

    @property
    def shown(self) -> Shown:
        """How the session's tool calls are shown."""
        return self._shown

    def _output(self, name: str, content: str, *, failed: bool, ended: str | None = None) -> None:
        self._outputs.append((name, content))
        number = len(self._outputs)
        lines = content.splitlines()
        count = f"{len(lines)} line{'' if len(lines) == 1 else 's'}"
        if ended is not None:
            count = f"{ended}, {count}"
        verdict = "failed" if failed else "done"
        self.surface.line(f"← {name} {verdict} ({count}) #{number}", "error" if failed else "dim")
        style: Style = "error" if failed else "output"
        for line in _folded(lines, self._whole_output.format(n=number)):
            self.surface.line(f"  │ {line}", style)

    def child(self, depth: int, event: Event) -> None:
        """An event of a child agent ``depth`` delegations below the session, shown
        nested under the ``task`` call that started it while it runs: its tool calls
        and how each ended, indented a level deeper for each delegation."""
        indent = "  " * depth
        match event.payload:
            case ToolCallEvent(name=name, arguments=arguments):
                line = call_line(name, thaw(arguments), self._shown(name))
                self.surface.line(f"{indent}→ {line}", "dim")
                self._say_status(f"task: {clipped(line)}")
            case ToolResultEvent(name=name, content=content, is_error=failed):
                count = len(content.splitlines())
                verdict = "failed" if failed else "done"
                lines = f"{count} line{'' if count == 1 else 's'}"
                self.surface.line(f"{indent}← {name} {verdict} ({lines})", "dim")
            case AssistantChunk():
                self._say_status("task: the child agent is answering")

    def _count(self, event: Event, usage: Mapping[str, int] | None) -> None:
        for name, value in (usage or {}).items():
            self._turn_usage[name] = self._turn_usage.get(name, 0) + value
        if self._meter is not None:
            self._meter.advance(event)

    def _turn_end(self, reason: TurnEndReason) -> None:
        if not self._summary:
            return
        self._say_outcome(reason)
        usage = self.usage_line()
        if usage is not None:
            self.surface.line(usage, "dim")

    def _say_outcome(self, reason: TurnEndReason) -> None:
        outcome = turn_outcome(reason)
        if outcome is None:
            return
        if isinstance(reason, Errored):
            self.surface.line(outcome, "error")
        elif isinstance(reason, Aborted):
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
        starts = [i for i, event in enumerate(events) if isinstance(event.payload, TurnStart)]
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
        match event.payload:
            case AssistantChunk():
                return
            case UserMessageEvent(content=content):
                self.prompt(text_of(content))
                return
            case AssistantMessageEvent(content=content):
                for block in content if self.thinking else ():
                    if isinstance(block, ReasoningBlock):
                        self.surface.thinking(block.text)
                text = text_of(content)
                if text:
                    self.surface.answer(text)
                    self.surface.end_block()
            case TurnEnd(reason=reason):
                self.surface.end_block()
                self._say_outcome(reason)
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


def progress_text(line: str, progress: ToolProgress) -> str:
    """A running call as a status: ``bash ./build.sh · 12 s`` and, below, the last
    :data:`PROGRESS_LINES` lines of its output so far."""
    seconds = int(progress.elapsed)
    head = f"{clipped(line, 60)} · {seconds} s"
    tail = [f"  │ {clipped(text, MAX_PROGRESS_WIDTH)}" for text in progress.tail[-PROGRESS_LINES:]]
    return "\n".join([head, *tail])


PROGRESS_LINES = 4
"""Lines of a running command's output its status shows."""
MAX_PROGRESS_WIDTH = 160
"""Characters of one output line in a running command's status."""


def follow_progress(agent: Agent, view: WorkView) -> Callable[[], None]:
    """Show the progress of ``agent``'s running calls in ``view`` (:meth:`WorkView.progress`);
    returns the function that stops it."""
    from tether.tools.progress import TOOL_PROGRESS

    def on_progress(source: Agent, progress: ToolProgress) -> None:
        if source is agent:
            view.progress(progress)

    return agent.ctx.on(TOOL_PROGRESS, on_progress)


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


DIFF_STYLES: dict[str, Style] = {"+": "added", "-": "removed", "@": "dim"}


def call_diff(
    shown: ToolShown, args: Mapping[str, object], path: str | None = None
) -> list[tuple[str, Style]]:
    """The lines a call changes, from its own arguments as its tool declares them
    (:attr:`~tether.tools.presentation.ToolShown.change`), styled. With the
    ``path`` of the file the call changes, each hunk header gives the lines
    where the change is in that file (:func:`line_in_file`); without it, or
    when the change is not found there, the lines within the call's text."""
    pairs = shown.changes(args)
    if not pairs:
        return []
    from tether.front.diffs import line_in_file, unified_lines

    lines: list[tuple[str, Style]] = []
    for old, new in pairs:
        first = line_in_file(path, old, new) if path is not None and old else None
        diff = unified_lines("", old, new, first_line=first or 1, context=2, headers=False)
        for line in diff:
            style = DIFF_STYLES.get(line[:1], "output")
            lines.append((f"  {clipped(line)}", style))
    if len(lines) > MAX_DIFF_LINES:
        cut = len(lines) - MAX_DIFF_LINES
        lines = [*lines[:MAX_DIFF_LINES], (f"  … {cut} more lines", "dim")]
    return lines


_PLAN_MARKS: dict[str, tuple[str, Style]] = {
    "completed": ("✔", "dim"),
    "in_progress": ("▸", "tool"),
    "pending": ("○", "output"),
}


def plan_lines(entries: Sequence[PlanEntry]) -> list[tuple[str, Style]]:
    """The session's plan as a checklist: ``✔`` done, ``▸`` under way, ``○`` to do;
    one line saying so when it was cleared."""
    if not entries:
        return [("  (the plan is cleared)", "dim")]
    done = sum(entry.status == "completed" for entry in entries)
    lines: list[tuple[str, Style]] = [(f"  plan: {done} of {len(entries)} done", "dim")]
    for entry in entries:
        mark, style = _PLAN_MARKS.get(entry.status, ("○", "output"))
        lines.append((f"  {mark} {clipped(entry.content)}", style))
    return lines


def follow_children(tether: Tether, agent: Agent, view: WorkView) -> Callable[[], None]:
    """Show the work of ``agent``'s foreground child agents (and theirs) in ``view``
    (:meth:`WorkView.child`) while they run; returns the function that stops it."""
    from tether.agent.registry import AGENTS
    from tether.session.store import SESSION_EVENT

    agents = tether.runtime.ctx.get(AGENTS)

    def depth_of(session: Session) -> int | None:
        """How many foreground delegations below ``agent`` ``session`` is (``None``: not)."""
        header = session.header
        for depth in range(1, MAX_SHOWN_DEPTH + 1):
            lineage = header.lineage
            delegation = None if lineage is None else lineage.delegation
            if lineage is None or delegation is None or delegation.background:
                return None
            if lineage.parent == agent.id:
                return depth
            parent = agents.get(lineage.parent) if agents is not None else None
            if parent is None:
                return None
            header = parent.session.header
        return None

    def on_event(session: Session, event: Event) -> None:
        if session is agent.session:
            return
        depth = depth_of(session)
        if depth is not None:
            view.child(depth, event)

    return tether.runtime.ctx.on(SESSION_EVENT, on_event)


MAX_SHOWN_DEPTH = 8
"""The deepest delegation whose work is shown nested (deeper agents run unshown)."""


def shown_for(tether: Tether, agent: Agent) -> Shown:
    """How the calls of the tools ``agent`` sees are shown."""
    return shown_in(tether.runtime.ctx.get(TOOLS), agent.id)


def meter_for(tether: Tether, agent: Agent) -> UsageMeter:
    """``agent``'s session usage so far, priced by the model catalog of the settings."""
    from tether.cli.boot import session_choice
    from tether.llm.catalog import ModelCatalog
    from tether.llm.metering import UsageMeter
    from tether.llm.service import LLM

    llm = tether.runtime.ctx.get(LLM)
    catalog = llm.catalog if llm is not None else ModelCatalog()
    # The meter folds the switches itself: it starts on the model the session started on.
    meter = UsageMeter(catalog, session_choice(tether, agent.session, at=0).model)
    for event in agent.session.events:
        meter.advance(event)
    return meter


def budget_line(agent: Agent) -> str | None:
    """What ``agent``'s session spent of its budget, for ``/cost``; ``None`` without one."""
    from tether.loop.budget import BUDGETS

    budgets = agent.ctx.get(BUDGETS)
    ledger = None if budgets is None else budgets.of(agent.id)
    return None if ledger is None else ledger.describe()
