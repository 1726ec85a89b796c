"""The ACP bridge plugin: the sessions one ACP client owns, and their one teardown.

``tether acp`` mounts this plugin (name ``acp``; it injects ``agents`` and
``sessions`` and reads ``persistence`` when one is mounted). It provides the
``acp`` service, a :class:`Bridge`, which the protocol server
(:mod:`tether.acp.server`) drives on behalf of one client.

**Ownership.** ``session/new`` creates an agent through ``ctx.agents.create``
and ``session/load`` resumes one through ``ctx.agents.resume``; the bridge's
fiber co-owns each agent, and the session's :class:`SessionRecord` keeps the
handle's ``dispose``. Creates and loads run in tasks the bridge owns, never in
the SDK's request handler, so a handler the SDK cancels abandons nothing.

**Teardown.** A client disconnect and the plugin's own unload reach one
memoized :meth:`Bridge.close`. It refuses new work, then — in parallel —
disposes every session handle (each dispose cancels the agent's work with
cause ``disposed``, awaits quiescence and the durable flush, and detaches the
agent and its session) and awaits every create or load still in flight; each
of those finds the bridge closing, disposes its own unpublished handle and
fails its request. Failures are aggregated and logged. Afterwards no agent
and no session the bridge created is registered, and every pending prompt
has been answered ``cancelled``. The session teardown and the bridge's
listeners are one effect, so the permission policy outlives every tool call
of every session.

**Prompts.** One prompt per session is in flight at a time. It is queued as a
followup (:meth:`Bridge.prompt` does so before it returns, so a cancel that
arrives later always finds it); its outcome is read from the session log: the
claim of its message ties it to a turn, and that turn's ``turn/end`` gives the
stop reason. A cancel that clears it before the driver claimed it answers
``cancelled`` and it never runs; a prompt whose session was cancelled answers
``cancelled`` however its turn ended.

Events:

* ``acp/closed (bridge)`` — emit; once the teardown has completed.

Listeners (registered by the plugin): ``session/event`` feeds each session's
record (one listener for all sessions, whatever their number);
``tool/before-execute`` applies the
session's mode (see :mod:`tether.acp.permissions`) and reports a call as
``in_progress``; ``permission/request`` asks the client for the bridge's own
sessions; ``agent/disposed`` forgets a session disposed by another owner.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from acp.schema import (
    AllowedOutcome,
    PermissionOption,
    RequestPermissionResponse,
    StopReason,
    ToolCallUpdate,
)
from pydantic import BaseModel, ConfigDict

from tether.acp.permissions import (
    ALLOW_ALWAYS,
    ALLOW_ONCE,
    OPTIONS,
    PERMISSION_REQUEST,
    Mode,
    PermissionDecision,
)
from tether.acp.replay import replay
from tether.acp.updates import SessionUpdate, UpdateMapper
from tether.agent import (
    Agent,
    AgentCreateError,
    AgentDisposedError,
    AgentHandle,
    AgentsView,
    CancelCause,
    UserMessage,
)
from tether.agent.events import AGENT_DISPOSED
from tether.agent.registry import AGENTS
from tether.loop.turn import step_limit_reached
from tether.persist.service import PERSISTENCE
from tether.runtime import Veto
from tether.runtime.keys import Notice, ServiceKey
from tether.session import (
    Aborted,
    Blocked,
    Completed,
    Errored,
    Event,
    InboxSpliced,
    MaxTokens,
    Session,
    TurnEnd,
    TurnEndReason,
)
from tether.session.store import SESSION_EVENT, SESSIONS
from tether.tools.execute import BEFORE_EXECUTE, ToolInvocation

if TYPE_CHECKING:
    from tether.persist.backends.base import SessionSummary
    from tether.runtime import Context

log = logging.getLogger(__name__)

name = "acp"
inject = ("agents", "sessions")

CLOSED = Notice["Bridge"]("acp/closed")
"""Emit ``(bridge)`` once the bridge's teardown has completed."""

ACP = ServiceKey["Bridge"]("acp")
"""``ctx.acp``: the bridge (bound to one client connection at a time)."""


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Mode = Mode.ASK
    """The permission mode new sessions start in."""


# -- errors ---------------------------------------------------------------------


class BridgeError(Exception):
    """Base class of the bridge's errors; each maps to a JSON-RPC error."""


class UnknownSessionError(BridgeError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"unknown session {session_id!r}: create or load it first")
        self.session_id = session_id


class PromptInFlightError(BridgeError):
    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"session {session_id!r} already has a prompt in flight; "
            "wait for its answer or cancel it first"
        )


class CwdMismatchError(BridgeError):
    def __init__(self, session_id: str, stored: str, asked: str) -> None:
        super().__init__(
            f"session {session_id!r} belongs to {stored!r}, not to the requested cwd {asked!r}"
        )


class BridgeClosedError(BridgeError):
    """The connection is closing: the bridge takes no new work."""


class NotStoredError(BridgeError):
    """What a request would acknowledge could not be written to disk."""


@dataclass(frozen=True, slots=True)
class TurnFailed:
    """A prompt whose turn failed (a model or tool-infrastructure error)."""

    error: str


Outcome = StopReason | TurnFailed
"""How a prompt ended."""


# -- the client side --------------------------------------------------------------


class ClientLink(Protocol):
    """What the bridge needs from the connection to its client."""

    def send_update(self, session_id: str, update: SessionUpdate) -> None:
        """Write a ``session/update`` now, after every update sent before it."""
        ...

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        """Ask the client; raises when the client fails or goes away."""
        ...


# -- sessions ---------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class PendingPrompt:
    """A ``session/prompt`` waiting for its turn to end; ``future`` gets the outcome."""

    message_id: str
    future: asyncio.Future[Outcome]
    turn: int | None = None
    """The turn that claimed the prompt, once one has."""
    cancel_requested: bool = False


class SessionRecord:
    """One ACP session: its agent, the handle's disposer, its mode, its prompt in flight.

    Its :meth:`on_event` hears the session's events (from before the agent is
    published, so it sees every one) and turns them into updates, in order,
    while tracking the prompt in flight.
    """

    def __init__(self, agent: Agent, link: ClientLink, mode: Mode, *, hold: bool) -> None:
        self.agent = agent
        self.mode = mode
        self.always_allowed: set[str] = set()
        self.prompt: PendingPrompt | None = None
        self._link = link
        self._mapper = UpdateMapper(live=True, turn=agent.session.last_turn)
        self._held: list[Event] | None = [] if hold else None
        self._dispose: Callable[[], Awaitable[None]] | None = None

    @property
    def id(self) -> str:
        return self.agent.id

    def adopt(self, handle: AgentHandle) -> None:
        self._dispose = handle.dispose

    async def dispose(self) -> None:
        """Run the agent's teardown (see :class:`~tether.agent.AgentHandle`)."""
        assert self._dispose is not None, "a record is published only with its handle"
        await self._dispose()

    # -- events -----------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        if self._held is not None:
            self._held.append(event)
            return
        self._show(event)

    def replay(self, events: Sequence[Event]) -> None:
        """Send ``events`` as a replay, then the live events held back meanwhile."""
        for update in replay(events):
            self._link.send_update(self.id, update)
        held, self._held = self._held or [], None
        for event in held:
            self._show(event)

    def _show(self, event: Event) -> None:
        for update in self._mapper.updates(event):
            self._link.send_update(self.id, update)
        if self.prompt is not None:
            self._track(self.prompt, event)

    def show_started(self, call_id: str) -> None:
        self._link.send_update(self.id, self._mapper.started(call_id))

    def pending_call(self, invocation: ToolInvocation) -> ToolCallUpdate:
        return self._mapper.pending(invocation.exec.call_id, invocation.tool_name, invocation.args)

    # -- the prompt in flight ---------------------------------------------------------

    def begin_prompt(self, message: UserMessage) -> asyncio.Future[Outcome]:
        """Queue ``message`` as a followup; the future settles with its outcome.

        Raises:
            PromptInFlightError: a prompt of this session has not been answered.
            BridgeClosedError: the agent is being disposed.
        """
        if self.prompt is not None:
            raise PromptInFlightError(self.id)
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self.prompt = PendingPrompt(message.id, future)
        try:
            self.agent.followup(message)
        except AgentDisposedError as exc:
            self.prompt = None
            raise BridgeClosedError(str(exc)) from None
        return future

    def cancel(self) -> None:
        """``session/cancel``: the prompt in flight answers ``cancelled``."""
        if self.prompt is not None:
            self.prompt.cancel_requested = True
        self.agent.cancel(CancelCause.USER)

    def settle_cancelled(self) -> None:
        """Answer the prompt in flight ``cancelled`` (its agent is gone)."""
        if self.prompt is not None:
            self._settle("cancelled")

    def _track(self, prompt: PendingPrompt, event: Event) -> None:
        payload = event.payload
        if isinstance(payload, InboxSpliced) and prompt.message_id in payload.message_ids:
            if payload.op == "claim":
                prompt.turn = self.agent.session.open_turn
            elif payload.op != "insert":
                self._settle("cancelled")
        elif isinstance(payload, TurnEnd) and payload.turn == prompt.turn:
            self._settle(_outcome(payload.reason))

    def _settle(self, outcome: Outcome) -> None:
        prompt, self.prompt = self.prompt, None
        assert prompt is not None
        if prompt.cancel_requested:
            outcome = "cancelled"
        if not prompt.future.done():
            prompt.future.set_result(outcome)


def _outcome(reason: TurnEndReason) -> Outcome:
    if isinstance(reason, Completed):
        return "end_turn"
    if isinstance(reason, Aborted):
        return "cancelled"
    if isinstance(reason, MaxTokens):
        return "max_tokens"
    if isinstance(reason, Blocked):
        return "refusal"
    if step_limit_reached(reason):
        return "max_turn_requests"
    if isinstance(reason, Errored):
        return TurnFailed(reason.error)
    return TurnFailed(f"the turn ended: {reason.kind}")


# -- the bridge ---------------------------------------------------------------------


class Bridge:
    """The sessions of one ACP client; the ``acp`` service."""

    def __init__(self, ctx: Context, config: Config) -> None:
        self._ctx = ctx
        self.config = config
        self._link: ClientLink | None = None
        self._records: dict[str, SessionRecord] = {}
        self._listening: dict[Session, SessionRecord] = {}
        """Records by session, from before their agent is published until its scope unwinds."""
        self._work: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._teardown: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()
        """Set once the teardown has completed."""

    def bind(self, link: ClientLink) -> None:
        """Serve the client behind ``link`` (one per bridge).

        Raises:
            BridgeError: the bridge already serves a client.
        """
        if self._link is not None and self._link is not link:
            raise BridgeError("this bridge already serves a client")
        self._link = link

    @property
    def sessions(self) -> list[SessionRecord]:
        """The published sessions, in the order they were opened."""
        return list(self._records.values())

    def record(self, session_id: str) -> SessionRecord:
        """The session ``session_id``.

        Raises:
            UnknownSessionError: the bridge has no such session.
        """
        record = self._records.get(session_id)
        if record is None:
            raise UnknownSessionError(session_id)
        return record

    # -- session/new, session/load, session/list ----------------------------------

    async def create(self, cwd: str) -> SessionRecord:
        """Create a session (and its agent) working in ``cwd``.

        Raises:
            BridgeClosedError: the bridge is closing (nothing stays registered).
            AgentError: from ``ctx.agents.create``.
        """
        return await self._owned(self._create(cwd))

    async def load(self, session_id: str, cwd: str) -> SessionRecord:
        """Open the stored session ``session_id`` and replay its history to the client.

        Every update of the replay is written before this returns. Loading a
        session this bridge already has open replays it again.

        Raises:
            CwdMismatchError: the session belongs to another directory.
            BridgeClosedError: the bridge is closing (nothing stays registered).
            AgentError, SessionNotFoundError, CorruptLogError: from ``ctx.agents.resume``.
        """
        open_record = self._records.get(session_id)
        if open_record is not None:
            _check_cwd(open_record.agent, cwd)
            open_record.replay(open_record.agent.session.events)
            return open_record
        return await self._owned(self._load(session_id, cwd))

    async def stored_sessions(self, cwd: str | None = None) -> list[SessionSummary]:
        """Readable stored sessions (newest activity first), those of ``cwd`` only if given."""
        persistence = self._ctx.get(PERSISTENCE)
        if persistence is None:
            return []
        summaries: list[SessionSummary] = await persistence.list()
        return [
            summary
            for summary in summaries
            if summary.error is None
            and summary.cwd is not None
            and (cwd is None or _same_dir(summary.cwd, cwd))
        ]

    async def _create(self, cwd: str) -> SessionRecord:
        link = self._check_open()
        built: list[SessionRecord] = []

        async def setup(agent: Agent) -> None:
            record = SessionRecord(agent, link, self.config.mode, hold=False)
            await agent.ctx.effect(lambda: self._listen(record), label="acp updates")
            built.append(record)

        handle = await self._agents.create(cwd=cwd, setup=setup)
        return await self._publish(built[0], handle)

    async def _load(self, session_id: str, cwd: str) -> SessionRecord:
        link = self._check_open()
        built: list[tuple[SessionRecord, int]] = []
        mismatch: list[CwdMismatchError] = []

        async def setup(agent: Agent) -> None:
            try:
                _check_cwd(agent, cwd)
            except CwdMismatchError as exc:
                mismatch.append(exc)
                raise
            record = SessionRecord(agent, link, self.config.mode, hold=True)
            await agent.ctx.effect(lambda: self._listen(record), label="acp updates")
            built.append((record, len(agent.session.events)))

        try:
            handle = await self._agents.resume(session_id, setup=setup)
        except AgentCreateError:
            if mismatch:
                raise mismatch[0] from None
            raise
        record, stored = built[0]
        await self._publish(record, handle)
        record.replay(record.agent.session.events[:stored])
        return record

    async def _publish(self, record: SessionRecord, handle: AgentHandle) -> SessionRecord:
        """Keep ``record`` — unless the bridge began closing meanwhile: then dispose it."""
        record.adopt(handle)
        if self._closing:
            await record.dispose()
            raise BridgeClosedError(
                f"the connection closed while session {record.id!r} was opening; it was disposed"
            )
        self._records[record.id] = record
        return record

    async def acknowledge(self, session_id: str, *, created: bool = False) -> None:
        """Return once everything session ``session_id`` appended so far is on disk.

        Every answer that acknowledges work (``session/new``, ``session/load``,
        ``session/prompt``) waits for it. With ``created``, a session without
        events is stored as its header. A session already disposed was
        flushed by its teardown; nothing is left to wait for.

        Raises:
            NotStoredError: the write failed (the events stay pending and are
                written by the session's next append or acknowledgement).
        """
        record = self._records.get(session_id)
        if record is None:
            return
        session = record.agent.session
        store = self._ctx.service(SESSIONS)
        if not store.is_live(session):
            return
        persistence = self._ctx.get(PERSISTENCE)
        try:
            if created and persistence is not None:
                await persistence.store(session)
            else:
                await store.flush(session)
        except Exception as exc:
            cause = exc.exceptions[0] if isinstance(exc, ExceptionGroup) and exc.exceptions else exc
            if created:
                # Never acknowledged, so the client cannot use it: it goes.
                del self._records[session_id]
                try:
                    await record.dispose()
                except Exception:
                    log.warning("session %s: disposing the unstored session failed", session_id)
            raise NotStoredError(
                f"session {session_id}: its events could not be written to disk: {cause}"
            ) from exc

    # -- session/prompt, session/cancel, session/set_mode -----------------------------

    def prompt(self, session_id: str, message: UserMessage) -> asyncio.Future[Outcome]:
        """Queue ``message`` in session ``session_id``; the future settles with its outcome.

        The message is queued before this returns. The future is never
        cancelled by the bridge; it settles ``cancelled`` when the bridge
        closes.

        Raises:
            UnknownSessionError, PromptInFlightError, BridgeClosedError.
        """
        self._check_open()
        return self.record(session_id).begin_prompt(message)

    def cancel(self, session_id: str) -> None:
        """Cancel the work of session ``session_id`` (``agent.cancel(cause=user)``).

        Raises:
            UnknownSessionError.
        """
        self.record(session_id).cancel()

    def cancel_all(self) -> None:
        """Cancel the work of every session (cause ``user``): the process is asked to end."""
        for record in self._records.values():
            record.cancel()

    def set_mode(self, session_id: str, mode: Mode) -> None:
        """Switch session ``session_id`` to ``mode`` (the next tool call obeys it).

        Raises:
            UnknownSessionError.
        """
        self.record(session_id).mode = mode

    # -- teardown ------------------------------------------------------------------

    def close(self) -> Awaitable[None]:
        """Begin the one teardown (see the module docs) and return an awaitable of it.

        The bridge refuses new work from the moment of the call; every call
        awaits the same single run.
        """
        if self._teardown is None:
            self._closing = True
            self._teardown = asyncio.get_running_loop().create_task(
                self._close(), name="acp-bridge-teardown"
            )
        return asyncio.shield(self._teardown)

    @property
    def closing(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closing

    async def _close(self) -> None:
        records = list(self._records.values())
        for record in records:
            if record.prompt is not None:
                record.prompt.cancel_requested = True
        work = list(self._work)
        outcomes = await asyncio.gather(
            *(record.dispose() for record in records), *work, return_exceptions=True
        )
        self._records.clear()
        for record in records:
            record.settle_cancelled()
        failures = [
            outcome
            for outcome in outcomes
            if isinstance(outcome, Exception) and not isinstance(outcome, BridgeClosedError)
        ]
        if failures:
            log.error(
                "closing the ACP sessions: %d failure(s)",
                len(failures),
                exc_info=ExceptionGroup("ACP bridge teardown", failures),
            )
        log.debug("ACP bridge closed: %d session(s) disposed", len(records))
        self.closed.set()
        self._ctx.emit(CLOSED, self)

    # -- listeners -------------------------------------------------------------------

    def on_session_event(self, session: Session, event: Event) -> None:
        """``session/event``: hand the event to its session's record, if the bridge has one."""
        record = self._listening.get(session)
        if record is not None:
            record.on_event(event)

    def _listen(self, record: SessionRecord) -> Callable[[], None]:
        """Route ``record``'s session events to it; returns the function that stops it.

        Registered on the agent's scope, so it lasts exactly as long as the agent.
        """
        session = record.agent.session
        self._listening[session] = record

        def stop() -> None:
            if self._listening.get(session) is record:
                del self._listening[session]

        return stop

    async def before_execute(
        self,
        invocation: ToolInvocation,
        next_: Callable[[ToolInvocation], Awaitable[ToolInvocation]],
    ) -> ToolInvocation:
        """``tool/before-execute``: apply the session's mode, then report the call running."""
        agent = invocation.exec.agent
        record = self._record_of(agent)
        if record is None or agent is None:
            return await next_(invocation)
        if record.mode is Mode.ASK:
            decision = await self._ctx.serial(PERMISSION_REQUEST, agent, invocation)
            if decision is not PermissionDecision.ALLOW:
                raise Veto(f"the user did not allow this {invocation.tool_name} call")
        record.show_started(invocation.exec.call_id)
        return await next_(invocation)

    async def answer_permission(
        self, agent: Agent, invocation: ToolInvocation
    ) -> PermissionDecision | None:
        """``permission/request`` for the bridge's sessions: ask the client (fail closed)."""
        record = self._record_of(agent)
        if record is None or self._link is None:
            return None
        tool = invocation.tool_name
        if tool in record.always_allowed:
            return PermissionDecision.ALLOW
        options = [
            PermissionOption(option_id=option_id, name=label, kind=kind)
            for option_id, label, kind in OPTIONS
        ]
        asking = asyncio.ensure_future(
            self._link.request_permission(record.id, record.pending_call(invocation), options)
        )
        stopped = asyncio.ensure_future(invocation.exec.signal.wait())
        try:
            await asyncio.wait({asking, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in (asking, stopped):
                waiter.cancel()
            await asyncio.gather(asking, stopped, return_exceptions=True)
        if asking.cancelled():
            return PermissionDecision.REJECT
        if (error := asking.exception()) is not None:
            log.warning(
                "session %s: the permission request failed (%s); rejected", record.id, error
            )
            return PermissionDecision.REJECT
        outcome = asking.result().outcome
        if not isinstance(outcome, AllowedOutcome):
            return PermissionDecision.REJECT
        if outcome.option_id == ALLOW_ALWAYS:
            record.always_allowed.add(tool)
            return PermissionDecision.ALLOW
        if outcome.option_id == ALLOW_ONCE:
            return PermissionDecision.ALLOW
        return PermissionDecision.REJECT

    def forget(self, agent: Agent) -> None:
        """``agent/disposed``: a session disposed by another owner leaves the bridge."""
        record = self._record_of(agent)
        if record is None or self._closing:
            return
        del self._records[record.id]
        record.settle_cancelled()

    # -- internals --------------------------------------------------------------------

    @property
    def _agents(self) -> AgentsView:
        return self._ctx.service(AGENTS)

    def _check_open(self) -> ClientLink:
        if self._closing:
            raise BridgeClosedError("the ACP connection is closing")
        if self._link is None:
            raise BridgeError("the bridge serves no client")
        return self._link

    def _record_of(self, agent: Agent | None) -> SessionRecord | None:
        if agent is None:
            return None
        record = self._records.get(agent.id)
        return record if record is not None and record.agent is agent else None

    async def _owned(self, work: Coroutine[Any, Any, SessionRecord]) -> SessionRecord:
        """Run ``work`` in a task the bridge owns (its teardown awaits it)."""
        try:
            self._check_open()
        except BridgeError:
            work.close()
            raise
        task = asyncio.get_running_loop().create_task(work)
        self._work.add(task)
        task.add_done_callback(self._work_done)
        return await asyncio.shield(task)

    def _work_done(self, task: asyncio.Task[Any]) -> None:
        self._work.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: its awaiter (or the teardown) reports it


def _check_cwd(agent: Agent, cwd: str) -> None:
    stored = agent.session.header.cwd
    if not _same_dir(stored, cwd):
        raise CwdMismatchError(agent.id, stored, cwd)


def _same_dir(a: str, b: str) -> bool:
    return os.path.normpath(a) == os.path.normpath(b)


async def apply(ctx: Context, config: Config) -> None:
    """Provide the ``acp`` service; its sessions and listeners unwind as one effect."""
    bridge = Bridge(ctx, config)
    events = ctx.runtime.events

    def lifecycle() -> Iterator[Callable[[], object]]:
        yield events.add(SESSION_EVENT.name, bridge.on_session_event)
        yield events.add(BEFORE_EXECUTE.name, bridge.before_execute)
        yield events.add(PERMISSION_REQUEST.name, bridge.answer_permission)
        yield events.add(AGENT_DISPOSED.name, bridge.forget)
        # Last in, first out: the sessions close while the listeners still stand.
        yield bridge.close

    await ctx.effect(lifecycle, label="acp bridge")
    ctx.provide(ACP, bridge)
