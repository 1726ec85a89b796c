"""The subagent tools (``task``, ``task_output``, ``task_kill``): delegation owned by the parent.

``task`` hands a prompt to a **child agent**. The child is created through
``ctx.agents`` *in the parent agent's scoped context*, so the parent's scope
owns it: whatever disposes the parent disposes its children. The child has a
session of its own, whose header's lineage records where it came from: the
parent's session id and a :class:`~tether.session.lineage.Delegation` (the
tool call, the depth, the task's description, whether it runs in the
background, the tools it may call); the parent's
log holds the call and, as its result, the child's answer. A child's id is
its session id, and is the task id the parent's model uses.

* **Foreground** (the default): the call returns once the child is idle,
  with the child's answer. A child done with its work is disposed (its log
  stays stored).
* **Background** (``run_in_background``): the call returns the task id at
  once; when the child is done, the parent gets a notice — as a follow-up if
  it is idle, else injected into its next request — and the child is
  disposed. ``task_output`` reads a task's state and answer, ``task_kill``
  stops it; both refuse a task of another agent with the answer they give for
  an id that does not exist.

**Cancel cascades with cause ``parent``.** When the parent is cancelled
(``cancel(user)``, or its disposal), every running child is cancelled with
``cancel(parent)`` at once; the parent's turn waits for them
(``agent/turn-aborting``) before it closes, so each child's ``turn/end
{aborted: parent}`` is on disk before the parent's ``turn/end``, and the
parent's stop receipt (``tool/stopped``) lists the children it stopped. A
child cancelled on its own (by its id, from an editor) does not cancel its
parent: the parent's call gets an error result and its turn goes on.

What cascades lives in the parent's scope (its listeners and the watchers of
background children), not in this plugin, so a reload of this plugin leaves
every running child owned, cascaded and reported as before.

**Limits** (settings): delegation depth (default 2), children per parent
(8), live agents in the process (64); a call over one is an error result
naming it. A child counts from the moment its call reserves it (before it
is created) until it is disposed, so the calls of one answer cannot all
pass the check. A child runs in its parent's cwd with the parent's model
and tools unless a **profile** (``profiles`` in settings: a system prompt,
tools, a model) says otherwise; a profile can narrow the tools, never widen
them past the parent's.

**Isolation.** With ``isolation: worktree`` the child works in a git
worktree it owns (:mod:`tether.agent.worktree`): its parent's ``HEAD`` plus
the parent's uncommitted work, closed in the child's teardown after its
processes stopped — removed when unchanged, kept otherwise. The call's
result (or a background child's notice) ends with what became of it and the
child's diff; the stop receipt names a kept one. Without git the call is
refused in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
from msgspec import Meta

from tether.agent import (
    Agent,
    AgentDisposedError,
    AgentError,
    AgentHandle,
    AgentOptions,
    AgentStatus,
    CancelCause,
    NeverRan,
    NotStoredError,
    TurnEnded,
    TurnHandle,
    TurnOutcome,
    UserMessage,
)
from tether.agent.events import AGENT_STOPPING, CANCEL_REQUESTED
from tether.agent.registry import AGENTS
from tether.agent.worktree import Isolation
from tether.loop.hooks import TURN_ABORTING
from tether.runtime.schema import Schema
from tether.session import (
    Aborted,
    AssistantMessageEvent,
    StopParts,
    StoppedAgent,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)
from tether.session.lineage import Delegation, Lineage
from tether.session.model import ModelChoice, session_model
from tether.tools import Tool, ToolExec, ToolOutput, ToolShown
from tether.tools.registry import TOOLS

if TYPE_CHECKING:
    from tether.rewind.worktree import Worktree
    from tether.runtime import Context
    from tether.session import Session

log = logging.getLogger(__name__)

name = "tool_subagent"
inject = ("tools", "agents")

TASK_TOOL = "task"
"""The name of the tool that delegates to a child."""
NOTICE_SOURCE = "notice"
PROMPT_SOURCE = "parent"
DO_IT_YOURSELF = "do the work yourself with the other tools instead"
"""What a refused delegation tells the model to do when no other task would be taken."""


class Profile(Schema, frozen=True):
    """A named kind of child agent (``agent`` argument of ``task``)."""

    system: str | None = None
    """Its system prompt (default: the agent loop's)."""
    tools: tuple[str, ...] | None = None
    """The tools it may call, within the parent's (default: the parent's)."""
    model: str | None = None
    """Its model (default: the parent's)."""


class Config(Schema, frozen=True):
    """Limits of delegation, and the profiles children can be given."""

    max_depth: Annotated[int, Meta(ge=1, description="levels of delegation below a root")] = 2
    max_children: Annotated[
        int, Meta(ge=1, description="children per parent, counted from the call until disposed")
    ] = 8
    max_agents: Annotated[int, Meta(ge=1, description="live agents in the process")] = 64
    profiles: Mapping[str, Profile] = msgspec.field(default_factory=dict)


class TaskArgs(Schema, frozen=True):
    """Delegate a task to a child agent."""

    description: Annotated[str, Meta(description="the task in a few words")]
    prompt: Annotated[str, Meta(description="everything the child needs to know to do it")]
    agent: Annotated[str, Meta(description="a profile from the settings")] | None = None
    run_in_background: Annotated[
        bool, Meta(description="return the task id at once; a notice tells when it is done")
    ] = False
    isolation: Annotated[
        Isolation,
        Meta(
            description="worktree: the child works in a git worktree of its own (this "
            "workspace's HEAD plus its uncommitted changes); its diff comes back"
        ),
    ] = "none"


class TaskIdArgs(Schema, frozen=True):
    """Name a task."""

    task_id: Annotated[str, Meta(description="the task id that task returned")]


def parent_of(agent: Agent) -> str | None:
    """The session id of the agent that delegated to ``agent``, if one did."""
    return agent.session.header.delegator


def depth_of(agent: Agent) -> int:
    """0 for an agent nobody delegated to, 1 for its child, …"""
    delegation = agent.session.header.delegation
    return 0 if delegation is None else delegation.depth


def outcome(session: Session) -> tuple[TurnEndReason | None, str]:
    """How the session's last turn ended, and the text of its last answer: for a task
    read by id (``task_output``), live or stored; a child the tools hold is followed
    through its turn handles instead."""
    reason: TurnEndReason | None = None
    for event in reversed(session.events):
        payload = event.payload
        if reason is None and isinstance(payload, TurnEnd):
            reason = payload.reason
        elif isinstance(payload, AssistantMessageEvent):
            return reason, payload.text
        elif isinstance(payload, TurnStart) and reason is not None:
            break
    return reason, ""


def describe_end(reason: TurnEndReason | None) -> str:
    """How a task ended, in a few words; ``None``: it never ran."""
    if reason is None:
        return "never ran"
    if isinstance(reason, Aborted):
        return f"aborted ({reason.cause})"
    error = getattr(reason, "error", None)
    return f"{reason.kind}: {error}" if error else reason.kind


def reason_of(outcome: TurnOutcome) -> TurnEndReason | None:
    """The ``turn/end`` reason of a settled turn handle; ``None`` when it never ran."""
    return None if isinstance(outcome, NeverRan) else outcome.reason


class Child(msgspec.Struct, eq=False):
    """One child agent, as its parent's family knows it."""

    handle: AgentHandle
    call_id: str
    description: str
    background: bool
    prompt: TurnHandle | None = None
    """The turn handle of the task's prompt, once it was given."""

    def outcome(self) -> TurnOutcome:
        """How the turn of the task's prompt ended (or that it never ran); the child is
        settled first (:meth:`Family.settle`)."""
        outcome = self.prompt.outcome if self.prompt is not None else None
        assert outcome is not None, "a settled child has its prompt settled"
        return outcome

    stop_requested: float | None = None
    """``time.monotonic()`` when the parent's stop cancelled it."""
    settled: asyncio.Future[float] | None = None
    """Resolves (with the monotonic time) once it is at rest and its log is flushed."""

    @property
    def agent(self) -> Agent:
        return self.handle.agent

    @property
    def worktree(self) -> Worktree | None:
        """The git worktree the child owns (``isolation: worktree``)."""
        return self.handle.worktree

    @property
    def id(self) -> str:
        return self.handle.agent.id


Families = Mapping[str, "Family"]
"""The families of the process, by parent id."""


class Family:
    """A parent's children, and the listeners of the parent's scope that cascade to them.

    A child is **busy** while it runs or while a child of its own is busy:
    an agent whose turn ended after it started background tasks is not done
    until they are.
    """

    def __init__(self, parent: Agent, families: Families) -> None:
        self.parent = parent
        self.children: dict[str, Child] = {}
        self.slots = 0
        """Children counted against ``max_children``: each from the moment its
        ``task`` call reserved it (before the first await, so the calls of one
        answer cannot all pass the check) until it is disposed or its creation
        failed."""
        self._families = families
        self._stopped: list[Child] = []

    def busy(self) -> list[Child]:
        return [child for child in self.children.values() if self._busy(child)]

    def _busy(self, child: Child) -> bool:
        if child.agent.status is AgentStatus.RUNNING:
            return True
        below = self._families.get(child.id)
        return below is not None and bool(below.busy())

    def settle(self, child: Child) -> asyncio.Future[float]:
        """Wait, once, until ``child`` and everything below it is at rest and flushed."""
        if child.settled is None:
            child.settled = asyncio.ensure_future(self._settle(child))
        return child.settled

    async def _settle(self, child: Child) -> float:
        while True:
            await child.agent.when_idle()
            below = self._families.get(child.id)
            pending = below.busy() if below is not None else []
            if not pending:
                break
            assert below is not None
            await asyncio.gather(*(below.settle(grandchild) for grandchild in pending))
        assert child.prompt is not None, "a child is settled only once prompted"
        try:
            await child.prompt.durable()
        except NotStoredError as exc:
            log.warning("child agent %s: its log could not be flushed: %s", child.id, exc)
        return time.monotonic()

    def stop_all(self) -> None:
        """Cancel every busy child with cause ``parent``, and what is busy below an idle one."""
        for child in self.busy():
            if child.stop_requested is None:
                child.stop_requested = time.monotonic()
                self._stopped.append(child)
            child.agent.cancel(CancelCause.PARENT)
            below = self._families.get(child.id)
            if below is not None:
                # A child idle but waiting on background work of its own
                # cancels nothing itself (its cancel has no turn to stop).
                below.stop_all()

    def attach(self) -> None:
        """Listen on the parent's scope: these live and die with the parent."""
        scope = self.parent.ctx
        scope.on(CANCEL_REQUESTED, self.on_cancel)
        scope.on(TURN_ABORTING, self.on_aborting)
        scope.on(AGENT_STOPPING, self.on_stopping)

    def on_cancel(self, agent: Agent, cause: CancelCause) -> None:
        """The parent is cancelled (or disposed): cancel every busy child, cause ``parent``."""
        self.stop_all()

    async def on_aborting(self, agent: Agent, turn: int) -> StopParts | None:
        """The parent's cancelled turn waits for the children its cancel stopped; they go
        on its receipt."""
        return await self._collect()

    async def on_stopping(self, agent: Agent) -> StopParts | None:
        """A parent disposed while idle: its background children stop; receipt between turns."""
        if agent.status is AgentStatus.RUNNING:
            return None  # its turn closes with the receipt
        # An idle parent's disposal cancels nothing of its own (no event):
        # its busy children are stopped here.
        self.stop_all()
        return await self._collect()

    async def _collect(self) -> StopParts | None:
        """Wait for the children stopped since the last collection; what they became."""
        stopped, self._stopped = self._stopped, []
        entries: list[StoppedAgent] = []
        for child in stopped:
            ended_at = await self.settle(child)
            reason = reason_of(child.outcome())
            requested = child.stop_requested or ended_at
            # A worktree is decided once its child is disposed (its processes
            # gone): by the call's end, or a background child's watcher.
            kept = await child.worktree.closed() if child.worktree is not None else None
            entries.append(
                StoppedAgent(
                    id=child.id,
                    call_id=child.call_id,
                    ended=reason.kind if reason is not None else "never-ran",
                    cause=reason.cause if isinstance(reason, Aborted) else None,
                    seconds=max(0.0, ended_at - requested),
                    worktree=kept.path if kept is not None and kept.kept else None,
                    branch=kept.branch if kept is not None and kept.kept else None,
                )
            )
        return StopParts(agents=tuple(entries)) if entries else None


class SubagentTools:
    """The three tools, over the agents registry."""

    def __init__(self, ctx: Context, config: Config) -> None:
        self._ctx = ctx
        self._config = config
        self._families: dict[str, Family] = {}
        self._creating = 0
        """Children whose create is under way: not yet in the registry, yet counted."""

    # -- task -------------------------------------------------------------------

    async def task(self, args: TaskArgs, exec: ToolExec) -> ToolOutput:
        parent = exec.agent
        if parent is None:
            return ToolOutput("task needs an agent to delegate from", is_error=True)
        refusal = self._refusal(parent, args)
        if refusal is not None:
            return ToolOutput(f"task refused: {refusal}", is_error=True)
        family = self._family(parent)
        # The check above and this reservation happen with no await between
        # them: a call counts from here, not once its child reports running.
        family.slots += 1
        started = await self._start(family, args, exec)
        if isinstance(started, ToolOutput):
            return started
        child = started
        child.prompt = child.agent.followup(UserMessage.text(args.prompt, source=PROMPT_SOURCE))
        if args.run_in_background:
            self._watch(family, child)
            return ToolOutput(
                f"started task {child.id} in the background; a notice comes when it is done "
                "(task_output reads it, task_kill stops it)"
            )
        return await self._foreground(family, child, exec)

    async def _start(self, family: Family, args: TaskArgs, exec: ToolExec) -> Child | ToolOutput:
        """Create the child of a reserved slot and admit it to ``family``, or say why not.

        From here the slot belongs to the admitted child, and :meth:`_finish`
        gives it back; on every other exit (a refused or failed create, a
        cancel that won the race, an exception) it is given back here, after
        a created child is disposed.
        """
        parent = family.parent
        options = self._options(parent, args.agent)
        delegation = Delegation(
            call=exec.call_id,
            depth=depth_of(parent) + 1,
            task=args.description,
            background=args.run_in_background,
            tools=None if options.tools is None else tuple(options.tools),
        )
        admitted = False
        self._creating += 1
        try:
            try:
                handle = await parent.ctx.service(AGENTS).create(
                    cwd=parent.session.header.cwd,
                    options=options,
                    lineage=Lineage(parent.id, 0, delegation),
                    isolation=args.isolation,
                )
            finally:
                self._creating -= 1
            if exec.signal.cancelled:
                # The parent was cancelled while the child was being created.
                await handle.dispose()
                return ToolOutput("task not started: the turn was cancelled", is_error=True)
            child = Child(handle, exec.call_id, args.description, args.run_in_background)
            family.children[child.id] = child
            admitted = True
            return child
        except AgentError as exc:
            return ToolOutput(f"task not started: {exc}", is_error=True)
        finally:
            if not admitted:
                family.slots -= 1

    async def _foreground(self, family: Family, child: Child, exec: ToolExec) -> ToolOutput:
        settled = family.settle(child)
        stop: asyncio.Future[object] = asyncio.ensure_future(exec.signal.wait())
        try:
            try:
                await asyncio.wait((settled, stop), return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
            if not settled.done():
                family.stop_all()  # the cascade did it already, unless it lost a race
                await asyncio.shield(settled)
            ended = child.outcome()
        finally:
            await self._finish(family, child)
        result = _result(child.id, ended)
        kept = _worktree_report(child)
        if kept is None:
            return result
        return ToolOutput(f"{result.content}\n{kept}", is_error=result.is_error)

    def _watch(self, family: Family, child: Child) -> None:
        """Watch a background child from the parent's scope: notice, then dispose, when done."""
        parent = family.parent

        async def watch() -> None:
            await family.settle(child)
            reason = reason_of(child.outcome())
            await self._finish(family, child)
            worktree = _worktree_report(child)
            notice = UserMessage.text(
                f"background task {child.id} ({child.description}) finished: "
                f"{describe_end(reason)}. Read its answer with task_output."
                + (f"\n{worktree}" if worktree is not None else ""),
                source=NOTICE_SOURCE,
            )
            try:
                # A child the parent's own stop ended never wakes the parent:
                # the stop stops, and the notice waits for its next request.
                if parent.status is AgentStatus.IDLE and child.stop_requested is None:
                    parent.followup(notice)
                else:
                    parent.inject(notice)
            except AgentDisposedError:
                pass  # the parent is going: nobody to tell

        watcher = asyncio.get_running_loop().create_task(watch(), name=f"task-watch:{child.id}")

        async def stop_watching() -> None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

        parent.ctx.defer(stop_watching, label=f"watch task {child.id}")

    async def _finish(self, family: Family, child: Child) -> None:
        """The child's work is done: dispose it (its log stays stored), then free its slot.

        The slot is freed by the call that took the child out of the family,
        once the child is disposed.
        """
        counted = family.children.get(child.id) is child
        if counted:
            del family.children[child.id]
        try:
            await child.handle.dispose()
        finally:
            if counted:
                family.slots -= 1

    # -- task_output, task_kill ------------------------------------------------

    async def task_output(self, args: TaskIdArgs, exec: ToolExec) -> ToolOutput:
        found = await self._owned(args.task_id, exec)
        if isinstance(found, str):
            return ToolOutput(found, is_error=True)
        session, running = found
        reason, answer = outcome(session)
        state = "running" if running else f"done: {describe_end(reason)}"
        return ToolOutput(f"[task {args.task_id} {state}]\n{answer or '(no answer yet)'}")

    async def task_kill(self, args: TaskIdArgs, exec: ToolExec) -> ToolOutput:
        found = await self._owned(args.task_id, exec)
        if isinstance(found, str):
            return ToolOutput(found, is_error=True)
        session, running = found
        family = self._families.get(exec.agent.id) if exec.agent is not None else None
        child = family.children.get(args.task_id) if family is not None else None
        if not running or child is None:
            reason, _answer = outcome(session)
            return ToolOutput(f"task {args.task_id} had already finished ({describe_end(reason)})")
        assert family is not None
        child.agent.cancel(CancelCause.PARENT)
        below = self._families.get(child.id)
        if below is not None:
            below.stop_all()
        await asyncio.shield(family.settle(child))
        reason = reason_of(child.outcome())
        return ToolOutput(f"killed task {args.task_id}: its turn ended {describe_end(reason)}")

    async def _owned(self, task_id: str, exec: ToolExec) -> tuple[Session, bool] | str:
        """The task's session and whether it runs, if the caller owns it; else why not.

        A task of another agent gets the very answer of an id that does not
        exist, so ids cannot be probed.
        """
        missing = (
            f"no task {task_id} in this session; a task id is what task answered when it "
            "started a task"
        )
        caller = exec.agent
        if caller is None:
            return missing
        live = self._ctx.service(AGENTS).get(task_id)
        if live is not None:
            if parent_of(live) != caller.id:
                return missing
            return live.session, live.status is AgentStatus.RUNNING
        from tether.persist.service import PERSISTENCE

        persistence = self._ctx.get(PERSISTENCE)
        if persistence is None:
            return missing
        try:
            session = await persistence.load(task_id)
        except Exception:
            return missing
        if session.header.delegator != caller.id:
            return missing
        return session, False

    # -- limits and options ----------------------------------------------------

    def _refusal(self, parent: Agent, args: TaskArgs) -> str | None:
        config = self._config
        if args.agent is not None and args.agent not in config.profiles:
            known = ", ".join(sorted(config.profiles)) or "none are configured"
            return (
                f"there is no agent profile {args.agent!r} (profiles: {known}); call task "
                "again with one of them as agent, or without agent for the default"
            )
        if depth_of(parent) + 1 > config.max_depth:
            return (
                f"delegation is limited to {config.max_depth} levels, and this agent is a "
                f"child; {DO_IT_YOURSELF}"
            )
        family = self._families.get(parent.id)
        if family is not None and family.slots >= config.max_children:
            return (
                f"this agent already runs {config.max_children} tasks (the limit); wait for "
                "one (task_output) or stop one (task_kill) before starting another"
            )
        if len(self._ctx.service(AGENTS).list()) + self._creating >= config.max_agents:
            return (
                f"{config.max_agents} agents are live in this process (the limit); {DO_IT_YOURSELF}"
            )
        return None

    def _options(self, parent: Agent, profile_name: str | None) -> AgentOptions:
        """A child's options: the parent's model and tools, narrowed by the profile."""
        header = parent.session.header
        delegation = header.delegation
        allowed = _tools_of(header.meta.get("tools")) if delegation is None else delegation.tools
        profile = self._config.profiles[profile_name] if profile_name is not None else Profile()
        tools = allowed
        if profile.tools is not None:
            wanted = tuple(profile.tools)
            tools = wanted if allowed is None else tuple(t for t in wanted if t in allowed)
        model = ModelChoice(profile.model) if profile.model else session_model(parent.session)
        return AgentOptions(
            model=model.model, base_url=model.base_url, system=profile.system, tools=tools
        )

    def _family(self, parent: Agent) -> Family:
        family = self._families.get(parent.id)
        if family is None or family.parent is not parent:
            family = self._families[parent.id] = Family(parent, self._families)
            family.attach()
            parent.ctx.defer(lambda: self._forget(family), label="forget task family")
        return family

    def _forget(self, family: Family) -> None:
        if self._families.get(family.parent.id) is family:
            del self._families[family.parent.id]


def _tools_of(label: str | None) -> tuple[str, ...] | None:
    """The tools a root agent was restricted to (its header's ``tools`` label, a JSON list)."""
    if label is None:
        return None
    try:
        names = json.loads(label)
    except ValueError:
        return None
    return tuple(str(n) for n in names) if isinstance(names, list) else None


def _worktree_report(child: Child) -> str | None:
    """What became of a disposed child's worktree, for its parent; ``None`` without one."""
    worktree = child.worktree
    if worktree is None:
        return None
    outcome = worktree.outcome
    if outcome is None:
        return f"[worktree {worktree.root} (branch {worktree.branch}) could not be closed]"
    return outcome.describe()


def _result(task_id: str, outcome: TurnOutcome) -> ToolOutput:
    answer = outcome.answer if isinstance(outcome, TurnEnded) else ""
    if isinstance(outcome, TurnEnded) and outcome.completed:
        return ToolOutput(f"{answer or '(the task gave no answer)'}\n[task {task_id}: completed]")
    said = f"; what it had said: {answer}" if answer else ""
    ended = describe_end(reason_of(outcome))
    return ToolOutput(f"task {task_id} did not complete: {ended}{said}", is_error=True)


TASK_SHOWN = ToolShown(delegates=True)
"""``task``: the child's work shows inside the call while it runs."""
TASK_ID_SHOWN = ToolShown(title="{tool} {task_id}")
"""``task_output`` and ``task_kill``: titled by the task they are about."""


async def apply(ctx: Context, config: Config) -> None:
    tools = ctx.service(TOOLS)
    subagents = SubagentTools(ctx, config)
    definitions: list[Tool[Any]] = [
        Tool(
            name=TASK_TOOL,
            description="Delegate a task to a child agent with its own context. It returns the "
            "child's answer (or, with run_in_background, a task id at once). Give the child "
            "everything it needs in the prompt: it does not see this conversation.",
            args=TaskArgs,
            execute=subagents.task,
            shown=TASK_SHOWN,
            # Delegations are independent agents: several in one answer run together.
            concurrency_safe=True,
        ),
        Tool(
            name="task_output",
            description="Read a delegated task's state and its latest answer.",
            args=TaskIdArgs,
            execute=subagents.task_output,
            shown=TASK_ID_SHOWN,
            concurrency_safe=True,
        ),
        Tool(
            name="task_kill",
            description="Stop a delegated task that is still running.",
            args=TaskIdArgs,
            execute=subagents.task_kill,
            shown=TASK_ID_SHOWN,
        ),
    ]
    for definition in definitions:
        await tools.register(definition)
