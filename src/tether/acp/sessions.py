"""The sessions of one ACP connection: how each is opened, fed its events, and closed.

:class:`ClientSessions` is the part of the bridge (:mod:`tether.acp.bridge`)
that changes when the ways a session opens change: ``session/new`` creates
an agent through ``ctx.agents.create``; ``session/load`` and
``session/resume`` resume one through ``ctx.agents.resume`` (with or without
a replay of its history); ``session/fork`` stores a branch
(:func:`tether.front.rewind.fork_session`) and resumes it; ``session/close``
disposes one; ``session/delete`` disposes it if open and removes its log.
Every open runs in a task the session host owns (:mod:`tether.front.host`),
never in the connection's request handler, and
publishes its record or disposes its handle (publish-or-dispose). Loads in
progress are joined, closed and cancelled through :mod:`tether.acp.opening`.

Each record is fed its session's events by one ``session/event`` listener
for all sessions (:meth:`ClientSessions.on_session_event`), registered on
the agent's scope so it lasts exactly as long as the agent; an event of a
child agent goes to the parent's record, shown in the ``task`` call that
started the child.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from tether.acp.errors import (
    BridgeError,
    CwdMismatchError,
    McpUnsupportedError,
    NotStoredError,
    UnknownSessionError,
)
from tether.acp.opening import Openings, check_cwd, same_dir
from tether.acp.record import SessionRecord
from tether.agent import AgentCreateError
from tether.agent.registry import AGENTS
from tether.front.rewind import WORKSPACES, Forked, fork_session
from tether.llm.catalog import ModelCatalog
from tether.llm.service import LLM
from tether.persist.backends.errors import storage_failure
from tether.persist.backends.lease import taken_over
from tether.persist.service import PERSISTENCE

if TYPE_CHECKING:
    from tether.acp.permissions import Mode
    from tether.acp.record import ClientLink
    from tether.acp.titles import Namer
    from tether.agent import Agent, AgentHandle, AgentsView
    from tether.front.host import SessionHost
    from tether.mcp.servers import ServerSpec
    from tether.persist.backends.base import SessionSummary
    from tether.runtime import Context
    from tether.session import Event, Session


class ClientSessions:
    """Opens, feeds and closes the sessions of one connection (see the module docs)."""

    def __init__(
        self,
        ctx: Context,
        host: SessionHost[SessionRecord],
        *,
        mode: Mode,
        namer: Namer | None,
        check_open: Callable[[], ClientLink],
    ) -> None:
        self._ctx = ctx
        self._host = host
        self._mode = mode
        self._namer = namer
        self._check_open = check_open
        self.model: str | None = None
        """The model new sessions are created on (``None``: the agent loop's)."""
        self._opening = Openings(host)
        """Sessions being loaded or resumed (a close, a cancel or another load finds them)."""
        self._disposing: dict[str, asyncio.Task[None]] = {}
        """The disposals ``session/close`` started, by session, until they end (a load waits)."""
        self._listening: dict[Session, SessionRecord] = {}
        """Records by session, from before their agent is published until its scope unwinds."""

    def opening(self, session_id: str) -> bool:
        """Whether ``session_id`` is being loaded or resumed."""
        return self._opening.get(session_id) is not None

    def mark_cancelled(self, session_id: str) -> None:
        """Cancel session ``session_id`` as soon as its load in progress has opened it."""
        opening = self._opening.get(session_id)
        assert opening is not None, "only a session being opened is cancelled later"
        opening.cancelled = True

    def record_of(self, agent: Agent) -> SessionRecord | None:
        """The record of ``agent``'s session: published, or still being opened."""
        return self._host.session_of(agent) or self._listening.get(agent.session)

    async def create(self, cwd: str, servers: Sequence[ServerSpec] = ()) -> SessionRecord:
        """Create a session (and its agent) working in ``cwd``, with the MCP ``servers``
        the client offered started in the agent's scope (see :mod:`tether.mcp.plugin`).

        Raises:
            BridgeClosedError: the bridge is closing (nothing stays registered).
            McpUnsupportedError: servers were offered, and no ``mcp`` plugin runs.
            AgentError: from ``ctx.agents.create``.
        """
        attach = self._mcp_setup(servers)
        return await self._host.owned(self._create(cwd, attach))

    async def load(
        self, session_id: str, cwd: str, servers: Sequence[ServerSpec] = (), *, start: int = 0
    ) -> SessionRecord:
        """Open the stored session ``session_id`` and replay its history, from seq
        ``start`` on, to the client.

        Every update of the replay is written before this returns. Loading a
        session this bridge already has open replays it again; a load sent
        while another load of the session is in progress waits for that one
        and answers with the same session, without a second replay (it fails
        as that one failed).

        ``servers`` are started as for :meth:`create` (a session already open
        keeps the servers it has).

        Raises:
            CwdMismatchError: the session belongs to another directory.
            BridgeClosedError: the bridge is closing (nothing stays registered).
            McpUnsupportedError: servers were offered, and no ``mcp`` plugin runs.
            AgentError, SessionNotFoundError, CorruptLogError: from ``ctx.agents.resume``.
        """
        # The opening entry first: a load publishes its record before its replay
        # has ended, and the session is not open for others until then.
        opening = self._opening.get(session_id)
        if opening is not None:
            joined = await opening.joined(cwd)
            if not opening.replays:
                await joined.replay(start=start)  # it was a resume: this load replays
            return joined  # else one replay for both: the load in progress sends it
        open_record = self._host.get(session_id)
        if open_record is not None:
            check_cwd(open_record.agent, cwd)
            await open_record.replay(start=start)
            return open_record
        attach = self._mcp_setup(servers)
        work = self._load(session_id, cwd, attach, replay=True, start=start)
        return await self._opening.open(session_id, work, replays=True, check=self._check_open)

    async def resume(
        self, session_id: str, cwd: str, servers: Sequence[ServerSpec] = ()
    ) -> SessionRecord:
        """Open the stored session ``session_id`` without replaying its history.

        The client keeps what it already shows; live updates follow from here.
        Resuming a session this bridge already has open (or is opening: once
        it is open) returns it as it is.
        ``servers`` are started as for :meth:`load`.

        Raises:
            As :meth:`load`.
        """
        opening = self._opening.get(session_id)
        if opening is not None:
            return await opening.joined(cwd)
        open_record = self._host.get(session_id)
        if open_record is not None:
            check_cwd(open_record.agent, cwd)
            return open_record
        attach = self._mcp_setup(servers)
        work = self._load(session_id, cwd, attach, replay=False)
        return await self._opening.open(session_id, work, replays=False, check=self._check_open)

    async def fork(
        self,
        session_id: str,
        cwd: str,
        servers: Sequence[ServerSpec] = (),
        *,
        seq: int | None = None,
    ) -> tuple[SessionRecord, Forked]:
        """Store a branch of session ``session_id`` holding its first ``seq`` events
        (``None``: every event it has), and open the branch as :meth:`resume` opens a
        session (no replay; a ``session/load`` of it replays the shared history).

        The parent is left as it was: one open here has its events on disk
        first, a stored one is read, never opened (it may be live elsewhere).
        The branch's header names the parent and ``seq`` (see
        :func:`tether.front.rewind.fork_session`).

        Raises:
            CwdMismatchError: the parent belongs to another directory.
            RewindError: ``seq`` is not from 1 to the parent's number of events.
            BridgeError: there are no stored sessions (no persistence row).
            McpUnsupportedError: servers were offered, and no ``mcp`` plugin runs
                (nothing is stored).
            SessionNotFoundError, CorruptLogError: from reading the parent.
            As :meth:`resume`, for the branch.
        """
        self._check_open()
        self._mcp_setup(servers)  # refused before anything is stored
        persistence = self._ctx.get(PERSISTENCE)
        if persistence is None:
            raise BridgeError("a fork needs stored sessions (no persistence row)")
        open_record = self._host.get(session_id)
        if open_record is not None:
            await self.acknowledge(session_id)
            parent = open_record.agent.session
        else:
            parent = await persistence.load(session_id)
        if not same_dir(parent.header.cwd, cwd):
            raise CwdMismatchError(session_id, parent.header.cwd, cwd)
        workspaces = self._ctx.get(WORKSPACES)
        forked = await fork_session(persistence, workspaces, parent, turn=None, seq=seq)
        return await self.resume(forked.id, cwd, servers), forked

    async def close(self, session_id: str) -> None:
        """Dispose session ``session_id``'s agent; its log stays stored.

        A prompt in flight answers ``cancelled``. When this returns, the
        session's closing events are on disk and it can be loaded again. A
        session still being loaded or resumed is closed once it is open; if
        its load fails, nothing is open and there is nothing to close.

        Raises:
            UnknownSessionError: the bridge has no such session (open or opening).
            BridgeClosedError: the bridge is closing (it disposes the session anyway).
        """
        opening = self._opening.get(session_id)
        if opening is not None and (
            not await opening.ended() or self._host.get(session_id) is None
        ):
            return  # the load failed, or another close came first: nothing is open
        record = self._record(session_id)
        self._check_open()
        self._host.drop(session_id)
        if self._namer is not None:
            self._namer.cancel(session_id, "the session was closed")
        record.mark_cancelled()
        disposing = self._host.spawn(record.dispose())
        self._disposing[session_id] = disposing
        disposing.add_done_callback(lambda _: self._disposing.pop(session_id, None))
        await asyncio.shield(disposing)

    async def delete(self, session_id: str) -> None:
        """Delete stored session ``session_id``: closed first when it is open (or being
        opened) on this connection, then its log is removed from the store.

        Raises:
            NotStoredError: this tether stores no sessions.
            SessionNotFoundError: nothing is stored under this id.
            SessionConflictError: the session is open elsewhere in this process.
            SessionLeasedError: another process has the session open.
        """
        if self._host.get(session_id) is not None or self.opening(session_id):
            await self.close(session_id)
        disposing = self._disposing.get(session_id)
        if disposing is not None:
            await asyncio.shield(disposing)
        persistence = self._ctx.get(PERSISTENCE)
        if persistence is None:
            raise NotStoredError("this tether stores no sessions: there is nothing to delete")
        await persistence.delete(session_id)

    async def stored(self, cwd: str | None = None) -> list[SessionSummary]:
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
            and (cwd is None or same_dir(summary.cwd, cwd))
        ]

    def _mcp_setup(self, servers: Sequence[ServerSpec]) -> Callable[[Agent], Awaitable[object]]:
        """What starts ``servers`` in an agent's scope during its setup.

        Raises:
            McpUnsupportedError: there are servers and no ``mcp`` plugin.
        """
        if not servers:
            return _nothing
        from tether.mcp.plugin import MCP

        mcp = self._ctx.get(MCP)
        if mcp is None:
            raise McpUnsupportedError()
        return lambda agent: mcp.attach(agent, servers)

    async def _create(
        self, cwd: str, attach: Callable[[Agent], Awaitable[object]]
    ) -> SessionRecord:
        link = self._check_open()
        built: list[SessionRecord] = []

        async def setup(agent: Agent) -> None:
            record = SessionRecord(
                agent, link, self._mode, hold=False, catalog=self._catalog, namer=self._namer
            )
            await agent.ctx.effect(lambda: self._listen(record), label="acp updates")
            await attach(agent)
            built.append(record)

        handle = await self._agents.create(cwd=cwd, setup=setup, model=self.model)
        return await self._publish(built[0], handle)

    async def _load(
        self,
        session_id: str,
        cwd: str,
        attach: Callable[[Agent], Awaitable[object]],
        *,
        replay: bool,
        start: int = 0,
    ) -> SessionRecord:
        disposing = self._disposing.get(session_id)
        if disposing is not None:
            # A close of this session still runs: the session is live until it ends.
            await asyncio.wait({disposing})
        link = self._check_open()
        built: list[tuple[SessionRecord, int]] = []
        mismatch: list[CwdMismatchError] = []

        async def setup(agent: Agent) -> None:
            try:
                check_cwd(agent, cwd)
            except CwdMismatchError as exc:
                mismatch.append(exc)
                raise
            record = SessionRecord(
                agent, link, self._mode, hold=True, catalog=self._catalog, namer=self._namer
            )
            await agent.ctx.effect(lambda: self._listen(record), label="acp updates")
            await attach(agent)
            built.append((record, len(agent.session.events)))

        try:
            handle = await self._agents.resume(session_id, setup=setup)
        except AgentCreateError:
            if mismatch:
                raise mismatch[0] from None
            raise
        record, stored = built[0]
        await self._publish(record, handle)
        if replay:
            await record.replay(stored, start)
        else:
            record.attach()
        return record

    async def _publish(self, record: SessionRecord, handle: AgentHandle) -> SessionRecord:
        record.adopt(handle)
        return await self._host.publish(record)

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
        record = self._host.get(session_id)
        if record is None:
            return
        try:
            await self._host.store(record, created=created)
        except Exception as exc:
            cause = exc.exceptions[0] if isinstance(exc, ExceptionGroup) and exc.exceptions else exc
            if taken_over(exc) is not None:
                # Not a failure to store: the session is another host's now.
                record.notify("error", "Session taken over", str(cause))
                raise NotStoredError(str(cause)) from exc
            raise NotStoredError(
                f"session {session_id}: its events could not be stored: {storage_failure(cause)}"
            ) from exc

    def on_session_event(self, session: Session, event: Event) -> None:
        """``session/event``: hand the event to its session's record, if the bridge has one;
        an event of a child agent of one of the bridge's sessions goes to that session,
        to be shown in the ``task`` call that started the child."""
        record = self._listening.get(session)
        if record is not None:
            record.on_event(event)
            return
        lineage = session.header.lineage
        delegation = None if lineage is None else lineage.delegation
        if lineage is None or delegation is None or delegation.background:
            return  # a background child's call has answered already
        record = self._host.get(lineage.parent)
        if record is not None:
            record.show_child(delegation.call, event)

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

    def _record(self, session_id: str) -> SessionRecord:
        record = self._host.get(session_id)
        if record is None:
            raise UnknownSessionError(session_id)
        return record

    @property
    def _agents(self) -> AgentsView:
        return self._ctx.service(AGENTS)

    @property
    def _catalog(self) -> ModelCatalog:
        llm = self._ctx.get(LLM)
        return ModelCatalog() if llm is None else llm.catalog


async def _nothing(agent: Agent) -> None:
    """The MCP setup of a session the client offered no servers for."""
