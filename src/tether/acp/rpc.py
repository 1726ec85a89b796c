"""JSON-RPC 2.0 for the agent side of ACP: dispatch to the server, requests to the client.

:class:`AgentConnection` reads frames from a :class:`MessageTransport` (in
``tether acp``, the :class:`~tether.acp.gate.RpcGate`, which has already
answered every frame that breaks JSON-RPC), and

* starts **one handler task per request or notification, in arrival order**:
  a task created for a frame first runs before any task created for a later
  frame, so a ``session/cancel`` sent after a ``session/prompt`` finds the
  prompt queued;
* checks a request's params against its generated wire type
  (:mod:`tether.acp.wire`) before the handler runs: params that do not fit
  are answered ``-32602`` with what did not fit, never a traceback; the
  handler receives the fields as keyword arguments in snake case, and the
  params' ``_meta`` object, when there is one, as ``meta`` (every handler
  takes it or swallows it with the names it does not use);
* answers with the handler's result (a wire ``Struct``, a mapping or
  ``None``), a :class:`RequestError` as its error object, and anything else
  as ``-32603`` (logged with its traceback on stderr);
* sends the server's own requests to the client (:meth:`AgentConnection.request`)
  and settles each with the client's answer, decoded into the expected type.

Ownership: every handler task belongs to the connection; :meth:`close` cancels
the ones still running and awaits them, and fails every request to the client
still waiting with ``ConnectionError``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, overload

import msgspec

from tether.acp import wire

log = logging.getLogger(__name__)

METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

T = TypeVar("T")


class RequestError(Exception):
    """A JSON-RPC error: raised by a handler to answer with it, or by
    :meth:`AgentConnection.request` when the client answered with one."""

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    @classmethod
    def method_not_found(cls, method: str) -> RequestError:
        return cls(METHOD_NOT_FOUND, "Method not found", {"method": method})

    def to_error_obj(self) -> dict[str, object]:
        """The ``error`` member of an answer."""
        error: dict[str, object] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class MessageTransport(Protocol):
    """Where frames come from and go to."""

    async def receive(self) -> dict[str, Any] | None:
        """The next frame, or ``None`` at end of input."""
        ...

    async def send(self, message: dict[str, Any]) -> None:
        """Send ``message``; raises ``ConnectionError`` when the peer is gone."""
        ...

    async def close(self) -> None: ...


Handler = Callable[..., Awaitable[object]]


@dataclass(frozen=True, slots=True)
class Route:
    """A method the server answers: the wire type of its params and the handler's name."""

    params: type[msgspec.Struct]
    handler: str


AGENT_ROUTES: Mapping[str, Route] = {
    wire.AGENT_METHODS["initialize"]: Route(wire.InitializeRequest, "initialize"),
    wire.AGENT_METHODS["authenticate"]: Route(wire.AuthenticateRequest, "authenticate"),
    wire.AGENT_METHODS["logout"]: Route(wire.LogoutRequest, "logout"),
    wire.AGENT_METHODS["session_new"]: Route(wire.NewSessionRequest, "new_session"),
    wire.AGENT_METHODS["session_load"]: Route(wire.LoadSessionRequest, "load_session"),
    wire.AGENT_METHODS["session_resume"]: Route(wire.ResumeSessionRequest, "resume_session"),
    wire.AGENT_METHODS["session_fork"]: Route(wire.ForkSessionRequest, "fork_session"),
    wire.AGENT_METHODS["session_close"]: Route(wire.CloseSessionRequest, "close_session"),
    wire.AGENT_METHODS["session_delete"]: Route(wire.DeleteSessionRequest, "delete_session"),
    wire.AGENT_METHODS["session_list"]: Route(wire.ListSessionsRequest, "list_sessions"),
    wire.AGENT_METHODS["session_set_mode"]: Route(wire.SetSessionModeRequest, "set_session_mode"),
    wire.AGENT_METHODS["session_set_config_option"]: Route(
        wire.SetSessionConfigOptionRequest, "set_config_option"
    ),
    wire.AGENT_METHODS["session_prompt"]: Route(wire.PromptRequest, "prompt"),
}
"""Requests, by method name."""

AGENT_NOTIFICATIONS: Mapping[str, Route] = {
    wire.AGENT_METHODS["session_cancel"]: Route(wire.CancelNotification, "cancel"),
}
"""Notifications, by method name."""


class AgentConnection:
    """One client connection: dispatches its frames to ``agent`` (an object with a
    method per handler of ``routes`` and ``notifications`` — by default
    :data:`AGENT_ROUTES` and :data:`AGENT_NOTIFICATIONS`, protocol version 1 — plus
    ``ext_method`` and ``ext_notification`` for ``_``-prefixed methods)."""

    def __init__(
        self,
        agent: object,
        transport: MessageTransport,
        *,
        routes: Mapping[str, Route] = AGENT_ROUTES,
        notifications: Mapping[str, Route] = AGENT_NOTIFICATIONS,
    ) -> None:
        self._agent = agent
        self._transport = transport
        self._routes = routes
        self._notifications = notifications
        self._handlers: set[asyncio.Task[None]] = set()
        self._pending: dict[int, asyncio.Future[object]] = {}
        self._next_id = 0
        self._closed = False

    async def listen(self) -> None:
        """Serve frames until the input ends; then fail the requests still waiting."""
        try:
            while (frame := await self._transport.receive()) is not None:
                self._dispatch(frame)
        finally:
            self._fail_pending()

    async def close(self) -> None:
        """Cancel and await the handlers still running; fail the client requests waiting."""
        if self._closed:
            return
        self._closed = True
        self._fail_pending()
        handlers = list(self._handlers)
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await self._transport.close()

    @overload
    async def request(self, method: str, params: msgspec.Struct, result: type[T]) -> T: ...

    @overload
    async def request(self, method: str, params: msgspec.Struct, result: None = None) -> None: ...

    async def request(
        self, method: str, params: msgspec.Struct, result: type[T] | None = None
    ) -> T | None:
        """Send the client a request and return its answer decoded as ``result``
        (``None`` when ``result`` is ``None``: only success matters).

        Raises:
            RequestError: the client answered with an error, or with a result
                that is not a ``result``.
            ConnectionError: the connection closed before the answer came.
        """
        if self._closed:
            raise ConnectionError("the connection is closed")
        request_id = self._next_id
        self._next_id += 1
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        frame = {"jsonrpc": "2.0", "id": request_id, "method": method}
        frame["params"] = msgspec.to_builtins(params)
        try:
            await self._transport.send(frame)
            answer = await future
        finally:
            self._pending.pop(request_id, None)
        if result is None:
            return None
        try:
            return msgspec.convert(answer, result)
        except msgspec.ValidationError as exc:
            raise RequestError(INVALID_PARAMS, f"the client's answer to {method}: {exc}") from None

    async def notify(self, method: str, params: object) -> None:
        """Send the client a notification."""
        await self._transport.send({"jsonrpc": "2.0", "method": method, "params": params})

    # -- incoming frames ------------------------------------------------------------------

    def _dispatch(self, frame: dict[str, Any]) -> None:
        method = frame.get("method")
        if method is None:
            self._settle(frame)
            return
        if "id" in frame:
            work = self._answer(frame["id"], method, frame.get("params"))
        else:
            work = self._notified(method, frame.get("params"))
        task = asyncio.get_running_loop().create_task(work, name=f"acp {method}")
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    def _settle(self, frame: dict[str, Any]) -> None:
        """A client's answer to one of the server's requests."""
        request_id = frame.get("id")
        future = self._pending.get(request_id) if isinstance(request_id, int) else None
        if future is None or future.done():
            log.debug("an answer to no request in progress (id %r) ignored", request_id)
            return
        error = frame.get("error")
        if isinstance(error, dict):
            code = error.get("code")
            message = error.get("message")
            future.set_exception(
                RequestError(
                    code if isinstance(code, int) else INTERNAL_ERROR,
                    message if isinstance(message, str) else "error",
                    error.get("data"),
                )
            )
        else:
            future.set_result(frame.get("result"))

    async def _answer(self, request_id: object, method: str, params: object) -> None:
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        try:
            result = await self._call(method, params, self._routes, self._ext_method)
            answer["result"] = msgspec.to_builtins(result) if result is not None else None
        except RequestError as exc:
            answer["error"] = exc.to_error_obj()
        except Exception as exc:
            log.exception("%s failed", method)
            failure = RequestError(INTERNAL_ERROR, "Internal error", {"details": str(exc)})
            answer["error"] = failure.to_error_obj()
        try:
            await self._transport.send(answer)
        except ConnectionError:
            log.debug("the answer to %s is dropped: the client is gone", method)

    async def _notified(self, method: str, params: object) -> None:
        try:
            await self._call(method, params, self._notifications, self._ext_notification)
        except RequestError as exc:
            log.warning("notification %s ignored: %s", method, exc.message)
        except Exception:
            log.exception("notification %s failed", method)

    async def _call(
        self,
        method: str,
        params: object,
        routes: Mapping[str, Route],
        extension: Callable[[str, dict[str, Any]], Awaitable[object]],
    ) -> object:
        if method.startswith("_"):
            return await extension(method[1:], params if isinstance(params, dict) else {})
        route = routes.get(method)
        handler: Handler | None = None if route is None else getattr(self._agent, route.handler)
        if route is None or handler is None:
            raise RequestError.method_not_found(method)
        return await handler(**_arguments(route.params, params))

    async def _ext_method(self, name: str, params: dict[str, Any]) -> object:
        handler: Handler | None = getattr(self._agent, "ext_method", None)
        if handler is None:
            raise RequestError.method_not_found(f"_{name}")
        return await handler(name, params)

    async def _ext_notification(self, name: str, params: dict[str, Any]) -> object:
        handler: Handler | None = getattr(self._agent, "ext_notification", None)
        return None if handler is None else await handler(name, params)

    def _fail_pending(self) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("the connection is closed"))
        self._pending.clear()


def _arguments(kind: type[msgspec.Struct], params: object) -> dict[str, object]:
    """``params`` checked against ``kind``, as the handler's keyword arguments.

    Raises:
        RequestError: ``-32602`` naming what does not fit.
    """
    try:
        value = msgspec.convert({} if params is None else params, kind)
    except msgspec.ValidationError as exc:
        raise RequestError(INVALID_PARAMS, f"Invalid params: {exc}") from None
    arguments = {name: getattr(value, name) for name in value.__struct_fields__}
    meta = arguments.pop("field_meta", None)
    if meta is not None:
        arguments["meta"] = meta
    return arguments
