"""The JSON-RPC rules kept between the transport and the dispatcher.

:class:`RpcGate` is the transport the connection (:mod:`tether.acp.rpc`) reads from; it
wraps a :class:`~tether.acp.transport.FrameChannel` (which has already
answered every frame that is not JSON-RPC at all) and settles, before the
dispatcher sees a frame, what a plain dispatcher would get wrong:

* **A request sent as a notification** (a method tether answers, but no
  ``id``) cannot be answered; it is dropped and logged once per method, as a
  warning without a traceback (a plain dispatcher would log a traceback for each).
* **An unknown notification** is dropped and logged once per method.
* **A notification with bad params** (``session/cancel`` whose ``sessionId``
  is not a string) is dropped and logged once.
* **``$/cancel_request``** (``{"requestId": …}``, the schema's
  ``CancelRequestNotification``) cancels the referenced request when it is a
  ``session/prompt`` in progress: its session's turn is cancelled, so the
  prompt answers ``{"stopReason": "cancelled"}`` — the "valid response with a
  cancellation marker" the protocol allows; a reference to anything else — another
  method, a request already answered, no request at all — is ignored
  quietly. Sent with an ``id``, it is answered with a ``null`` result.
* **Malformed ``mcpServers``** in ``session/new`` or ``session/load`` get
  ``-32602`` naming the entry and field (a lenient decoder would drop a malformed
  entry silently, and the session would start without that server).
* **An id already in use** by a request still in progress gets ``-32600``:
  every answer must name exactly one request, and a cancel exactly one prompt.

Order is kept: frames reach the dispatcher in the order they arrived, and a frame the
gate answers itself is answered at once, in that order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tether.acp.transport import INVALID_REQUEST, FrameChannel, error_frame, valid_id

log = logging.getLogger(__name__)

CANCEL_REQUEST = "$/cancel_request"
REQUEST_ID = "requestId"
"""The parameter of ``$/cancel_request`` that names the request to cancel."""

REQUEST_METHODS = frozenset(
    {
        "initialize",
        "authenticate",
        "logout",
        "session/new",
        "session/load",
        "session/list",
        "session/set_mode",
        "session/set_config_option",
        "session/prompt",
        "session/fork",
        "session/resume",
        "session/close",
        "session/delete",
    }
)
"""Methods the server answers: sent without an ``id`` they cannot be."""

NOTIFICATION_METHODS = frozenset({"session/cancel", CANCEL_REQUEST})
"""Notifications the server acts on (``_``-prefixed extensions aside)."""

SERVER_METHODS = frozenset({"session/new", "session/load"})
"""Requests whose ``mcpServers`` start servers."""

INVALID_PARAMS = -32602

MAX_WARNED_TOPICS = 64
"""Distinct warnings a connection logs at most (a client inventing methods cannot flood the log)."""

CancelPrompt = Callable[[str], None]
"""Cancels the turn of a session (the prompt it answers then says ``cancelled``)."""


def _mcp_servers_problem(value: object) -> str | None:
    from tether.mcp.errors import McpConfigError
    from tether.mcp.servers import from_acp

    try:
        from_acp(value)
    except McpConfigError as exc:
        return str(exc)
    return None


def _key(frame_id: object) -> tuple[str, object]:
    # "1" and 1 are different ids; 1 and 1.0 are the same number.
    return ("s", frame_id) if isinstance(frame_id, str) else ("n", frame_id)


class RpcGate:
    """The connection's transport: a :class:`FrameChannel` plus the rules above."""

    def __init__(self, transport: FrameChannel, cancel_prompt: CancelPrompt) -> None:
        self._transport = transport
        self._cancel_prompt = cancel_prompt
        self._in_progress: dict[tuple[str, object], str | None] = {}
        """Requests not yet answered: id → the session of a prompt (``None`` for other methods)."""
        self._warned: set[str] = set()

    async def receive(self) -> dict[str, Any] | None:
        """The next frame to dispatch, or ``None`` at end of input."""
        while True:
            frame = await self._transport.receive()
            if frame is None:
                return None
            if self._admit(frame):
                return frame

    async def send(self, message: dict[str, Any]) -> None:
        """Send ``message``; an answer ends its request's time in progress."""
        if "method" not in message and "id" in message:
            self._in_progress.pop(_key(message["id"]), None)
        await self._transport.send(message)

    async def close(self) -> None:
        await self._transport.close()

    # -- the rules -------------------------------------------------------------------

    def _admit(self, frame: dict[str, Any]) -> bool:
        """Whether ``frame`` goes on to the dispatcher (else the gate has dealt with it)."""
        method = frame.get("method")
        if method is None:
            return True  # a response to one of the server's requests
        if method == CANCEL_REQUEST:
            self._cancel_request(frame)
            return False
        if "id" not in frame:
            return self._admit_notification(method, frame.get("params"))
        key = _key(frame["id"])
        if key in self._in_progress:
            self._transport.write(
                error_frame(
                    frame["id"],
                    INVALID_REQUEST,
                    f"Invalid request: id {frame['id']!r} is already in use "
                    "by a request in progress",
                )
            )
            return False
        params = frame.get("params")
        if method in SERVER_METHODS and isinstance(params, dict):
            problem = _mcp_servers_problem(params.get("mcpServers"))
            if problem is not None:
                self._transport.write(
                    error_frame(frame["id"], INVALID_PARAMS, f"Invalid params: {problem}")
                )
                return False
        session = params.get("sessionId") if isinstance(params, dict) else None
        prompt = method == "session/prompt" and isinstance(session, str)
        self._in_progress[key] = session if prompt else None
        return True

    def _admit_notification(self, method: str, params: object) -> bool:
        if method.startswith("_"):
            return True
        if method in REQUEST_METHODS:
            self._warn_once(
                method,
                "%s was sent as a notification (without an id), so it cannot be answered; ignored",
                method,
            )
            return False
        if method not in NOTIFICATION_METHODS:
            self._warn_once(method, "unknown notification %r ignored", method)
            return False
        if not isinstance(params, dict) or not isinstance(params.get("sessionId"), str):
            self._warn_once(
                f"{method} params", "a %s notification without a string sessionId ignored", method
            )
            return False
        return True

    def _cancel_request(self, frame: dict[str, Any]) -> None:
        params = frame.get("params")
        target = params.get(REQUEST_ID) if isinstance(params, dict) else None
        session = self._in_progress.get(_key(target)) if valid_id(target) else None
        if session is not None:
            log.info("request %r cancelled by the client: cancelling its turn", target)
            self._cancel_prompt(session)
        else:
            log.debug("%s for %r: no prompt in progress has that id", CANCEL_REQUEST, target)
        if "id" in frame:
            self._transport.write({"jsonrpc": "2.0", "id": frame["id"], "result": None})

    def _warn_once(self, topic: str, message: str, *args: object) -> None:
        if topic in self._warned:
            return
        if len(self._warned) >= MAX_WARNED_TOPICS:
            log.debug(message, *args)
            return
        self._warned.add(topic)
        log.warning(message, *args)
