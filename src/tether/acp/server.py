"""The ACP server: the agent side of ACP over a :class:`~tether.acp.bridge.Bridge`.

It checks what the client sends, turns bridge errors into specific JSON-RPC
errors, and is the bridge's :class:`~tether.acp.record.ClientLink`: updates
are written to the transport synchronously, in the order the session's
events happened.

Arguments are untrusted. :mod:`tether.acp.rpc` checks a request's params
against its generated wire type (:mod:`tether.acp.wire`) and passes the
fields as keyword arguments; the transport drops ``_meta`` before that
(:mod:`tether.acp.transport`), handlers swallow names they do not use
(``**_meta``), and the values they use are checked here again.

The bridge comes from a :class:`BridgeSource`, which boots tether on demand:
``initialize`` is answered at once and starts the boot, so a client's
handshake never waits for the harness. Session methods wait for the boot.

A prompt handler queues the prompt before its first suspension (when the
bridge is up), and the connection starts one handler task per incoming frame in
arrival order, so a ``session/cancel`` sent after a ``session/prompt`` always
finds the prompt queued. The turn runs in the agent's own task; the handler
only awaits its outcome, so the connection cancelling a handler never stops a turn.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from tether.acp import wire
from tether.acp.handshake import initialize_result, valid_protocol_version
from tether.acp.permissions import MODE_DESCRIPTIONS, Mode
from tether.acp.rpc import AgentConnection, RequestError
from tether.acp.transport import INVALID_REQUEST, FrameChannel

if TYPE_CHECKING:
    from tether.acp.auth import ModelAuth
    from tether.acp.bridge import Bridge
    from tether.acp.editor_files import ClientFeatures
    from tether.acp.record import SessionRecord
    from tether.acp.updates import SessionUpdate
    from tether.agent import Agent, UserMessage
    from tether.mcp.servers import ServerSpec

log = logging.getLogger(__name__)

INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
RESOURCE_NOT_FOUND = -32002


class BridgeSource(Protocol):
    """Where the server's bridge comes from."""

    def start(self) -> None:
        """Begin providing the bridge (idempotent)."""
        ...

    def ready(self) -> Bridge | None:
        """The bridge, if it is up."""
        ...

    async def get(self) -> Bridge:
        """The bridge, once it is up (starting it if needed).

        Raises:
            Exception: it could not be brought up.
        """
        ...

    async def signed_in(self) -> None:
        """A key was signed in (``authenticate`` succeeded): return once the bridge is up
        (or failed to come up) and uses it — the sessions created from now on on the
        model it makes usable, if that changes it.

        Raises:
            Exception: that model could not be set up (the message says why).
        """
        ...


class AcpServer:
    """The handlers :class:`~tether.acp.rpc.AgentConnection` dispatches to; one per connection."""

    def __init__(
        self,
        source: BridgeSource,
        transport: FrameChannel,
        *,
        images: bool,
        client_capabilities: object = None,
        auth: ModelAuth | None = None,
    ) -> None:
        from tether.acp.auth import ModelAuth
        from tether.acp.editor_files import ClientFeatures

        self._auth = auth or ModelAuth()
        self._source = source
        self._transport = transport
        self._images = images
        self._features = ClientFeatures.parse(client_capabilities)
        self._client: AgentConnection | None = None
        self._bound: Bridge | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    def on_connect(self, conn: AgentConnection) -> None:
        self._client = conn

    async def settle(self, grace: float) -> None:
        """Wait (up to ``grace`` seconds) for the requests in progress to be answered."""
        pending = {task for task in self._handlers if task is not asyncio.current_task()}
        if pending:
            await asyncio.wait(pending, timeout=grace)

    # -- the client link -----------------------------------------------------------

    def send_update(self, session_id: str, update: SessionUpdate, seq: int | None = None) -> None:
        params = {"sessionId": session_id, "update": update}
        self._transport.write({"jsonrpc": "2.0", "method": "session/update", "params": params})

    def complete_elicitation(self, elicitation_id: str) -> None:
        params = {"elicitationId": elicitation_id}
        method = wire.CLIENT_METHODS["elicitation_complete"]
        self._transport.write({"jsonrpc": "2.0", "method": method, "params": params})

    async def drain(self) -> None:
        with suppress(ConnectionError):  # gone: later frames are dropped
            await self._transport.drain()

    async def request_permission(
        self,
        session_id: str,
        tool_call: wire.ToolCallUpdate,
        options: list[wire.PermissionOption],
    ) -> wire.RequestPermissionResponse:
        request = wire.RequestPermissionRequest(
            session_id=session_id, tool_call=tool_call, options=options
        )
        return await self._connected().request(
            wire.CLIENT_METHODS["session_request_permission"],
            request,
            wire.RequestPermissionResponse,
        )

    async def create_elicitation(
        self, request: wire.CreateElicitationRequest
    ) -> wire.CreateElicitationResponse:
        return await self._connected().request(
            wire.CLIENT_METHODS["elicitation_create"], request, wire.CreateElicitationResponse
        )

    @property
    def features(self) -> ClientFeatures:
        return self._features

    async def read_text_file(self, session_id: str, path: str) -> str:
        request = wire.ReadTextFileRequest(session_id=session_id, path=path)
        response = await self._connected().request(
            wire.CLIENT_METHODS["fs_read_text_file"], request, wire.ReadTextFileResponse
        )
        return response.content

    async def write_text_file(self, session_id: str, path: str, content: str) -> None:
        request = wire.WriteTextFileRequest(session_id=session_id, path=path, content=content)
        await self._connected().request(wire.CLIENT_METHODS["fs_write_text_file"], request)

    async def create_terminal(
        self, session_id: str, command: str, args: list[str], cwd: str, output_byte_limit: int
    ) -> str:
        request = wire.CreateTerminalRequest(
            session_id=session_id,
            command=command,
            args=args,
            cwd=cwd,
            output_byte_limit=output_byte_limit,
        )
        response = await self._connected().request(
            wire.CLIENT_METHODS["terminal_create"], request, wire.CreateTerminalResponse
        )
        return response.terminal_id

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str
    ) -> tuple[int | None, str | None]:
        request = wire.WaitForTerminalExitRequest(session_id=session_id, terminal_id=terminal_id)
        response = await self._connected().request(
            wire.CLIENT_METHODS["terminal_wait_for_exit"],
            request,
            wire.WaitForTerminalExitResponse,
        )
        return response.exit_code, response.signal

    async def terminal_output(self, session_id: str, terminal_id: str) -> tuple[str, bool]:
        request = wire.TerminalOutputRequest(session_id=session_id, terminal_id=terminal_id)
        response = await self._connected().request(
            wire.CLIENT_METHODS["terminal_output"], request, wire.TerminalOutputResponse
        )
        return response.output, response.truncated

    async def kill_terminal(self, session_id: str, terminal_id: str) -> None:
        request = wire.KillTerminalRequest(session_id=session_id, terminal_id=terminal_id)
        await self._connected().request(wire.CLIENT_METHODS["terminal_kill"], request)

    async def release_terminal(self, session_id: str, terminal_id: str) -> None:
        request = wire.ReleaseTerminalRequest(session_id=session_id, terminal_id=terminal_id)
        await self._connected().request(wire.CLIENT_METHODS["terminal_release"], request)

    def _connected(self) -> AgentConnection:
        if self._client is None:
            raise ConnectionError("no client is connected")
        return self._client

    # -- the agent's methods -----------------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: object = None,
        client_info: object = None,
        **_meta: object,
    ) -> dict[str, object]:
        if not valid_protocol_version(protocol_version):
            raise invalid_params("protocolVersion must be an integer from 0 to 65535")
        from tether.acp.editor_files import ClientFeatures

        self._features = ClientFeatures.parse(client_capabilities)
        if self._auth.missing is None:
            # The response is written before the boot task first runs.
            self._source.start()
        methods = self._auth.advertise(client_capabilities)
        result = initialize_result(
            images=self._images, requested=protocol_version, auth_methods=methods
        )
        return result

    async def authenticate(self, method_id: str, **_meta: object) -> wire.AuthenticateResponse:
        """Succeeds once the key of ``method_id`` is there (see :mod:`tether.acp.auth`)
        and tether, booted if it had not for want of the key, uses it — a tether that
        runs the offline model for want of any configured model or key creates the
        sessions to come on the model the key makes usable
        (:meth:`BridgeSource.signed_in`); answers ``-32603`` if it cannot be set up."""
        from tether.acp.auth import AuthError

        try:
            self._auth.authenticate(method_id)
        except AuthError as exc:
            raise RequestError(exc.code, str(exc)) from None
        self._source.start()
        try:
            await self._source.signed_in()
        except Exception as exc:
            log.warning("the signed-in model cannot be used: %s", exc)
            raise RequestError(
                INTERNAL_ERROR,
                f"the signed-in model cannot be used: {exc}; new sessions keep the model they had",
            ) from None
        return wire.AuthenticateResponse()

    async def logout(self, **_meta: object) -> wire.LogoutResponse:
        """Remove the model provider's stored key (see :meth:`ModelAuth.logout`): what
        needs the model then waits for ``authenticate``."""
        from tether.acp.auth import AuthError

        try:
            self._auth.logout()
        except AuthError as exc:
            raise RequestError(exc.code, str(exc)) from None
        return wire.LogoutResponse()

    async def new_session(
        self,
        cwd: str,
        additional_directories: object = None,
        mcp_servers: object = None,
        **_meta: object,
    ) -> wire.NewSessionResponse:
        from tether.acp.commands import available_commands

        directory = absolute_path(cwd, existing=True)
        servers = mcp_servers_of(mcp_servers)
        self._track_handler()
        bridge = await self._bridge()
        with bridge_errors():
            record = await bridge.create(directory, servers)
            await bridge.acknowledge(record.id, created=True)
        self._after_answer(record.id, available_commands(bridge.commands, record.agent))
        return wire.NewSessionResponse(
            session_id=record.id, modes=_modes(record.mode), config_options=_options(record)
        )

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: object = None,
        additional_directories: object = None,
        **_meta: object,
    ) -> wire.LoadSessionResponse:
        from tether.acp.commands import available_commands

        bridge, record = await self._reopen(session_id, cwd, mcp_servers, replay=True)
        await self._drain()
        self._after_answer(record.id, available_commands(bridge.commands, record.agent))
        return wire.LoadSessionResponse(modes=_modes(record.mode), config_options=_options(record))

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: object = None,
        mcp_servers: object = None,
        **_meta: object,
    ) -> wire.ResumeSessionResponse:
        from tether.acp.commands import available_commands

        bridge, record = await self._reopen(session_id, cwd, mcp_servers, replay=False)
        self._after_answer(
            record.id, available_commands(bridge.commands, record.agent), *record.state_updates()
        )
        return wire.ResumeSessionResponse(
            modes=_modes(record.mode), config_options=_options(record)
        )

    async def close_session(self, session_id: str, **_meta: object) -> wire.CloseSessionResponse:
        session_id = required_text("sessionId", session_id)
        self._track_handler()
        bridge = await self._bridge()
        with bridge_errors():
            await bridge.close_session(session_id)
        return wire.CloseSessionResponse()

    async def delete_session(self, session_id: str, **_meta: object) -> wire.DeleteSessionResponse:
        """Close the session if it is open here, then delete its stored log: it leaves
        ``session/list`` and cannot be loaded again."""
        session_id = required_text("sessionId", session_id)
        self._track_handler()
        bridge = await self._bridge()
        with bridge_errors():
            await bridge.delete_session(session_id)
        return wire.DeleteSessionResponse()

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **_meta: object
    ) -> wire.ListSessionsResponse:
        from tether.acp.lifecycle import iso_time, lineage_meta, page_of

        directory = None if cwd is None else absolute_path(cwd)
        if cursor is not None and not isinstance(cursor, str):
            raise invalid_params("cursor must be a string returned by session/list")
        bridge = await self._bridge()
        with bridge_errors():
            stored, next_cursor = page_of(await bridge.stored_sessions(directory), cursor)
        return wire.ListSessionsResponse(
            sessions=[
                wire.SessionInfo(
                    session_id=summary.id,
                    cwd=summary.cwd or "",
                    title=summary.title,
                    updated_at=iso_time(summary.last_activity),
                    field_meta=lineage_meta(summary.lineage),
                )
                for summary in stored
            ],
            next_cursor=next_cursor,
        )

    async def fork_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: object = None,
        mcp_servers: object = None,
        meta: dict[str, object] | None = None,
        **_meta: object,
    ) -> wire.ForkSessionResponse:
        """A branch of the session, open and durable (see :meth:`Bridge.fork`); the fork
        point is ``_meta.tether.seq`` (the parent's first ``seq`` events; default all)."""
        from tether.acp.commands import available_commands

        directory = absolute_path(cwd)
        session_id = required_text("sessionId", session_id)
        seq = _fork_seq(meta)
        servers = mcp_servers_of(mcp_servers)
        self._track_handler()
        bridge = await self._bridge()
        with bridge_errors():
            record, forked = await bridge.fork(session_id, directory, servers, seq=seq)
            await bridge.acknowledge(record.id)
        self._after_answer(
            record.id, available_commands(bridge.commands, record.agent), *record.state_updates()
        )
        return wire.ForkSessionResponse(
            session_id=record.id,
            modes=_modes(record.mode),
            config_options=_options(record),
            field_meta={"tether": {"parent": forked.parent, "seq": forked.seq}},
        )

    async def set_session_mode(
        self, session_id: str, mode_id: str, **_meta: object
    ) -> wire.SetSessionModeResponse:
        from tether.acp import controls

        session_id = required_text("sessionId", session_id)
        try:
            mode = Mode(mode_id)
        except ValueError:
            known = ", ".join(repr(m.value) for m in Mode)
            raise invalid_params(f"unknown mode {mode_id!r}; the modes are {known}") from None
        bridge = await self._bridge()
        with bridge_errors():
            controls.set_mode(bridge.record(session_id), mode)
            await bridge.acknowledge(session_id)
        return wire.SetSessionModeResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **_meta: object
    ) -> wire.SetSessionConfigOptionResponse:
        from tether.acp import controls

        session_id = required_text("sessionId", session_id)
        config_id = required_text("configId", config_id)
        bridge = await self._bridge()
        with bridge_errors():
            options = controls.set_option(bridge.record(session_id), config_id, value)
            await bridge.acknowledge(session_id)
        return wire.SetSessionConfigOptionResponse(config_options=_wire_options(options))

    async def prompt(
        self, session_id: str, prompt: list[Any], **_meta: object
    ) -> wire.PromptResponse:
        # Imported here, not at the top: it loads the agent layer, which the
        # handshake does not need (startup time).
        from tether.acp import controls
        from tether.acp.content import UnsupportedContentError, to_message
        from tether.acp.prompts import TurnFailed

        session_id = required_text("sessionId", session_id)
        if not isinstance(prompt, list):
            raise invalid_params("prompt must be an array of content blocks")
        try:
            message = to_message(prompt, images=self._images)
        except UnsupportedContentError as exc:
            raise invalid_params(str(exc)) from None
        self._track_handler()
        bridge = await self._bridge()
        command = controls.command_for(bridge.commands, message)
        if command is not None:
            with bridge_errors():
                await controls.run_in(bridge.open_record(session_id), *command)
                await asyncio.shield(bridge.acknowledge(session_id))
            await self._drain()
            return wire.PromptResponse(stop_reason="end_turn")
        with bridge_errors():
            agent = bridge.open_record(session_id).agent
        message = await with_resources(agent, prompt, message)
        with bridge_errors():
            answer = bridge.prompt(session_id, message)
        outcome = await asyncio.shield(answer)
        with bridge_errors():
            # The answer acknowledges the turn: only once it is on disk.
            await asyncio.shield(bridge.acknowledge(session_id))
        if isinstance(outcome, TurnFailed):
            raise RequestError(
                INTERNAL_ERROR, f"the turn failed: {outcome.error}", {"error": outcome.error}
            )
        await self._drain()
        return wire.PromptResponse(stop_reason=outcome)

    async def cancel(self, session_id: str, **_meta: object) -> None:
        self.cancel_turn(session_id)

    def cancel_turn(self, session_id: object) -> None:
        """Cancel the turn of ``session_id`` (its prompt answers ``cancelled``); an
        unknown session is logged and ignored."""
        bridge = self._source.ready()
        if bridge is None or not isinstance(session_id, str):
            log.warning("session/cancel for unknown session %r ignored", session_id)
            return
        from tether.acp.errors import UnknownSessionError

        try:
            bridge.cancel(session_id)
        except UnknownSessionError as exc:
            log.warning("session/cancel ignored: %s", exc)

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """``_tether/steer`` and ``_tether/queue`` (see :mod:`tether.acp.steering`)."""
        from tether.acp import controls
        from tether.acp.steering import QUEUE, STEER

        if method not in (STEER, QUEUE):
            raise RequestError.method_not_found(f"_{method}")
        from tether.acp.content import UnsupportedContentError, to_message

        session_id = required_text("sessionId", params.get("sessionId"))
        prompt = params.get("prompt")
        if not isinstance(prompt, list) or not prompt:
            raise invalid_params("prompt must be a non-empty array of content blocks")
        try:
            blocks = msgspec.convert(prompt, list[wire.ContentBlock])
        except msgspec.ValidationError as exc:
            raise invalid_params(f"prompt: not ACP content blocks ({exc})") from None
        try:
            message = to_message(blocks, images=self._images)
        except UnsupportedContentError as exc:
            raise invalid_params(str(exc)) from None
        self._track_handler()
        bridge = await self._bridge()
        with bridge_errors():
            # Answered once the delivery is on disk; one that cannot be stored is
            # withdrawn (a request cancelled meanwhile too): it never runs.
            if method == STEER:
                await controls.steer(bridge.open_record(session_id), message)
            else:
                await controls.queue(bridge.open_record(session_id), message)
        return {"messageId": message.id, "queue": "steering" if method == STEER else "queued"}

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        log.debug("extension notification _%s ignored", method)

    # -- internals --------------------------------------------------------------------

    async def _bridge(self) -> Bridge:
        """The bridge, bound to this server; returns without suspending once it is up.

        Raises:
            RequestError: ``-32000`` while the model's key is missing (tether does
                not start without it); ``-32603`` when tether failed to start.
        """
        from tether.acp.auth import AuthError

        try:
            self._auth.check_ready()
        except AuthError as exc:
            raise RequestError(exc.code, str(exc)) from None
        bridge = self._source.ready()
        if bridge is None:
            try:
                bridge = await self._source.get()
            except Exception as exc:
                raise RequestError(INTERNAL_ERROR, f"tether failed to start: {exc}") from exc
        if self._bound is not bridge:
            bridge.bind(self)
            self._bound = bridge
        return bridge

    async def _reopen(
        self, session_id: object, cwd: object, mcp_servers: object, *, replay: bool, start: int = 0
    ) -> tuple[Bridge, SessionRecord]:
        """``session/load`` (``replay``, from seq ``start`` on) or ``session/resume``: the
        session, opened and durable."""
        directory = absolute_path(cwd)
        session_id = required_text("sessionId", session_id)
        servers = mcp_servers_of(mcp_servers)
        self._track_handler()
        bridge = await self._bridge()
        with bridge_errors():
            if replay:
                record = await bridge.load(session_id, directory, servers, start=start)
            else:
                record = await bridge.resume(session_id, directory, servers)
            await bridge.acknowledge(record.id)
        return bridge, record

    def _after_answer(self, session_id: str, *updates: SessionUpdate) -> None:
        """Send ``updates`` right after the answer the current handler returns.

        The connection writes the answer in the same step of the loop as the handler
        returns; a callback scheduled now runs after it.
        """
        loop = asyncio.get_running_loop()
        for update in updates:
            loop.call_soon(self.send_update, session_id, update)

    def _track_handler(self) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)

    async def _drain(self) -> None:
        try:
            await self._transport.drain()
        except ConnectionError:
            log.debug("the client stopped reading; the answer is dropped")


def _modes(current: Mode) -> wire.SessionModeState:
    return wire.SessionModeState(
        current_mode_id=current.value,
        available_modes=[
            wire.SessionMode(id=mode.value, name=label, description=description)
            for mode, (label, description) in MODE_DESCRIPTIONS.items()
        ],
    )


def _options(record: SessionRecord) -> list[wire.SessionConfigOption]:
    from tether.acp import controls

    return _wire_options(controls.options(record))


def _wire_options(options: list[dict[str, object]]) -> list[wire.SessionConfigOption]:
    """The ``configOptions`` tether builds, as the wire type (checked against it)."""
    return msgspec.convert(options, list[wire.SessionConfigOption])


def mcp_servers_of(value: object) -> tuple[ServerSpec, ...]:
    """The ``mcpServers`` of a request, checked (a malformed entry is ``Invalid params``)."""
    from tether.mcp.errors import McpConfigError
    from tether.mcp.servers import from_acp

    try:
        return from_acp(value)
    except McpConfigError as exc:
        raise invalid_params(str(exc)) from None


def _fork_seq(meta: dict[str, object] | None) -> int | None:
    """The fork point a ``session/fork`` names in ``_meta.tether.seq`` (``None``: none)."""
    ours = None if meta is None else meta.get("tether")
    seq = ours.get("seq") if isinstance(ours, dict) else None
    if seq is not None and (not isinstance(seq, int) or isinstance(seq, bool)):
        raise invalid_params("_meta.tether.seq must be an integer (the parent's events to copy)")
    return seq


async def with_resources(agent: Agent, prompt: list[Any], message: UserMessage) -> UserMessage:
    """``message`` with the MCP resources its text blocks' ``@server:uri`` words name
    (see :mod:`tether.mcp.mentions`); one that cannot be attached is invalid params."""
    from tether.front.prompting import attach_mcp_resources

    text = "\n".join(block.text for block in prompt if isinstance(block, wire.TextContentBlock))
    attached = await attach_mcp_resources(agent, text)
    if attached.refused:
        raise invalid_params(attached.refused[0])
    if not attached.blocks:
        return message
    return msgspec.structs.replace(message, content=(*message.content, *attached.blocks))


def invalid_params(message: str) -> RequestError:
    return RequestError(INVALID_PARAMS, f"Invalid params: {message}")


def required_text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise invalid_params(f"{name} must be a non-empty string")
    return value


def absolute_path(cwd: object, *, existing: bool = False) -> str:
    path = required_text("cwd", cwd)
    if not os.path.isabs(path):
        raise invalid_params(f"cwd must be an absolute path, got {path!r}")
    if existing and not os.path.isdir(path):
        raise invalid_params(f"cwd {path!r} is not a directory")
    return os.path.normpath(path)


@contextmanager
def bridge_errors() -> Iterator[None]:
    """Bridge and agent-layer errors as specific JSON-RPC errors."""
    from tether.acp.errors import (
        BridgeClosedError,
        BridgeError,
        CwdMismatchError,
        McpUnsupportedError,
        NotStoredError,
        PromptInFlightError,
        SessionIdleError,
        UnknownSessionError,
    )
    from tether.acp.lifecycle import BadCursorError
    from tether.acp.options import UnknownOptionError
    from tether.agent import AgentConflictError, AgentError
    from tether.agent.commands import CommandError
    from tether.front.rewind import RewindError
    from tether.persist.backends.errors import (
        InvalidSessionIdError,
        LogStoreError,
        SessionNotFoundError,
    )
    from tether.session import SessionError

    try:
        yield
    except (
        UnknownSessionError,
        CwdMismatchError,
        AgentConflictError,
        InvalidSessionIdError,
        UnknownOptionError,
        BadCursorError,
        SessionIdleError,
        CommandError,
        McpUnsupportedError,
        RewindError,
    ) as exc:
        raise invalid_params(str(exc)) from None
    except PromptInFlightError as exc:
        raise RequestError(INVALID_REQUEST, f"Invalid request: {exc}") from None
    except SessionNotFoundError as exc:
        raise RequestError(RESOURCE_NOT_FOUND, str(exc)) from None
    except (
        BridgeClosedError,
        NotStoredError,
        BridgeError,
        AgentError,
        LogStoreError,
        SessionError,
    ) as exc:
        raise RequestError(INTERNAL_ERROR, str(exc)) from None
