"""The ACP bridge plugin: the sessions one ACP client owns, and their one teardown.

``tether acp`` mounts this plugin (name ``acp``; it injects ``agents`` and
``sessions`` and reads ``persistence`` when one is mounted). It provides the
``acp`` service, a :class:`Bridge`, which the protocol server
(:mod:`tether.acp.server`) drives on behalf of one client.

**Ownership.** ``session/new`` creates an agent through ``ctx.agents.create``
and ``session/load`` resumes one through ``ctx.agents.resume``; the bridge's
fiber co-owns each agent, and the session's
:class:`~tether.acp.record.SessionRecord` keeps the handle's ``dispose``.
Creates and loads run in tasks the bridge owns, never in the connection's request
handler, so a handler the connection cancels abandons nothing.

**Teardown.** A client disconnect and the plugin's own unload reach one
memoized :meth:`Bridge.close`: the bridge's session host
(:mod:`tether.front.host`) refuses new work, then — in parallel — disposes
every session handle (each dispose cancels the agent's work with cause
``disposed``, awaits quiescence and the durable flush, and detaches the
agent and its session) and awaits every create or load still in flight;
each of those finds the bridge closing, disposes its own unpublished handle
and fails its request. Failures are aggregated and logged. Afterwards no
agent and no session the bridge created is registered, and every pending
prompt has been answered ``cancelled``. The session teardown and the
bridge's listeners are one effect, so the permission policy outlives every
tool call of every session.

**Prompts.** One prompt per session is in flight at a time — but a prompt
sent after a ``session/cancel`` is accepted while the cancelled one is still to
answer, and runs after it (the cancel never touches it). It is queued as a
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
(:mod:`tether.acp.editor_terminal`); through the session host,
``tool/before-execute`` (the call's preview shown, the session's mode
applied, see :mod:`tether.acp.permissions`, the call reported
``in_progress``), ``permission/request`` (asked of the client,
:mod:`tether.acp.asking`) and ``agent/disposed`` (a session disposed by
another owner forgotten).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Annotated, Literal, TypeVar

from msgspec import Meta

from tether.acp.asking import present_to_client
from tether.acp.commands import available_commands, builtin_commands, rewind_commands
from tether.acp.controls import option_changed
from tether.acp.editor_files import EditorFiles
from tether.acp.editor_terminal import EditorTerminals
from tether.acp.errors import (
    BridgeClosedError,
    BridgeError,
    CwdMismatchError,
    McpUnsupportedError,
    NotStoredError,
    UnknownSessionError,
)
from tether.acp.opening import Openings, check_cwd, same_dir
from tether.acp.permissions import Mode
from tether.acp.prompts import Outcome
from tether.acp.record import ClientLink, SessionRecord
from tether.acp.titles import Namer
from tether.agent import (
    Agent,
    AgentCreateError,
    AgentHandle,
    AgentsView,
    UserMessage,
)
from tether.agent.commands import COMMANDS, COMMANDS_CHANGED, CommandRegistry
from tether.agent.registry import AGENTS
from tether.front.asking import Answer, Question
from tether.front.host import SessionHost
from tether.front.rewind import WORKSPACES
from tether.front.seams import CLIENT_TERMINAL, FILE_ACCESS, FileAccess, Terminals
from tether.llm.catalog import ModelCatalog
from tether.llm.service import LLM
from tether.persist.backends.errors import storage_failure
from tether.persist.backends.lease import taken_over
from tether.persist.service import PERSISTENCE
from tether.runtime.keys import Notice, ServiceKey
from tether.runtime.schema import Schema
from tether.session import (
    Event,
    Session,
)
from tether.session.store import SESSION_EVENT
from tether.tools.progress import TOOL_PROGRESS, ToolProgress

if TYPE_CHECKING:
    from tether.mcp.servers import ServerSpec
    from tether.persist.backends.base import SessionSummary
    from tether.runtime import Context
    from tether.tools.preview import ToolPreview

log = logging.getLogger(__name__)

T = TypeVar("T")

name = "acp"
inject = ("agents", "sessions")

CLOSED = Notice["Bridge"]("acp/closed")
"""Emit ``(bridge)`` once the bridge's teardown has completed."""

ACP = ServiceKey["Bridge"]("acp")
"""``ctx.acp``: the bridge (bound to one client connection at a time)."""


class Config(Schema, frozen=True):
    mode: Mode = Mode.ASK
    """The permission mode new sessions start in."""
    title_model: str | None = None
    """The model that names sessions after their first prompt (``None``: the prompt
    names them; see :mod:`tether.acp.titles`)."""
    permission_timeout: Annotated[float, Meta(gt=0)] = 600.0
    """Seconds a permission question may stay unanswered; then it is a rejection."""
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
        self._host: SessionHost[SessionRecord] = SessionHost(
            ctx, self, answer_within=config.permission_timeout, name="ACP bridge"
        )
        self._opening = Openings(self._host)
        """Sessions being loaded or resumed (a close, a cancel or another load finds them)."""
        self._disposing: dict[str, asyncio.Task[None]] = {}
        """The disposals ``session/close`` started, by session, until they end (a load waits)."""
        self._listening: dict[Session, SessionRecord] = {}
        """Records by session, from before their agent is published until its scope unwinds."""
        model = config.title_model
        self._namer = None if model is None else Namer(ctx, self._host, model)
        """Names sessions after their first prompt (with a title model configured)."""
        self._model: str | None = None
        self.closed = asyncio.Event()
        """Set once the teardown has completed."""

    @property
    def host(self) -> SessionHost[SessionRecord]:
        """The sessions the bridge owns, their tool calls' questions, their teardown."""
        return self._host

    def bind(self, link: ClientLink) -> None:
        """Serve the client behind ``link`` (one per bridge).

        Raises:
            BridgeError: the bridge already serves a client.
        """
        if self._link is not None and self._link is not link:
            raise BridgeError("this bridge already serves a client")
        self._link = link

    def use_model(self, model: str) -> None:
        """Create the sessions of every later ``session/new`` on ``model`` (instead of the
        agent loop's); sessions open or being created keep theirs."""
        self._model = model

    @property
    def new_session_model(self) -> str | None:
        """The model :meth:`use_model` chose for new sessions (``None``: the agent loop's)."""
        return self._model

    @property
    def sessions(self) -> list[SessionRecord]:
        """The published sessions, in the order they were opened."""
        return self._host.sessions

    def record(self, session_id: str) -> SessionRecord:
        """The session ``session_id``.

        Raises:
            UnknownSessionError: the bridge has no such session.
        """
        record = self._host.get(session_id)
        if record is None:
            raise UnknownSessionError(session_id)
        return record

    # -- session/new, session/load, session/list ----------------------------------

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
        self, session_id: str, cwd: str, servers: Sequence[ServerSpec] = ()
    ) -> SessionRecord:
        """Open the stored session ``session_id`` and replay its history to the client.

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
                await joined.replay()  # it was a resume: this load replays
            return joined  # else one replay for both: the load in progress sends it
        open_record = self._host.get(session_id)
        if open_record is not None:
            check_cwd(open_record.agent, cwd)
            await open_record.replay()
            return open_record
        attach = self._mcp_setup(servers)
        work = self._load(session_id, cwd, attach, replay=True)
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

    async def close_session(self, session_id: str) -> None:
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
        record = self.record(session_id)
        self._check_open()
        self._host.drop(session_id)
        if self._namer is not None:
            self._namer.cancel(session_id, "the session was closed")
        record.mark_cancelled()
        disposing = self._host.spawn(record.dispose())
        self._disposing[session_id] = disposing
        disposing.add_done_callback(lambda _: self._disposing.pop(session_id, None))
        await asyncio.shield(disposing)

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
                agent, link, self.config.mode, hold=False, catalog=self._catalog, namer=self._namer
            )
            await agent.ctx.effect(lambda: self._listen(record), label="acp updates")
            await attach(agent)
            built.append(record)

        handle = await self._agents.create(cwd=cwd, setup=setup, model=self._model)
        return await self._publish(built[0], handle)

    async def _load(
        self,
        session_id: str,
        cwd: str,
        attach: Callable[[Agent], Awaitable[object]],
        *,
        replay: bool,
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
                agent, link, self.config.mode, hold=True, catalog=self._catalog, namer=self._namer
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
            await record.replay(stored)
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
                raise NotStoredError(str(cause)) from exc
            raise NotStoredError(
                f"session {session_id}: its events could not be stored: {storage_failure(cause)}"
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
        """Cancel the work of session ``session_id`` (``agent.cancel(cause=user)``); a
        session still being loaded is cancelled as soon as it is open.

        Raises:
            UnknownSessionError.
        """
        opening = self._opening.get(session_id)
        if self._host.get(session_id) is None and opening is not None:
            opening.cancelled = True
            return
        self.record(session_id).cancel()

    def cancel_all(self) -> None:
        """Cancel the work of every session (cause ``user``): the process is asked to end."""
        for record in self._host.sessions:
            record.cancel()

    def open_record(self, session_id: str) -> SessionRecord:
        """The session ``session_id``, while the bridge serves its client.

        Raises:
            UnknownSessionError, BridgeClosedError, BridgeError: it serves no client.
        """
        self._check_open()
        return self.record(session_id)

    @property
    def commands(self) -> CommandRegistry | None:
        """The command registry, when one is mounted."""
        return self._ctx.get(COMMANDS)

    def on_commands_changed(self, registry: CommandRegistry) -> None:
        """``commands/changed``: tell every session's client what is available now."""
        update = available_commands(registry)
        for record in self._host.sessions:
            record.send(update)

    # -- teardown ------------------------------------------------------------------

    def close(self) -> Awaitable[None]:
        """Begin the one teardown (see the module docs) and return an awaitable of it.

        The bridge refuses new work from the moment of the call; every call
        awaits the same single run.
        """
        return self._host.close()

    @property
    def closing(self) -> bool:
        """True once :meth:`close` was called."""
        return self._host.closing

    # -- what the session host asks of the bridge ---------------------------------------

    expected: tuple[type[Exception], ...] = (BridgeClosedError,)

    def refusal(self, opening: str | None) -> BridgeClosedError:
        if opening is None:
            return BridgeClosedError("the ACP connection is closing")
        return BridgeClosedError(
            f"the connection closed while session {opening!r} was opening; it was disposed"
        )

    def governs(self, agent: Agent) -> bool:
        return self._host.session_of(agent) is not None

    def mode(self, governing: Agent) -> Mode:
        record = self._host.session_of(governing)
        assert record is not None, "the bridge governs its own sessions only"
        return record.mode

    def previewed(self, governing: Agent, agent: Agent, call_id: str, preview: ToolPreview) -> None:
        # A child agent's calls are asked in its root's session, but shown
        # only through the parent's own task call.
        record = self._host.session_of(agent)
        if record is not None:
            record.show_preview(call_id, preview)

    def started(self, governing: Agent, agent: Agent, call_id: str) -> None:
        record = self._host.session_of(agent)
        if record is not None:
            record.show_started(call_id)

    async def present(self, question: Question) -> Answer:
        """Ask the client (see :mod:`tether.acp.asking`)."""
        record = self._host.session_of(question.governing)
        if record is None or self._link is None:
            return Answer.REJECT
        return await present_to_client(self._link, record, question)

    def on_forgotten(self, agent: Agent) -> None:
        pass  # the client learns it when it uses the session

    def on_closing(self) -> None:
        if self._namer is not None:
            self._namer.cancel_all("the ACP connection is closing")
        for record in self._host.sessions:
            record.mark_cancelled()

    def on_closed(self, disposed: int) -> None:
        self.closed.set()
        self._ctx.emit(CLOSED, self)

    # -- listeners -------------------------------------------------------------------

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

    def on_tool_progress(self, agent: Agent, progress: ToolProgress) -> None:
        """``tool/progress``: show a running call of one of the bridge's sessions in it."""
        record = self._host.session_of(agent)
        if record is not None:
            record.show_progress(progress)

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

    def file_access(self, agent: Agent, disk: FileAccess) -> FileAccess | None:
        """``fs/access``: the editor's buffers for the bridge's sessions, when the client
        serves files (see :mod:`tether.acp.editor_files`)."""
        record = self._host.session_of(agent) or self._listening.get(agent.session)
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
        record = self._host.session_of(agent) or self._listening.get(agent.session)
        link = self._link
        if record is None or link is None or self.config.terminal != "client":
            return None
        return EditorTerminals(link, record) if link.features.terminal else None

    # -- internals --------------------------------------------------------------------

    @property
    def _agents(self) -> AgentsView:
        return self._ctx.service(AGENTS)

    @property
    def _catalog(self) -> ModelCatalog:
        llm = self._ctx.get(LLM)
        return ModelCatalog() if llm is None else llm.catalog

    def _check_open(self) -> ClientLink:
        self._host.check_open()
        if self._link is None:
            raise BridgeError("the bridge serves no client")
        return self._link

    def record_of(self, agent: Agent | None) -> SessionRecord | None:
        """The bridge's record of ``agent``, if it is one of the bridge's sessions."""
        return self._host.session_of(agent)


async def _nothing(agent: Agent) -> None:
    """The MCP setup of a session the client offered no servers for."""


async def apply(ctx: Context, config: Config) -> None:
    """Provide the ``acp`` service; its sessions and listeners unwind as one effect."""
    bridge = Bridge(ctx, config)

    def lifecycle() -> Iterator[Callable[[], object]]:
        yield ctx.listen(SESSION_EVENT, bridge.on_session_event)
        yield from bridge.host.listening()
        yield ctx.listen(FILE_ACCESS, bridge.file_access)
        yield ctx.listen(CLIENT_TERMINAL, bridge.client_terminal)
        yield ctx.listen(COMMANDS_CHANGED, bridge.on_commands_changed)
        yield ctx.listen(TOOL_PROGRESS, bridge.on_tool_progress)
        # Last in, first out: the sessions close while the listeners still stand.
        yield bridge.close

    await ctx.effect(lifecycle, label="acp bridge")
    commands = ctx.get(COMMANDS)
    if commands is not None:
        for command in builtin_commands(bridge.record_of, option_changed):
            await commands.register(command)
        workspaces = ctx.get(WORKSPACES)
        if workspaces is not None:
            for command in rewind_commands(workspaces, lambda: ctx.get(PERSISTENCE)):
                await commands.register(command)
    ctx.provide(ACP, bridge)
