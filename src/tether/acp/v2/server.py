"""The agent side of ACP protocol version 2, over the same bridge as version 1.

A client whose first frame is an ``initialize`` asking for version 2
(:func:`~tether.acp.v2.handshake.speaks_v2`) is served by :class:`AcpServerV2`
with the method tables :data:`V2_ROUTES` and :data:`V2_NOTIFICATIONS`. It is
an :class:`~tether.acp.server.AcpServer` — the same bridge, session host,
permission asker, checks and errors — whose handlers answer in version 2's
terms and whose client link reshapes what the bridge sends:

* ``session/prompt`` is answered **on acceptance**: once the message is queued
  and on disk, with its ``messageId``. Progress follows as ``state_update``
  updates: ``running`` when it is accepted, ``idle`` with the stop reason once
  its turn ended and is on disk (``error`` with the failure for a turn that
  failed), then ``running`` again if a prompt sent after a cancel is still to run.
* Every update is an upsert by id: messages by ``messageId`` (the user's is
  echoed, with the id the prompt was answered with), tool calls by
  ``toolCallId`` (``tool_call`` and ``tool_call_update`` are one update, see
  :mod:`tether.acp.v2.updates`). Each update that shows an event of the
  session's log carries that event's seq in ``_meta.tether.seq``.
* ``session/resume`` with ``replayFrom`` replays the log from a cursor —
  ``{"type": "start"}`` or tether's ``{"type": "_tether/seq", "seq": N}``
  (inclusive) — before it answers, then sends the current ``state_update``;
  without ``replayFrom`` nothing is replayed. There is no ``session/load``.
* Modes are the ``mode`` config option (``session/set_config_option``); there is
  no ``session/set_mode`` and no ``current_mode_update``.
* tether reads and writes files and runs commands itself: version 2 has no
  client ``fs/*`` or ``terminal/*`` methods.
* A cancelled turn's calls that did not complete end ``cancelled``.

Not served in version 2: ``auth/login`` and ``auth/logout`` (a missing key is
reported by the session methods), ``session/fork``, ``tool_call/cancel``,
``terminal/cancel``, ``elicitation/create`` (tether asks its other questions in
the terminal or the web page), batches.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from tether.acp import wire
from tether.acp.editor_files import ClientFeatures
from tether.acp.rpc import RequestError, Route
from tether.acp.server import (
    INTERNAL_ERROR,
    AcpServer,
    BridgeSource,
    bridge_errors,
    invalid_params,
    required_text,
    with_resources,
)
from tether.acp.transport import INVALID_REQUEST, FrameChannel
from tether.acp.v2 import wire as v2
from tether.acp.v2.handshake import REPLAY_FROM_SEQ, VERSION, initialize_result
from tether.acp.v2.updates import config_options, to_v2

if TYPE_CHECKING:
    from tether.acp.auth import ModelAuth
    from tether.acp.bridge import Bridge
    from tether.acp.prompts import Outcome
    from tether.acp.record import SessionRecord
    from tether.acp.updates import SessionUpdate

log = logging.getLogger(__name__)

V2_FEATURES = ClientFeatures(echo_prompts=True, cancelled_calls=True)
"""What a version 2 client takes: its prompts echoed, ``cancelled`` tool calls; no
client files or terminals (version 2 has none), no notices or elicitation."""

RUNNING: SessionUpdate = {"sessionUpdate": "state_update", "state": "running"}

V2_ROUTES: Mapping[str, Route] = {
    v2.AGENT_METHODS["initialize"]: Route(v2.InitializeRequest, "v2_initialize"),
    v2.AGENT_METHODS["session_new"]: Route(v2.NewSessionRequest, "v2_new_session"),
    v2.AGENT_METHODS["session_resume"]: Route(v2.ResumeSessionRequest, "v2_resume_session"),
    v2.AGENT_METHODS["session_close"]: Route(v2.CloseSessionRequest, "close_session"),
    v2.AGENT_METHODS["session_delete"]: Route(v2.DeleteSessionRequest, "delete_session"),
    v2.AGENT_METHODS["session_list"]: Route(v2.ListSessionsRequest, "v2_list_sessions"),
    v2.AGENT_METHODS["session_set_config_option"]: Route(
        v2.SetSessionConfigOptionRequest, "v2_set_config_option"
    ),
    v2.AGENT_METHODS["session_prompt"]: Route(v2.PromptRequest, "v2_prompt"),
}
"""The version 2 requests tether answers, by method name."""

V2_NOTIFICATIONS: Mapping[str, Route] = {
    v2.AGENT_METHODS["session_cancel"]: Route(v2.CancelSessionNotification, "cancel"),
}
"""The version 2 notifications tether acts on, by method name."""


class AcpServerV2(AcpServer):
    """The handlers of :data:`V2_ROUTES`, and the bridge's client link in version 2."""

    def __init__(
        self,
        source: BridgeSource,
        transport: FrameChannel,
        *,
        images: bool,
        auth: ModelAuth | None = None,
    ) -> None:
        super().__init__(source, transport, images=images, auth=auth)
        self._settling: set[asyncio.Task[None]] = set()
        """The tasks that report how accepted prompts ended (see :meth:`_report`)."""

    # -- the client link -----------------------------------------------------------

    @property
    def features(self) -> ClientFeatures:
        return V2_FEATURES

    def send_update(self, session_id: str, update: SessionUpdate, seq: int | None = None) -> None:
        shown = to_v2(update)
        if shown is None:
            return
        params: dict[str, object] = {"sessionId": session_id, "update": shown}
        if seq is not None:
            params["_meta"] = {"tether": {"seq": seq}}
        self._transport.write({"jsonrpc": "2.0", "method": "session/update", "params": params})

    async def request_permission(
        self,
        session_id: str,
        tool_call: wire.ToolCallUpdate,
        options: list[wire.PermissionOption],
    ) -> wire.RequestPermissionResponse:
        """Ask in version 2's terms (the call as the request's subject, its title as the
        question); the answer in version 1's, which the asker reads.

        Raises:
            RequestError: the client failed, or answered with an outcome tether does
                not know (the asker treats both as a refusal).
        """
        call = msgspec.to_builtins(tool_call)
        shown = to_v2({"sessionUpdate": "tool_call_update", **call}) or {}
        subject = {k: v for k, v in shown.items() if k != "sessionUpdate"}
        request = msgspec.convert(
            {
                "sessionId": session_id,
                "title": call.get("title") or "Allow this tool call?",
                "subject": {"type": "tool_call", "toolCall": subject},
                "options": msgspec.to_builtins(options),
            },
            v2.RequestPermissionRequest,
        )
        answer = await self._connected().request(
            v2.CLIENT_METHODS["session_request_permission"], request, v2.RequestPermissionResponse
        )
        try:
            return msgspec.convert(msgspec.to_builtins(answer), wire.RequestPermissionResponse)
        except msgspec.ValidationError as exc:
            raise invalid_params(f"a permission outcome tether does not know: {exc}") from None

    async def settle(self, grace: float) -> None:
        """As :meth:`AcpServer.settle`; then the reports of prompts still running are
        cancelled and awaited (the connection is going)."""
        await super().settle(grace)
        for task in self._settling:
            task.cancel()
        await asyncio.gather(*self._settling, return_exceptions=True)

    # -- the agent's methods -----------------------------------------------------------

    async def v2_initialize(
        self, protocol_version: int, info: object = None, **_meta: object
    ) -> dict[str, object]:
        """A second ``initialize`` on a version 2 connection: the same answer; asking for
        another version is an invalid request (the version was negotiated)."""
        if protocol_version != VERSION:
            raise RequestError(
                INVALID_REQUEST,
                f"Invalid request: this connection speaks protocol version {VERSION}",
            )
        if self._auth.missing is None:
            self._source.start()
        return initialize_result(images=self._images)

    async def v2_new_session(
        self,
        cwd: str,
        additional_directories: object = None,
        mcp_servers: object = None,
        **_meta: object,
    ) -> dict[str, object]:
        created = await self.new_session(cwd, additional_directories, mcp_servers)
        options = msgspec.to_builtins(created.config_options or [])
        return {"sessionId": created.session_id, "configOptions": config_options(options)}

    async def v2_resume_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: object = None,
        mcp_servers: object = None,
        replay_from: object = None,
        **_meta: object,
    ) -> dict[str, object]:
        """Open the session (replaying it from ``replay_from`` when there is one), send
        its current ``state_update``, then answer; the commands, usage and plan follow.

        Raises:
            RequestError: ``-32602`` for a cursor tether does not take, as the protocol
                prescribes (never another cursor instead); as ``session/load``.
        """
        from tether.acp.commands import available_commands
        from tether.acp.controls import options

        start = replay_start(replay_from)
        bridge, record = await self._reopen(
            session_id, cwd, mcp_servers, replay=start is not None, start=start or 0
        )
        self.send_update(record.id, state_of(record))
        self._after_answer(
            record.id, available_commands(bridge.commands, record.agent), *record.state_updates()
        )
        return {"configOptions": config_options(options(record))}

    async def v2_list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **_meta: object
    ) -> dict[str, object]:
        listed: dict[str, object] = msgspec.to_builtins(await self.list_sessions(cwd, cursor))
        return listed

    async def v2_set_config_option(
        self, config_id: str, session_id: str, value: object = None, **params: object
    ) -> dict[str, object]:
        kind = params.get("type")
        if kind not in ("id", "boolean"):
            raise invalid_params(f"unknown config value type {kind!r}; tether takes 'id'")
        if not isinstance(value, str | bool):
            raise invalid_params("value must be a string (an id) or a boolean")
        changed = await self.set_config_option(config_id, session_id, value)
        return {"configOptions": config_options(msgspec.to_builtins(changed.config_options))}

    async def v2_prompt(
        self, session_id: str, prompt: list[Any], **_meta: object
    ) -> dict[str, object]:
        """Queue the prompt and answer once it is on disk, with its ``messageId``; the
        turn's updates and its ``state_update``\\ s follow (see the module docs).

        Raises:
            RequestError: ``-32602`` for content tether cannot take; ``-32600`` while
                another prompt of the session runs (cancel it first); as ``session/prompt``.
        """
        from tether.acp import controls
        from tether.acp.content import UnsupportedContentError, to_message

        session_id = required_text("sessionId", session_id)
        if not isinstance(prompt, list) or not prompt:
            raise invalid_params("prompt must be a non-empty array of content blocks")
        try:
            blocks = msgspec.convert(prompt, list[wire.ContentBlock])
            message = to_message(blocks, images=self._images)
        except msgspec.ValidationError as exc:
            raise invalid_params(f"prompt: content tether cannot take ({exc})") from None
        except UnsupportedContentError as exc:
            raise invalid_params(str(exc)) from None
        self._track_handler()
        bridge = await self._bridge()
        command = controls.command_for(bridge.commands, message)
        if command is not None:
            with bridge_errors():
                record = bridge.open_record(session_id)
            self.send_update(session_id, RUNNING)
            ended: SessionUpdate = {"sessionUpdate": "state_update", "state": "idle"}
            try:
                with bridge_errors():
                    await controls.run_in(record, *command)
                    await asyncio.shield(bridge.acknowledge(session_id))
                ended = idle("end_turn")
            finally:
                # A command that failed was not accepted: idle, without a stop reason.
                self._after_answer(session_id, ended)
            return {"messageId": message.id}
        with bridge_errors():
            agent = bridge.open_record(session_id).agent
        message = await with_resources(agent, blocks, message)
        with bridge_errors():
            answer = bridge.prompt(session_id, message)
        self.send_update(session_id, RUNNING)
        answered = asyncio.Event()
        self._report(bridge, session_id, answer, answered)
        try:
            with bridge_errors():
                # Accepted means on disk: the message is in the session's log.
                await asyncio.shield(bridge.acknowledge(session_id))
        finally:
            # The connection writes the answer in the step the handler returns in:
            # the stop reason is reported after it.
            asyncio.get_running_loop().call_soon(answered.set)
        return {"messageId": message.id}

    # -- internals --------------------------------------------------------------------

    def _report(
        self,
        bridge: Bridge,
        session_id: str,
        answer: asyncio.Future[Outcome],
        answered: asyncio.Event,
    ) -> None:
        """Send the ``state_update`` of how the prompt of ``answer`` ended, once it has,
        its turn is on disk and the prompt was ``answered`` (an owned task:
        :meth:`settle` ends it)."""
        task = asyncio.get_running_loop().create_task(
            self._reported(bridge, session_id, answer, answered),
            name=f"acp v2 state {session_id}",
        )
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _reported(
        self,
        bridge: Bridge,
        session_id: str,
        answer: asyncio.Future[Outcome],
        answered: asyncio.Event,
    ) -> None:
        outcome = await answer  # the bridge settles it, cancelled when it closes
        await answered.wait()
        state = idle(outcome)
        try:
            await bridge.acknowledge(session_id)
        except Exception as exc:
            log.error("the turn of session %s could not be stored: %s", session_id, exc)
            state = idle_failed(f"the turn could not be stored: {exc}")
        self.send_update(session_id, state)
        still = bridge.sessions
        if any(record.id == session_id and record.answering for record in still):
            self.send_update(session_id, RUNNING)  # a prompt sent after a cancel runs now
        await self.drain()


def replay_start(cursor: object) -> int | None:
    """The seq a ``replayFrom`` cursor replays from (``None``: no replay).

    Raises:
        RequestError: ``-32602`` for a cursor tether does not take or a malformed one.
    """
    if cursor is None:
        return None
    kind = cursor.get("type") if isinstance(cursor, dict) else None
    if kind == "start":
        return 0
    if kind == REPLAY_FROM_SEQ:
        assert isinstance(cursor, dict)
        seq = cursor.get("seq")
        if type(seq) is not int or seq < 0:
            raise invalid_params(f"replayFrom {REPLAY_FROM_SEQ!r} needs seq, an integer >= 0")
        return seq
    raise invalid_params(
        f"replayFrom type {kind!r} is not supported; tether replays from 'start' "
        f"or {REPLAY_FROM_SEQ!r} (a seq its updates carry in _meta.tether.seq)"
    )


def idle(outcome: Outcome) -> SessionUpdate:
    """The ``state_update`` of a prompt that ended with ``outcome``."""
    from tether.acp.prompts import TurnFailed

    if isinstance(outcome, TurnFailed):
        return idle_failed(f"the turn failed: {outcome.error}")
    return {"sessionUpdate": "state_update", "state": "idle", "stopReason": outcome}


def idle_failed(message: str) -> SessionUpdate:
    """The ``state_update`` of a prompt whose turn failed, with the failure."""
    error = {"code": INTERNAL_ERROR, "message": message}
    return {"sessionUpdate": "state_update", "state": "idle", "stopReason": "error", "error": error}


def state_of(record: SessionRecord) -> SessionUpdate:
    """The session's current ``state_update``: ``running`` while a prompt is unanswered."""
    if record.answering:
        return RUNNING
    return {"sessionUpdate": "state_update", "state": "idle"}
