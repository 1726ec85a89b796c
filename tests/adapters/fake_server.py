"""A scripted HTTP/1.1 server on 127.0.0.1, standing in for a model provider.

Each request takes the next script from a queue. A script answers through a
:class:`Reply`: a JSON error, or a server-sent event stream it writes event by
event, and it may wait on asyncio events between writes (to hold a stream
open), wait until the client goes away, or drop the connection mid-stream.
Ready-made scripts stand in for misbehaving providers too: one whose answer
stalls (silent, or kept alive by pings) and one whose answer never ends.

What a script writes is buffered and sent in one piece when it flushes, ends
or drops the answer, or at the latest when the event loop next gets control
(whenever the script waits), as a server that writes a whole answer at once
would: the client still reads a chunked event stream, in as few reads as the
network allows.

The server records every request (method, path, headers, JSON body) and
counts connections opened and closed, with an awaitable for "every
connection the client opened has been closed", so tests prove cleanup by
awaiting it instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import h11


@dataclass
class Recorded:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Reply:
    """The answer to one request, written by a script."""

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection
        self.started = False
        self.ended = False

    @property
    def client_gone(self) -> asyncio.Event:
        """Set when the client closed the connection."""
        return self._connection.client_gone

    @property
    def closed(self) -> bool:
        """Whether the client left, or the connection can take no more bytes."""
        connection = self._connection
        return connection.client_gone.is_set() or connection.writer.transport.is_closing()

    async def start(
        self,
        status: int = 200,
        headers: Iterable[tuple[str, str]] = (("content-type", "text/event-stream"),),
    ) -> None:
        """Send the status line and headers of a streamed (chunked) response."""
        self.started = True
        await self._connection.send(h11.Response(status_code=status, headers=list(headers)))

    async def event(self, data: object, *, event: str | None = None) -> None:
        """Send one server-sent event; ``data`` that is not a str is sent as JSON."""
        text = data if isinstance(data, str) else json.dumps(data)
        frame = "" if event is None else f"event: {event}\n"
        frame += "".join(f"data: {line}\n" for line in text.split("\n")) + "\n"
        await self.raw(frame.encode())

    async def raw(self, data: bytes) -> None:
        """Send ``data`` as the next piece of the body."""
        if not self.started:
            await self.start()
        await self._connection.send(h11.Data(data=data))

    async def flush(self) -> None:
        """Hand everything written so far to the network now."""
        await self._connection.flush()

    async def end(self) -> None:
        """End the response body cleanly."""
        self.ended = True
        await self._connection.send(h11.EndOfMessage())
        await self._connection.flush()

    async def respond(
        self, status: int, body: bytes | str | object, headers: Iterable[tuple[str, str]] = ()
    ) -> None:
        """Send a whole response; a body that is not bytes or str is sent as JSON."""
        if isinstance(body, bytes):
            payload, kind = body, "application/octet-stream"
        elif isinstance(body, str):
            payload, kind = body.encode(), "text/plain"
        else:
            payload, kind = json.dumps(body).encode(), "application/json"
        all_headers = [("content-type", kind), *headers, ("content-length", str(len(payload)))]
        self.started = True
        await self._connection.send(h11.Response(status_code=status, headers=all_headers))
        await self._connection.send(h11.Data(data=payload))
        await self.end()

    def drop(self) -> None:
        """Abort the connection at once, mid-response (after what was written so far)."""
        self._connection.drop()


Script = Callable[[Recorded, Reply], Awaitable[None]]


class _Connection:
    def __init__(
        self, server: FakeServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.SERVER)
        self.client_gone = asyncio.Event()
        self.dropped = False
        self._pending = bytearray()

    async def send(self, event: h11.Event) -> None:
        """Buffer ``event``; it is written with the next flush (see the module docs)."""
        if self.client_gone.is_set() or self.dropped:
            return
        data = self.h11.send(event)
        if data:
            if not self._pending:
                asyncio.get_running_loop().call_soon(self._write_pending)
            self._pending += data

    async def flush(self) -> None:
        self._write_pending()
        if not (self.client_gone.is_set() or self.dropped):
            with contextlib.suppress(ConnectionError):
                await self.writer.drain()

    def _write_pending(self) -> None:
        if self._pending and not (self.client_gone.is_set() or self.dropped):
            self.writer.write(bytes(self._pending))
        self._pending.clear()

    def drop(self) -> None:
        self._write_pending()
        self.dropped = True
        self.writer.transport.abort()

    async def next_request(self) -> Recorded | None:
        request: h11.Request | None = None
        body = bytearray()
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                data = await self.reader.read(65536)
                if not data:
                    return None
                self.h11.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                headers = {k.decode().lower(): v.decode() for k, v in request.headers}
                return Recorded(
                    request.method.decode(), request.target.decode(), headers, bytes(body)
                )
            elif isinstance(event, h11.ConnectionClosed):
                return None

    async def watch_eof(self) -> None:
        """While a script answers: notice the client closing the connection."""
        while True:
            try:
                data = await self.reader.read(65536)
            except ConnectionError:
                # A reset (the client closed while we were writing) is a goodbye too.
                data = b""
            if not data:
                self.server.gone_times.append(time.perf_counter())
                self.client_gone.set()
                await self.server._notify()
                return
            self.h11.receive_data(data)


@dataclass
class FakeServer:
    """The server; see the module docstring. Use ``async with FakeServer() as server``."""

    scripts: asyncio.Queue[Script] = field(default_factory=asyncio.Queue)
    requests: list[Recorded] = field(default_factory=list)
    opened: int = 0
    closed: int = 0
    close_times: list[float] = field(default_factory=list)
    """``time.perf_counter()`` at each connection's close, in order."""
    gone_times: list[float] = field(default_factory=list)
    """``time.perf_counter()`` each time a client closed a connection mid-answer."""
    _server: asyncio.Server | None = None
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def queue(self, *scripts: Script) -> None:
        for script in scripts:
            self.scripts.put_nowait(script)

    async def __aenter__(self) -> FakeServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def wait_for(self, predicate: Callable[[FakeServer], bool]) -> None:
        """Return once ``predicate(self)`` holds (checked at each change)."""
        async with self._changed:
            await self._changed.wait_for(lambda: predicate(self))

    async def all_closed(self) -> None:
        """Return once every connection opened so far has been closed."""
        await self.wait_for(lambda server: server.closed == server.opened)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        connection = _Connection(self, reader, writer)
        self.opened += 1
        await self._notify()
        try:
            await self._converse(connection)
        except (ConnectionError, h11.ProtocolError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self.closed += 1
            self.close_times.append(time.perf_counter())
            self._handlers.discard(task)
            await self._notify()

    async def _converse(self, connection: _Connection) -> None:
        while True:
            request = await connection.next_request()
            if request is None:
                return
            self.requests.append(request)
            await self._notify()
            script = self.scripts.get_nowait() if not self.scripts.empty() else _unscripted
            watcher = asyncio.ensure_future(connection.watch_eof())
            try:
                await script(request, Reply(connection))
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            if connection.dropped or connection.client_gone.is_set():
                return
            if connection.h11.our_state is not h11.DONE:
                # The script returned without finishing its answer.
                connection.drop()
                return
            if connection.h11.their_state is not h11.DONE:
                return
            connection.h11.start_next_cycle()


async def _unscripted(request: Recorded, reply: Reply) -> None:
    await reply.respond(500, {"error": {"message": f"no script for {request.path}"}})


# -- scripts ------------------------------------------------------------------------------


def stream(
    events: Sequence[object],
    *,
    hold: asyncio.Event | None = None,
    reached: asyncio.Event | None = None,
    end: bool = True,
) -> Script:
    """Stream ``events`` (strings as they are, other values as JSON).

    An event may be a ``(name, data)`` pair for a named event. With ``hold``,
    the stream stops after the events, sets ``reached``, and waits until
    ``hold`` is set or the client goes away. With ``end=False`` the body is
    left unfinished and the connection is dropped (a mid-stream disconnect).
    """

    async def script(request: Recorded, reply: Reply) -> None:
        await reply.start()
        await _send(reply, events)
        if reached is not None or hold is not None:
            # Out before anyone learns the events were sent.
            await reply.flush()
        if reached is not None:
            reached.set()
        if hold is not None:
            await _first(hold.wait(), reply.client_gone.wait())
            if reply.client_gone.is_set():
                return
        if end:
            await reply.end()
        else:
            reply.drop()

    return script


def until_client_leaves(events: Sequence[object], reached: asyncio.Event | None = None) -> Script:
    """Stream ``events``, then hold the stream open until the client closes the connection."""
    return stream(events, hold=asyncio.Event(), reached=reached)


def stall(
    events: Sequence[object],
    *,
    keepalive: bytes | None = None,
    every: float = 0.01,
    reached: asyncio.Event | None = None,
) -> Script:
    """Stream ``events``, then nothing more of the answer until the client leaves.

    Without ``keepalive`` the connection goes silent; with it, those bytes (an
    SSE comment, a ``ping`` event) are sent every ``every`` seconds, as a
    provider keeps an idle stream alive. ``reached`` is set once the events
    are out.
    """

    async def script(request: Recorded, reply: Reply) -> None:
        await reply.start()
        await _send(reply, events)
        await reply.flush()
        if reached is not None:
            reached.set()
        while not reply.client_gone.is_set():
            if keepalive is not None:
                await reply.raw(keepalive)
                await reply.flush()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reply.client_gone.wait(), every)

    return script


def processing(seconds: float, events: Sequence[object]) -> Script:
    """Send the headers, then nothing for ``seconds`` (a server processing a long
    prompt, as llama.cpp's does), then stream ``events``."""

    async def script(request: Recorded, reply: Reply) -> None:
        await reply.start()
        await reply.flush()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reply.client_gone.wait(), seconds)
        if reply.client_gone.is_set():
            return
        await _send(reply, events)
        await reply.end()

    return script


def llama_error(error: Mapping[str, object]) -> Script:
    """llama.cpp's answer to a request it fails once the stream has begun: an
    ``error:`` line (not ``data:``), then ``data: [DONE]``."""

    async def script(request: Recorded, reply: Reply) -> None:
        await reply.start()
        await reply.raw(f"error: {json.dumps(error)}\n\n".encode())
        await reply.raw(b"data: [DONE]\n\n")
        await reply.end()

    return script


async def hang_up(request: Recorded, reply: Reply) -> None:
    """Close the connection without a byte of answer: a server that had closed its
    end of a kept-alive connection before this request came (as llama.cpp's and
    vLLM's do after each streamed answer, although they advertise keep-alive)."""
    reply.drop()


def endless(head: Sequence[object], piece: object) -> Script:
    """Stream ``head``, then the event ``piece`` over and over until the client leaves."""

    async def script(request: Recorded, reply: Reply) -> None:
        await reply.start()
        await _send(reply, head)
        while not reply.closed:
            await _send(reply, [piece])
            await reply.flush()
            # Writing alone never yields: let the client read.
            await asyncio.sleep(0)

    return script


async def _send(reply: Reply, events: Sequence[object]) -> None:
    for item in events:
        if isinstance(item, tuple):
            await reply.event(item[1], event=item[0])
        else:
            await reply.event(item)


def error(status: int, body: object, headers: Mapping[str, str] | None = None) -> Script:
    """Answer with ``status`` and ``body`` (JSON unless bytes or str)."""

    async def script(request: Recorded, reply: Reply) -> None:
        await reply.respond(status, body, tuple((headers or {}).items()))

    return script


async def _first(*awaitables: Awaitable[object]) -> None:
    tasks = [asyncio.ensure_future(awaitable) for awaitable in awaitables]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
