"""The ACP bridge plugin: the sessions one ACP client owns, and their one teardown.

``tether acp`` mounts this plugin (name ``acp``; it injects ``agents`` and
``sessions`` and reads ``persistence`` when one is mounted). It provides the
``acp`` service, a :class:`Bridge`, which the protocol server
(:mod:`tether.acp.server`) drives on behalf of one client.

**Ownership.** ``session/new`` creates an agent through ``ctx.agents.create``;
``session/load``, ``session/resume`` and ``session/fork`` resume one through
``ctx.agents.resume`` (how each opens, and closes: :mod:`tether.acp.sessions`);
the bridge's fiber co-owns each agent, and the session's
:class:`~tether.acp.record.SessionRecord` keeps the handle's ``dispose``.
Creates and loads run in tasks the bridge owns, never in the connection's request
handler, so a handler the connection cancels abandons nothing. The bridge
itself maps the connection onto its session host: binding the client,
prompts and cancels, how a call is shown and asked, the teardown.

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
record (one listener for all sessions, whatever their number;
:meth:`ClientSessions.on_session_event <tether.acp.sessions.ClientSessions.on_session_event>`);
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
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Annotated, Literal

from msgspec import Meta

from tether.acp.asking import present_to_client
from tether.acp.commands import available_commands, builtin_commands, rewind_commands
from tether.acp.controls import option_changed
from tether.acp.editor_files import EditorFiles
from tether.acp.editor_terminal import EditorTerminals
from tether.acp.errors import BridgeClosedError, BridgeError, UnknownSessionError
from tether.acp.permissions import Mode
from tether.acp.prompts import Outcome
from tether.acp.record import ClientLink, SessionRecord
from tether.acp.sessions import ClientSessions
from tether.acp.titles import Namer
from tether.agent import Agent, UserMessage
from tether.agent.commands import COMMANDS, COMMANDS_CHANGED, CommandRegistry
from tether.agent.elicitation import Action, Elicited
from tether.front.asking import Answer, Question
from tether.front.host import SessionHost
from tether.front.rewind import WORKSPACES, Forked
from tether.front.seams import CLIENT_TERMINAL, FILE_ACCESS, FileAccess, Terminals
from tether.persist.service import PERSISTENCE
from tether.runtime.keys import Notice, ServiceKey
from tether.runtime.schema import Schema
from tether.session.store import SESSION_EVENT
from tether.tools.progress import TOOL_PROGRESS, ToolProgress

if TYPE_CHECKING:
    from tether.front.eliciting import ElicitationQuestion
    from tether.mcp.servers import ServerSpec
    from tether.persist.backends.base import SessionSummary
    from tether.runtime import Context
    from tether.tools.preview import ToolPreview

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
    service: Annotated[str, Meta(pattern=r"^[a-z][a-z0-9_]*$")] = "acp"
    """The name the bridge is provided under: ``acp`` for ``tether acp``'s one client; a
    name of its own for each client of a server with many (:mod:`tether.acp.remote`)."""
    commands: bool = True
    """Register the editor's slash commands (``/clear``, ``/model``, ``/mode``, ``/cost``,
    ``/rewind``, ``/diff``) for the bridge's sessions. A command name is registered once
    per tether, so only one bridge of a process can (``tether acp``'s)."""


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
        model = config.title_model
        self._namer = None if model is None else Namer(ctx, self._host, model)
        """Names sessions after their first prompt (with a title model configured)."""
        self.opened = ClientSessions(
            ctx, self._host, mode=config.mode, namer=self._namer, check_open=self._check_open
        )
        """How the sessions open, are fed their events, and close."""
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
        self.opened.model = model

    @property
    def new_session_model(self) -> str | None:
        """The model :meth:`use_model` chose for new sessions (``None``: the agent loop's)."""
        return self.opened.model

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

    # -- session/new, load, resume, fork, close, list: see ClientSessions ------------------

    async def create(self, cwd: str, servers: Sequence[ServerSpec] = ()) -> SessionRecord:
        """``session/new``: :meth:`ClientSessions.create`."""
        return await self.opened.create(cwd, servers)

    async def load(
        self, session_id: str, cwd: str, servers: Sequence[ServerSpec] = (), *, start: int = 0
    ) -> SessionRecord:
        """``session/load`` (and version 2's ``session/resume`` with ``replayFrom``):
        :meth:`ClientSessions.load`."""
        return await self.opened.load(session_id, cwd, servers, start=start)

    async def resume(
        self, session_id: str, cwd: str, servers: Sequence[ServerSpec] = ()
    ) -> SessionRecord:
        """``session/resume``: :meth:`ClientSessions.resume`."""
        return await self.opened.resume(session_id, cwd, servers)

    async def fork(
        self, session_id: str, cwd: str, servers: Sequence[ServerSpec] = (), *, seq: int | None
    ) -> tuple[SessionRecord, Forked]:
        """``session/fork``: :meth:`ClientSessions.fork`."""
        return await self.opened.fork(session_id, cwd, servers, seq=seq)

    async def close_session(self, session_id: str) -> None:
        """``session/close``: :meth:`ClientSessions.close`."""
        await self.opened.close(session_id)

    async def delete_session(self, session_id: str) -> None:
        """``session/delete``: :meth:`ClientSessions.delete`."""
        await self.opened.delete(session_id)

    async def stored_sessions(self, cwd: str | None = None) -> list[SessionSummary]:
        """``session/list``: :meth:`ClientSessions.stored`."""
        return await self.opened.stored(cwd)

    async def acknowledge(self, session_id: str, *, created: bool = False) -> None:
        """Every answer that acknowledges work waits for it: :meth:`ClientSessions.acknowledge`."""
        await self.opened.acknowledge(session_id, created=created)

    # -- session/prompt, session/cancel --------------------------------------------------

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
        if self._host.get(session_id) is None and self.opened.opening(session_id):
            self.opened.mark_cancelled(session_id)
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
        for record in self._host.sessions:
            record.send(available_commands(registry, record.agent))

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

    async def present_elicitation(self, question: ElicitationQuestion) -> Elicited:
        """Ask the client (see :mod:`tether.acp.eliciting`)."""
        from tether.acp.eliciting import elicit_from_client

        record = self._host.session_of(question.governing)
        if record is None or self._link is None:
            return Elicited(Action.CANCEL, reason="the session is closing")
        return await elicit_from_client(self._link, record.id, question)

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

    def on_tool_progress(self, agent: Agent, progress: ToolProgress) -> None:
        """``tool/progress``: show a running call of one of the bridge's sessions in it."""
        record = self._host.session_of(agent)
        if record is not None:
            record.show_progress(progress)

    def file_access(self, agent: Agent, disk: FileAccess) -> FileAccess | None:
        """``fs/access``: the editor's buffers for the bridge's sessions, when the client
        serves files (see :mod:`tether.acp.editor_files`)."""
        record = self.opened.record_of(agent)
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
        record = self.opened.record_of(agent)
        link = self._link
        if record is None or link is None or self.config.terminal != "client":
            return None
        return EditorTerminals(link, record) if link.features.terminal else None

    # -- internals --------------------------------------------------------------------

    def _check_open(self) -> ClientLink:
        self._host.check_open()
        if self._link is None:
            raise BridgeError("the bridge serves no client")
        return self._link

    def record_of(self, agent: Agent | None) -> SessionRecord | None:
        """The bridge's record of ``agent``, if it is one of the bridge's sessions."""
        return self._host.session_of(agent)


async def apply(ctx: Context, config: Config) -> None:
    """Provide the ``acp`` service; its sessions and listeners unwind as one effect."""
    bridge = Bridge(ctx, config)

    def lifecycle() -> Iterator[Callable[[], object]]:
        yield ctx.listen(SESSION_EVENT, bridge.opened.on_session_event)
        yield from bridge.host.listening()
        yield ctx.listen(FILE_ACCESS, bridge.file_access)
        yield ctx.listen(CLIENT_TERMINAL, bridge.client_terminal)
        yield ctx.listen(COMMANDS_CHANGED, bridge.on_commands_changed)
        yield ctx.listen(TOOL_PROGRESS, bridge.on_tool_progress)
        # Last in, first out: the sessions close while the listeners still stand.
        yield bridge.close

    await ctx.effect(lifecycle, label="acp bridge")
    commands = ctx.get(COMMANDS) if config.commands else None
    if commands is not None:
        for command in builtin_commands(bridge.record_of, option_changed):
            await commands.register(command)
        workspaces = ctx.get(WORKSPACES)
        if workspaces is not None:
            for command in rewind_commands(workspaces, lambda: ctx.get(PERSISTENCE)):
                await commands.register(command)
    ctx.provide(ServiceKey[Bridge](config.service), bridge)
