"""The ACP bridge plugin: the sessions one ACP client owns, and their one teardown.

``tether acp`` mounts this plugin (name ``acp``; it injects ``agents`` and
``sessions`` and reads ``persistence`` when one is mounted). It provides the
``acp`` service, a :class:`Bridge`, which the protocol server
(:mod:`tether.acp.server`) drives on behalf of one client.

**Ownership.** ``session/new`` creates an agent through ``ctx.agents.create``
and ``session/load`` resumes one through ``ctx.agents.resume``; the bridge's
fiber co-owns each agent, and the session's
:class:`~tether.acp.record.SessionRecord` keeps the handle's ``dispose``.
Creates and loads run in tasks the bridge owns, never in the SDK's request
handler, so a handler the SDK cancels abandons nothing.

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
``fs/access`` serves the file tools from the editor's buffers when the
client offers them (:mod:`tether.acp.editor_files`); ``shell/client-terminal``
runs foreground commands in the client's terminals when chosen
(:mod:`tether.acp.editor_terminal`); ``tool/before-execute``
shows the call's preview, applies the session's mode (see
:mod:`tether.acp.permissions`) and reports a call as ``in_progress``;
``permission/request`` asks the client for the bridge's own sessions;
``agent/disposed`` forgets a session disposed by another owner.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from tether.acp.asking import ask_client
from tether.acp.editor_files import EditorFiles
from tether.acp.editor_terminal import EditorTerminals
from tether.acp.errors import (
    BridgeClosedError,
    BridgeError,
    CwdMismatchError,
    NotStoredError,
    UnknownSessionError,
)
from tether.acp.permissions import PERMISSION_REQUEST, Mode, PermissionDecision
from tether.acp.prompts import Outcome
from tether.acp.record import ClientLink, SessionRecord
from tether.agent import (
    Agent,
    AgentCreateError,
    AgentHandle,
    AgentsView,
    UserMessage,
)
from tether.agent.events import AGENT_DISPOSED
from tether.agent.registry import AGENTS
from tether.persist.service import PERSISTENCE
from tether.plugins.fs.access import FILE_ACCESS, FileAccess
from tether.plugins.fs.errors import FileToolError
from tether.plugins.terminal import CLIENT_TERMINAL, Terminals
from tether.runtime import Veto
from tether.runtime.keys import Notice, ServiceKey
from tether.session import (
    Event,
    Session,
)
from tether.session.store import SESSION_EVENT, SESSIONS
from tether.tools.execute import BEFORE_EXECUTE, ToolInvocation
from tether.tools.preview import ToolPreview

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
    terminal: Literal["local", "client"] = "local"
    """Where foreground ``bash`` commands run: locally, or in the client's terminals
    (when the client advertises ``terminal``; see :mod:`tether.acp.editor_terminal`)."""


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
        """``tool/before-execute``: show the call's preview, apply the session's mode (a
        call whose preview needs approval is asked in any mode), then report it running.

        An allowed call goes on marked ``approved``.
        """
        agent = invocation.exec.agent
        record = self._record_of(agent)
        if record is None or agent is None:
            return await next_(invocation)
        call_id = invocation.exec.call_id
        preview = await _preview_of(invocation)
        if preview is not None:
            record.show_preview(call_id, preview)
            record.previews[call_id] = preview
        try:
            needs_approval = preview is not None and preview.approval is not None
            if record.mode is Mode.ASK or needs_approval:
                decision = await self._ctx.serial(PERMISSION_REQUEST, agent, invocation)
                if decision is not PermissionDecision.ALLOW:
                    raise Veto(f"the user did not allow this {invocation.tool_name} call")
                invocation = replace(invocation, exec=replace(invocation.exec, approved=True))
        finally:
            record.previews.pop(call_id, None)
        record.show_started(call_id)
        return await next_(invocation)

    async def answer_permission(
        self, agent: Agent, invocation: ToolInvocation
    ) -> PermissionDecision | None:
        """``permission/request`` for the bridge's sessions: ask the client (fail closed)."""
        record = self._record_of(agent)
        if record is None or self._link is None:
            return None
        return await ask_client(self._link, record, invocation)

    def file_access(self, agent: Agent, disk: FileAccess) -> FileAccess | None:
        """``fs/access``: the editor's buffers for the bridge's sessions, when the client
        serves files (see :mod:`tether.acp.editor_files`)."""
        record = self._record_of(agent) or self._listening.get(agent.session)
        link = self._link
        if record is None or link is None:
            return None
        features = link.features
        if not (features.read_text_file or features.write_text_file):
            return None
        return EditorFiles(link, record.id, features, disk)

    def client_terminal(self, agent: Agent) -> Terminals | None:
        """``shell/client-terminal``: the client's terminals for the bridge's sessions, when
        the client advertises them and the ``terminal`` setting chooses them."""
        record = self._record_of(agent) or self._listening.get(agent.session)
        link = self._link
        if record is None or link is None or self.config.terminal != "client":
            return None
        return EditorTerminals(link, record) if link.features.terminal else None

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


async def _preview_of(invocation: ToolInvocation) -> ToolPreview | None:
    """The call's preview, or ``None``: none given, bad input (the call itself will
    answer it with the reason), or the tool's preview failed (logged)."""
    try:
        return await invocation.preview()
    except FileToolError as exc:
        log.debug("no preview of a %s call: %s", invocation.tool_name, exc)
        return None
    except Exception:
        log.warning("the preview of a %s call failed", invocation.tool_name, exc_info=True)
        return None


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
        yield events.add(FILE_ACCESS.name, bridge.file_access)
        yield events.add(CLIENT_TERMINAL.name, bridge.client_terminal)
        yield events.add(AGENT_DISPOSED.name, bridge.forget)
        # Last in, first out: the sessions close while the listeners still stand.
        yield bridge.close

    await ctx.effect(lifecycle, label="acp bridge")
    ctx.provide(ACP, bridge)
