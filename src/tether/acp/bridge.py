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
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from tether.acp.asking import ask_client
from tether.acp.commands import available_commands, builtin_commands, run_command
from tether.acp.editor_files import EditorFiles
from tether.acp.editor_terminal import EditorTerminals
from tether.acp.errors import (
    BridgeClosedError,
    BridgeError,
    CwdMismatchError,
    McpUnsupportedError,
    NotStoredError,
    SessionIdleError,
    UnknownSessionError,
)
from tether.acp.options import (
    OPTION_IDS,
    UnknownOptionError,
    check_model,
    config_options,
    model_choices,
    parse_mode,
)
from tether.acp.permissions import PERMISSION_REQUEST, Mode, PermissionDecision
from tether.acp.prompts import Outcome
from tether.acp.record import ClientLink, SessionRecord
from tether.acp.titles import generate_title
from tether.agent import (
    Agent,
    AgentCreateError,
    AgentDisposedError,
    AgentHandle,
    AgentsView,
    UserMessage,
)
from tether.agent.commands import COMMANDS, COMMANDS_CHANGED, CommandRegistry, parse_command
from tether.agent.events import AGENT_DISPOSED
from tether.agent.registry import AGENTS
from tether.agent.types import AgentStatus, Target
from tether.llm.catalog import ModelCatalog
from tether.llm.service import LLM
from tether.persist.backends.errors import storage_failure
from tether.persist.backends.lease import taken_over
from tether.persist.service import PERSISTENCE, store_created
from tether.plugins.fs.access import FILE_ACCESS, FileAccess
from tether.plugins.fs.errors import FileToolError
from tether.plugins.terminal import CLIENT_TERMINAL, Terminals
from tether.runtime import CancelSignal
from tether.runtime.keys import Notice, ServiceKey
from tether.session import (
    Event,
    Session,
)
from tether.session.settings import MODE_OPTION, MODEL_OPTION, SessionTitled
from tether.session.store import SESSION_EVENT, SESSIONS
from tether.tools.execute import BEFORE_EXECUTE, ToolInvocation
from tether.tools.permission import approve
from tether.tools.preview import ToolPreview

if TYPE_CHECKING:
    from tether.acp.updates import SessionUpdate
    from tether.agent.commands import Command
    from tether.mcp.servers import ServerSpec
    from tether.persist.backends.base import SessionSummary
    from tether.runtime import Context

log = logging.getLogger(__name__)

T = TypeVar("T")

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
    title_model: str | None = None
    """The model that names sessions after their first prompt (``None``: the prompt
    names them; see :mod:`tether.acp.titles`)."""
    permission_timeout: float = Field(default=600.0, gt=0)
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
        self._records: dict[str, SessionRecord] = {}
        self._opening: dict[str, _Opening] = {}
        """Sessions being loaded or resumed, by id, from the moment the request begins until
        the load has ended (published or failed): a close, a cancel or another load finds them."""
        self._disposing: dict[str, asyncio.Task[None]] = {}
        """The disposals ``session/close`` started, by session, until they end (a load waits)."""
        self._listening: dict[Session, SessionRecord] = {}
        """Records by session, from before their agent is published until its scope unwinds."""
        self._work: set[asyncio.Task[Any]] = set()
        self._naming: dict[str, CancelSignal] = {}
        """The signals of title requests still running, by session (a close cancels them)."""
        self._closing = False
        self._teardown: asyncio.Task[None] | None = None
        self._model: str | None = None
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

    async def create(self, cwd: str, servers: Sequence[ServerSpec] = ()) -> SessionRecord:
        """Create a session (and its agent) working in ``cwd``, with the MCP ``servers``
        the client offered started in the agent's scope (see :mod:`tether.mcp.plugin`).

        Raises:
            BridgeClosedError: the bridge is closing (nothing stays registered).
            McpUnsupportedError: servers were offered, and no ``mcp`` plugin runs.
            AgentError: from ``ctx.agents.create``.
        """
        attach = self._mcp_setup(servers)
        return await self._owned(self._create(cwd, attach))

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
        open_record = self._records.get(session_id)
        if open_record is not None:
            _check_cwd(open_record.agent, cwd)
            await open_record.replay()
            return open_record
        attach = self._mcp_setup(servers)
        work = self._load(session_id, cwd, attach, replay=True)
        return await self._open(session_id, work, replays=True)

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
        open_record = self._records.get(session_id)
        if open_record is not None:
            _check_cwd(open_record.agent, cwd)
            return open_record
        attach = self._mcp_setup(servers)
        work = self._load(session_id, cwd, attach, replay=False)
        return await self._open(session_id, work, replays=False)

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
        if opening is not None and (not await opening.ended() or session_id not in self._records):
            return  # the load failed, or another close came first: nothing is open
        record = self.record(session_id)
        self._check_open()
        del self._records[session_id]
        naming = self._naming.pop(session_id, None)
        if naming is not None:
            naming.cancel("the session was closed")
        record.mark_cancelled()
        disposing = self._spawn(record.dispose())
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
            and (cwd is None or _same_dir(summary.cwd, cwd))
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
                _check_cwd(agent, cwd)
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
        try:
            if created:
                await store_created(self._ctx, session)
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
        if session_id not in self._records and opening is not None:
            opening.cancelled = True
            return
        self.record(session_id).cancel()

    def cancel_all(self) -> None:
        """Cancel the work of every session (cause ``user``): the process is asked to end."""
        for record in self._records.values():
            record.cancel()

    def set_mode(self, session_id: str, mode: Mode) -> None:
        """Switch session ``session_id`` to ``mode`` (the next tool call obeys it).

        The change is logged; the client is told (:meth:`option_changed`).

        Raises:
            UnknownSessionError.
        """
        record = self.record(session_id)
        if record.set_mode(mode):
            self.option_changed(record, MODE_OPTION)

    def options(self, record: SessionRecord) -> list[dict[str, object]]:
        """``record``'s ``configOptions`` now (see :mod:`tether.acp.options`)."""
        return config_options(
            record.catalog, configured=record.configured_model, model=record.model, mode=record.mode
        )

    def set_option(self, session_id: str, option: str, value: object) -> list[dict[str, object]]:
        """Set configuration option ``option`` of session ``session_id``; the options after.

        ``model`` takes effect at the next model request, ``mode`` at the next
        tool call; both are logged (``session/config``). A mode change is also
        told as updates (:meth:`option_changed`), for clients that show the
        mode apart from the options.

        Raises:
            UnknownSessionError, UnknownOptionError: an unknown option or value.
        """
        record = self.record(session_id)
        if not isinstance(value, str):
            raise UnknownOptionError(f"option {option!r} takes a string value, got {value!r}")
        if option == MODE_OPTION:
            if record.set_mode(parse_mode(value)):
                self.option_changed(record, MODE_OPTION)
        elif option == MODEL_OPTION:
            choices = model_choices(record.catalog, record.configured_model, record.model)
            record.set_model(check_model(value, choices))
        else:
            known = ", ".join(repr(each) for each in OPTION_IDS)
            raise UnknownOptionError(f"unknown config option {option!r}; the options are {known}")
        return self.options(record)

    def option_changed(self, record: SessionRecord, option: str) -> None:
        """Tell the client that ``option`` of ``record`` changed: ``current_mode_update``
        for the mode, then ``config_option_update`` with every option."""
        if option == MODE_OPTION:
            mode = record.mode.value
            record.send({"sessionUpdate": "current_mode_update", "currentModeId": mode})
        options = self.options(record)
        record.send({"sessionUpdate": "config_option_update", "configOptions": options})

    # -- slash commands, steering ------------------------------------------------------

    @property
    def commands(self) -> CommandRegistry | None:
        """The command registry, when one is mounted."""
        return self._ctx.get(COMMANDS)

    def commands_update(self) -> SessionUpdate:
        """The ``available_commands_update`` for the commands registered now."""
        return available_commands(self.commands)

    def command_for(self, message: UserMessage) -> tuple[Command, str] | None:
        """The registered command ``message`` runs, with its argument, if it names one."""
        registry = self.commands
        if registry is None or len(message.content) != 1:
            return None
        parsed = parse_command(message.plain_text)
        if parsed is None:
            return None
        command = registry.get(parsed[0])
        return None if command is None else (command, parsed[1])

    async def run_command(self, session_id: str, command: Command, argument: str) -> None:
        """Run ``command`` in session ``session_id``; its answer goes to the client.

        Raises:
            UnknownSessionError, BridgeClosedError, CommandError, BridgeError.
        """
        self._check_open()
        record = self.record(session_id)
        answer = await run_command(command, record, argument)
        if answer:
            record.send({"sessionUpdate": "agent_message_chunk", "content": _text(answer)})

    async def steer(self, session_id: str, message: UserMessage) -> None:
        """Deliver ``message`` to the running turn of ``session_id`` at its next step;
        return once it is stored (:meth:`~tether.agent.Agent.submit`).

        Raises:
            UnknownSessionError, BridgeClosedError,
            SessionIdleError: no turn runs and no prompt is in flight.
            NotStoredError (of the agent layer): it could not be stored; it never runs.
        """
        self._check_open()
        record = self.record(session_id)
        if record.agent.status is not AgentStatus.RUNNING and not record.answering:
            raise SessionIdleError(session_id)
        await _submit(record.agent, message, Target.STEERING)

    async def queue(self, session_id: str, message: UserMessage) -> None:
        """Queue ``message`` as its own next turn of ``session_id``; return once it is
        stored, without waiting for its turn (:meth:`~tether.agent.Agent.submit`).

        Raises:
            UnknownSessionError, BridgeClosedError,
            NotStoredError (of the agent layer): it could not be stored; it never runs.
        """
        self._check_open()
        await _submit(self.record(session_id).agent, message, Target.QUEUED)

    @property
    def _namer(self) -> Callable[[SessionRecord, str], None] | None:
        return None if self.config.title_model is None else self.name_session

    def name_session(self, record: SessionRecord, prompt: str) -> None:
        """Have the title model name ``record``'s session after ``prompt``, in a task the
        bridge owns; the title is logged (``session/title``) if the session is still open."""
        llm = self._ctx.get(LLM)
        model = self.config.title_model
        if self._closing or llm is None or model is None:
            return
        signal = self._naming[record.id] = CancelSignal()

        async def name() -> None:
            try:
                title = await generate_title(llm, model, prompt, signal)
            finally:
                if self._naming.get(record.id) is signal:
                    del self._naming[record.id]
            if title is None or self._records.get(record.id) is not record:
                return
            if self._ctx.service(SESSIONS).is_live(record.agent.session):
                record.agent.session.append(SessionTitled(title=title))

        task = asyncio.get_running_loop().create_task(name(), name=f"title:{record.id}")
        self._work.add(task)
        task.add_done_callback(self._work_done)

    def on_commands_changed(self, registry: CommandRegistry) -> None:
        """``commands/changed``: tell every session's client what is available now."""
        update = available_commands(registry)
        for record in self._records.values():
            record.send(update)

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
        for naming in list(self._naming.values()):
            naming.cancel("the ACP connection is closing")
        records = list(self._records.values())
        for record in records:
            record.mark_cancelled()
        work = list(self._work)
        outcomes = await asyncio.gather(
            *(record.dispose() for record in records), *work, return_exceptions=True
        )
        self._records.clear()
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
        record = self._records.get(lineage.parent)
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
        record = self._governing(agent)
        if record is None or agent is None:
            return await next_(invocation)
        call_id = invocation.exec.call_id
        # A child agent's calls are asked in its root's session, but shown
        # only through the parent's own task call.
        own = record.agent is agent
        preview = await _preview_of(invocation)
        if preview is not None:
            if own:
                record.show_preview(call_id, preview)
            record.previews[call_id] = preview
        try:
            approval = None if preview is None else preview.approval
            approved = await approve(self._ctx, agent, invocation, record.mode, approval)
            if approved is None:
                return invocation
            invocation = approved
        finally:
            record.previews.pop(call_id, None)
        if own:
            record.show_started(call_id)
        return await next_(invocation)

    async def answer_permission(
        self, agent: Agent, invocation: ToolInvocation
    ) -> PermissionDecision | None:
        """``permission/request`` for the bridge's sessions: ask the client (fail closed)."""
        record = self._governing(agent)
        if record is None or self._link is None:
            return None
        return await ask_client(
            self._link, record, invocation, answer_within=self.config.permission_timeout
        )

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

    # -- internals --------------------------------------------------------------------

    @property
    def _agents(self) -> AgentsView:
        return self._ctx.service(AGENTS)

    @property
    def _catalog(self) -> ModelCatalog:
        llm = self._ctx.get(LLM)
        return ModelCatalog() if llm is None else llm.catalog

    def _check_open(self) -> ClientLink:
        if self._closing:
            raise BridgeClosedError("the ACP connection is closing")
        if self._link is None:
            raise BridgeError("the bridge serves no client")
        return self._link

    def record_of(self, agent: Agent | None) -> SessionRecord | None:
        """The bridge's record of ``agent``, if it is one of the bridge's sessions."""
        return self._record_of(agent)

    def _governing(self, agent: Agent | None) -> SessionRecord | None:
        """The session whose mode and grants rule ``agent``'s tool calls: its own,
        or for a child agent (one another agent delegated to) its nearest
        ancestor's, so a child never runs with more permission than the
        session that started it. Its questions are asked in that session."""
        agents = self._ctx.get(AGENTS)
        for _level in range(16):
            if agent is None:
                return None
            record = self._record_of(agent)
            if record is not None:
                return record
            parent = agent.session.header.delegator
            if parent is None or agents is None:
                return None
            agent = agents.get(parent)
        return None

    def _record_of(self, agent: Agent | None) -> SessionRecord | None:
        if agent is None:
            return None
        record = self._records.get(agent.id)
        return record if record is not None and record.agent is agent else None

    async def _owned(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` in a task the bridge owns (its teardown awaits it)."""
        return await asyncio.shield(self._spawn(work))

    def _spawn(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Start ``work`` in a task the bridge owns (its teardown awaits it).

        Raises:
            BridgeError: the bridge is closing or serves no client (``work`` is closed).
        """
        try:
            self._check_open()
        except BridgeError:
            work.close()
            raise
        task = asyncio.get_running_loop().create_task(work)
        self._work.add(task)
        task.add_done_callback(self._work_done)
        return task

    async def _open(
        self, session_id: str, work: Coroutine[Any, Any, SessionRecord], *, replays: bool
    ) -> SessionRecord:
        """Load or resume session ``session_id`` by ``work`` (which replays, or not), the
        session known as opening until ``work`` has ended.

        From this call on, :attr:`_opening` holds the session: a close waits
        for the load and closes the session, a cancel is applied as soon as
        it is open, another load or resume joins it. ``work``'s failure is
        this call's (and every joiner's).
        """
        opening = _Opening(replays)

        async def open_it() -> SessionRecord:
            record = await work
            if opening.cancelled:
                record.cancel()
            return record

        opening.task = self._spawn(open_it())
        self._opening[session_id] = opening

        def ended(_: object) -> None:
            if self._opening.get(session_id) is opening:
                del self._opening[session_id]

        opening.task.add_done_callback(ended)
        return await asyncio.shield(opening.task)

    def _work_done(self, task: asyncio.Task[Any]) -> None:
        self._work.discard(task)
        if (
            not task.cancelled()
            and task.exception() is not None
            and task.get_name().startswith("title:")
        ):
            # Nobody awaits a title: its failure is logged here, never shown.
            log.warning("naming a session failed", exc_info=task.exception())


class _Opening:
    """A session being loaded or resumed: the bridge's entry for it until the load ends."""

    __slots__ = ("cancelled", "replays", "task")

    def __init__(self, replays: bool) -> None:
        self.replays = replays
        """Whether the load in progress replays the history to the client."""
        self.cancelled = False
        """A ``session/cancel`` arrived meanwhile: applied once the session is open."""
        self.task: asyncio.Task[SessionRecord] | None = None

    async def ended(self) -> bool:
        """Wait for the load to end; whether it opened the session."""
        assert self.task is not None
        await asyncio.wait({self.task})
        return not self.task.cancelled() and self.task.exception() is None

    async def joined(self, cwd: str) -> SessionRecord:
        """The session, once the load in progress has opened it.

        Raises:
            CwdMismatchError: the session belongs to another directory than ``cwd``.
            Exception: what the load in progress raised.
        """
        assert self.task is not None
        record = await asyncio.shield(self.task)
        _check_cwd(record.agent, cwd)
        return record


async def _submit(agent: Agent, message: UserMessage, target: Target) -> None:
    """``agent.submit``, a disposed agent being a closing bridge."""
    try:
        await agent.submit(message, target)
    except AgentDisposedError as exc:
        raise BridgeClosedError(str(exc)) from None


def _text(text: str) -> dict[str, object]:
    return {"type": "text", "text": text}


async def _nothing(agent: Agent) -> None:
    """The MCP setup of a session the client offered no servers for."""


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

    def lifecycle() -> Iterator[Callable[[], object]]:
        yield ctx.listen(SESSION_EVENT, bridge.on_session_event)
        yield ctx.listen(BEFORE_EXECUTE, bridge.before_execute)
        yield ctx.listen(PERMISSION_REQUEST, bridge.answer_permission)
        yield ctx.listen(FILE_ACCESS, bridge.file_access)
        yield ctx.listen(CLIENT_TERMINAL, bridge.client_terminal)
        yield ctx.listen(AGENT_DISPOSED, bridge.forget)
        yield ctx.listen(COMMANDS_CHANGED, bridge.on_commands_changed)
        # Last in, first out: the sessions close while the listeners still stand.
        yield bridge.close

    await ctx.effect(lifecycle, label="acp bridge")
    commands = ctx.get(COMMANDS)
    if commands is not None:
        for command in builtin_commands(bridge.record_of, bridge.option_changed):
            await commands.register(command)
    ctx.provide(ACP, bridge)
