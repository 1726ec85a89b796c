"""The ``/acp`` endpoint: ACP over streamable HTTP and WebSocket (docs/editors.md).

It maps requests onto :class:`~tether.acp.remote.RemoteConnection` objects,
following the protocol's remote-transport proposal (streamable HTTP with
``Acp-Connection-Id``, and a WebSocket upgrade on the same endpoint):

* ``POST /acp`` — one JSON-RPC frame. Without ``Acp-Connection-Id`` it must be
  an ``initialize`` request: it opens a connection, and the answer is the
  response's body (``200``) with the new connection's id in the
  ``Acp-Connection-Id`` header. With the header, the frame is queued for the
  connection and the response is ``202`` at once; the answer comes on the
  connection's stream. A body that is not a JSON-RPC frame is ``400`` with the
  JSON-RPC error as its body; a connection that is unknown or has ended is
  ``404`` (open a new one with ``initialize``).
* ``GET /acp`` with ``Acp-Connection-Id`` — the connection's Server-Sent
  Events stream: each server frame is a ``message`` event whose ``id`` is the
  frame's number on the connection. ``Last-Event-ID`` (or ``?after=N``)
  continues after frame N; without it the stream starts at the first frame
  kept. A number the connection cannot continue from is ``409``.
* ``DELETE /acp`` with ``Acp-Connection-Id`` — ends the connection: ``204``
  once every session it opened is disposed.
* ``GET /acp`` with ``Upgrade: websocket`` — the same connection over a
  WebSocket: a new one, or, with ``Acp-Connection-Id`` (and ``Last-Event-ID``),
  the one named, continued after that frame. The accepting response carries the
  connection's id in ``Acp-Connection-Id``; each message is one JSON-RPC frame
  as text, and a client counts the server's messages to know the number of the
  last one it got.

The token guard and the origin check of the web app (:mod:`tether.web.security`)
apply to every request, the WebSocket upgrade included.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tether.acp.remote import (
    ConnectionClosedError,
    Reader,
    RemoteConnection,
    RemoteConnections,
    ReplayGoneError,
)
from tether.acp.transport import MAX_FRAME_BYTES, FrameRefusedError, encode_frame, read_frame

log = logging.getLogger(__name__)

PATH = "/acp"
CONNECTION_HEADER = "acp-connection-id"
SESSION_HEADER = "acp-session-id"
RETRY_MS = 2000
"""How long an ``EventSource`` waits before it reconnects a stream that ended."""

POLICY_VIOLATION = 1008
"""The WebSocket close code for a refused upgrade, where a server cannot answer it with HTTP."""


class EndpointError(Exception):
    """A request refused with ``status`` and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class AcpEndpoint:
    """``/acp`` for ``connections`` (see the module docs)."""

    def __init__(self, connections: RemoteConnections) -> None:
        self._connections = connections

    def routes(self) -> list[BaseRoute]:
        """The endpoint's routes, for the web app."""
        return [
            Route(PATH, self.http, methods=["GET", "POST", "DELETE"], include_in_schema=False),
            WebSocketRoute(PATH, self.websocket),
        ]

    async def http(self, request: Request) -> Response:
        try:
            if request.method == "POST":
                return await self._post(request)
            if request.method == "DELETE":
                return await self._delete(request)
            return self._get(request)
        except EndpointError as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)

    # -- streamable HTTP --------------------------------------------------------------

    async def _post(self, request: Request) -> Response:
        body = await _body(request)
        try:
            frame = read_frame(body)
        except FrameRefusedError as exc:
            return Response(encode_frame(exc.answer), 400, media_type="application/json")
        if request.headers.get(CONNECTION_HEADER) is None:
            if frame.get("method") != "initialize" or "id" not in frame:
                raise EndpointError(
                    400,
                    "a connection opens with an initialize request; "
                    "send the others with its Acp-Connection-Id",
                )
            try:
                connection = self._connections.open()
                answer = await connection.initialize(frame)
            except ConnectionClosedError as exc:
                raise EndpointError(503, str(exc)) from None
            headers = {CONNECTION_HEADER: connection.id}
            return Response(encode_frame(answer), media_type="application/json", headers=headers)
        connection = self._connection(request.headers.get(CONNECTION_HEADER))
        try:
            connection.deliver(frame)
        except ConnectionClosedError as exc:
            raise EndpointError(404, str(exc)) from None
        return Response(status_code=202)

    def _get(self, request: Request) -> Response:
        if request.headers.get(SESSION_HEADER) is not None:
            raise EndpointError(
                400,
                "tether sends every frame on the connection's stream: "
                "open it with Acp-Connection-Id alone",
            )
        connection = self._connection(request.headers.get(CONNECTION_HEADER))
        after = _after(request.headers.get("last-event-id") or request.query_params.get("after"))
        reader = _attach(connection, after)
        return StreamingResponse(
            _event_stream(reader),
            media_type="text/event-stream",
            headers={"x-accel-buffering": "no", CONNECTION_HEADER: connection.id},
        )

    async def _delete(self, request: Request) -> Response:
        connection = self._connection(request.headers.get(CONNECTION_HEADER))
        connection.end()
        await connection.ended.wait()
        return Response(status_code=204)

    def _connection(self, connection_id: str | None) -> RemoteConnection:
        if connection_id is None:
            raise EndpointError(400, "Acp-Connection-Id is missing")
        connection = self._connections.get(connection_id)
        if connection is None:
            raise EndpointError(
                404, f"no ACP connection {connection_id!r}: open one with initialize"
            )
        return connection

    # -- WebSocket ----------------------------------------------------------------------

    async def websocket(self, websocket: WebSocket) -> None:
        try:
            connection, reader = self._upgrade(websocket)
        except EndpointError as exc:
            await _deny(websocket, exc)
            return
        await websocket.accept(headers=[(CONNECTION_HEADER.encode(), connection.id.encode())])
        sending = asyncio.get_running_loop().create_task(
            _send_frames(websocket, reader), name=f"acp {connection.id[:8]} ws send"
        )
        try:
            await _receive_frames(websocket, connection)
        finally:
            reader.leave()
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)

    def _upgrade(self, websocket: WebSocket) -> tuple[RemoteConnection, Reader]:
        connection_id = websocket.headers.get(CONNECTION_HEADER)
        if connection_id is None:
            try:
                connection = self._connections.open()
            except ConnectionClosedError as exc:
                raise EndpointError(503, str(exc)) from None
            return connection, _attach(connection, 0)
        connection = self._connection(connection_id)
        after = _after(
            websocket.headers.get("last-event-id") or websocket.query_params.get("after")
        )
        return connection, _attach(connection, after)


def _attach(connection: RemoteConnection, after: int) -> Reader:
    try:
        return connection.attach(after)
    except ReplayGoneError as exc:
        raise EndpointError(409, f"{exc}: open a new connection and load the session") from None
    except ConnectionClosedError as exc:
        raise EndpointError(404, str(exc)) from None


async def _event_stream(reader: Reader) -> AsyncIterator[bytes]:
    try:
        yield b"retry: %d\n\n" % RETRY_MS
        async for seq, data in reader.frames():
            yield b"id: %d\nevent: message\ndata: %b\n\n" % (seq, data)
    finally:
        reader.leave()


async def _send_frames(websocket: WebSocket, reader: Reader) -> None:
    """The connection's frames as text messages; the socket closes when they end (another
    reader took over, or the connection ended)."""
    try:
        async for _seq, data in reader.frames():
            await websocket.send_text(data.decode())
        await websocket.close()
    except (WebSocketDisconnect, RuntimeError, OSError) as exc:
        log.debug("an ACP WebSocket went away while sending: %s", exc)


async def _receive_frames(websocket: WebSocket, connection: RemoteConnection) -> None:
    """Deliver each message as a frame, until the client disconnects (a frame that is not
    JSON-RPC is answered with its error on the connection, as on stdio)."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        text = message.get("text")
        data = text.encode() if text is not None else message.get("bytes") or b""
        try:
            frame = read_frame(data)
        except FrameRefusedError as exc:
            connection.write(exc.answer)
            continue
        try:
            connection.deliver(frame)
        except ConnectionClosedError:
            return


async def _deny(websocket: WebSocket, error: EndpointError) -> None:
    """Refuse an upgrade with the error's status where the server can say it, else a close."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(
            JSONResponse({"error": str(error)}, status_code=error.status)
        )
    else:
        await websocket.close(POLICY_VIOLATION, reason=str(error)[:120])


async def _body(request: Request) -> bytes:
    """The request's body, refused past :data:`MAX_FRAME_BYTES` without holding more of it.

    Raises:
        EndpointError: ``413`` past the limit.
    """
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_FRAME_BYTES:
            raise EndpointError(413, f"a frame may hold at most {MAX_FRAME_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _after(value: str | None) -> int:
    """The frame number a reader continues after (``0``: from the first kept).

    Raises:
        EndpointError: ``400`` for a value that is not a number of frames.
    """
    if value is None:
        return 0
    try:
        after = int(value)
    except ValueError:
        after = -1
    if after < 0:
        raise EndpointError(400, f"Last-Event-ID must be a frame number, got {value[:40]!r}")
    return after
