"""ACP over the network: client connections that outlive the requests carrying them.

A :class:`RemoteConnection` is one ACP client connection of ``tether web``'s
``/acp`` endpoint (:mod:`tether.acp.endpoint` maps HTTP and WebSocket requests
onto it). It is the protocol server's :class:`~tether.acp.transport.FrameChannel`,
and serves the same :class:`~tether.acp.server.AcpServer` as ``tether acp`` —
or, when its first frame is an ``initialize`` asking for protocol version 2
(:func:`~tether.acp.v2.handshake.speaks_v2`), the same
:class:`~tether.acp.v2.server.AcpServerV2` — on a bridge of its own
(:class:`MountedBridge`):

* **In.** Frames the client posts, or sends on its WebSocket, are checked as on
  stdio (:func:`~tether.acp.transport.read_frame`) and queued in arrival order
  (:meth:`RemoteConnection.deliver`).
* **Out.** Every frame the server writes is numbered — 1, 2, 3… for each
  connection — and kept in the connection's :class:`Outbox`. A reader (an SSE
  stream, a WebSocket) gets the frames after the number it names, then each
  frame as it is written. A reader that reconnects naming the last number it
  got (``Last-Event-ID``) continues with the next: no frame lost, none twice.
  Naming ``N`` confirms frames 1..N, which are dropped. A frame not yet handed
  to a reader is always kept; of those handed over but not confirmed, the
  latest ``keep`` are. A reader that asks for frames no longer kept is refused
  (:class:`ReplayGoneError`), never given a gap.
* **One reader at a time.** A new reader supersedes the one before (whose
  stream then ends), so a half-open TCP connection the server has not noticed
  yet cannot keep frames from the client's new one.
* **The work belongs to the connection, not to a request.** A prompt runs in
  the connection's handler task; a reader that goes away mid-prompt stops
  nothing, and the prompt's updates and answer wait in the outbox. A request the
  server makes of the client (a permission question) waits too, within its
  timeout, for an answer the client posts after it reconnects.
* **The end.** A connection ends when the client deletes it, when it has had no
  reader for ``grace`` seconds (counted from its creation or from its last
  reader leaving), when its bridge is torn down, or when the server stops
  (:meth:`RemoteConnections.close`). Then, as for an editor that went away on
  stdio (``tether acp``): the bridge's one teardown disposes every session the
  connection opened, their closing events durable; the requests still in
  progress are answered (a prompt ``cancelled``); the outbox closes and every
  reader's stream ends.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from tether.acp.source import LaunchedBridge
from tether.acp.transport import encode_frame
from tether.runtime.keys import ServiceKey

if TYPE_CHECKING:
    from tether.acp.bridge import Bridge
    from tether.acp.rpc import AgentConnection
    from tether.acp.server import AcpServer
    from tether.runtime import Context
    from tether.runtime.fiber import Fiber

log = logging.getLogger(__name__)

GRACE = 60.0
"""Seconds a connection without a reader is kept for the client to come back."""

MAX_KEPT = 10_000
"""The most frames a connection keeps that were handed to a reader but not confirmed."""

ANSWER_GRACE = 1.0
"""Seconds the end of a connection waits for requests in progress to be answered."""


class ReplayGoneError(Exception):
    """A reader asked for frames the connection no longer keeps (or never sent)."""


class ConnectionClosedError(ConnectionError):
    """The connection has ended (or is ending): it takes no frame and no reader."""


class Outbox:
    """The frames the server wrote on one connection, numbered from 1, until confirmed."""

    def __init__(self, keep: int = MAX_KEPT) -> None:
        self._frames: deque[tuple[int, bytes]] = deque()
        self._last = 0
        self._handed = 0
        self._keep = keep
        self._wake = asyncio.Event()
        self.closed = False

    @property
    def last(self) -> int:
        """The number of the last frame written (0: none yet)."""
        return self._last

    def put(self, data: bytes) -> int:
        """Keep ``data`` as the next frame and wake the reader; returns its number."""
        self._last += 1
        self._frames.append((self._last, data))
        self._trim()
        self.nudge()
        return self._last

    def handed(self, seq: int) -> None:
        """Frames up to ``seq`` were handed to a reader: past ``keep`` of them, the oldest
        are dropped (a reader that still needs one is refused, see :meth:`check`)."""
        self._handed = max(self._handed, seq)
        self._trim()

    def check(self, seq: int) -> None:
        """Whether a reader can continue after frame ``seq``.

        Raises:
            ReplayGoneError: ``seq`` was never sent, or frames after it are no longer kept.
        """
        if seq < 0 or seq > self._last:
            raise ReplayGoneError(
                f"frame {seq} was never sent on this connection (the last is {self._last})"
            )
        first = self._frames[0][0] if self._frames else self._last + 1
        if seq + 1 < first:
            raise ReplayGoneError(
                f"the frames after {seq} are no longer kept (the oldest kept is {first})"
            )

    def since(self, seq: int) -> list[tuple[int, bytes]]:
        """The frames after ``seq``, in order.

        Raises:
            ReplayGoneError: as :meth:`check`.
        """
        self.check(seq)
        first = self._frames[0][0] if self._frames else self._last + 1
        return list(itertools.islice(self._frames, max(0, seq + 1 - first), None))

    def _trim(self) -> None:
        frames = self._frames
        while len(frames) > self._keep and frames[0][0] <= self._handed:
            frames.popleft()

    def confirm(self, seq: int) -> None:
        """The client has frames 1..``seq``: they need not be kept."""
        while self._frames and self._frames[0][0] <= seq:
            self._frames.popleft()

    def waiter(self) -> asyncio.Event:
        """An event set at the next :meth:`put`, :meth:`nudge` or :meth:`close`."""
        return self._wake

    def nudge(self) -> None:
        """Set the current :meth:`waiter` (readers look again)."""
        self._wake.set()
        self._wake = asyncio.Event()

    def close(self) -> None:
        """No frame is written from now on; readers end once they have the kept ones."""
        self.closed = True
        self.nudge()


class Reader:
    """One reader of a connection's frames (an SSE stream, a WebSocket)."""

    def __init__(self, connection: RemoteConnection, after: int) -> None:
        self._connection = connection
        self.after = after

    async def frames(self) -> AsyncIterator[tuple[int, bytes]]:
        """``(number, frame)`` after ``after``, then live, while this is the connection's
        reader; ends when another reader supersedes it or the connection ends."""
        outbox = self._connection.outbox
        cursor = self.after
        while self.current:
            wake = outbox.waiter()
            try:
                batch = outbox.since(cursor)
            except ReplayGoneError as exc:
                log.info("ACP connection %s: %s; its stream ends", self._connection.id, exc)
                return
            for seq, data in batch:
                if not self.current:
                    return
                yield seq, data
                cursor = seq
                outbox.handed(seq)
            if not batch:
                if outbox.closed:
                    return
                await wake.wait()

    @property
    def current(self) -> bool:
        """Whether this is the connection's reader (no later one superseded it)."""
        return self._connection.reader is self

    def leave(self) -> None:
        """This reader is gone (idempotent); the connection's grace period starts if it
        was the current one."""
        self._connection.left(self)


class MountedBridge(LaunchedBridge["Fiber"]):
    """A bridge of its own for one connection: the bridge plugin mounted as a child of
    ``ctx``'s fiber under a service name of its own (a
    :class:`~tether.acp.server.BridgeSource`)."""

    def __init__(self, ctx: Context, config: dict[str, object], label: str) -> None:
        super().__init__(label)
        self._ctx = ctx
        self._config = config
        self._label = label

    async def signed_in(self) -> None:
        """Nothing to switch: the server chose its model when it started."""

    async def _stop(self, owner: Fiber) -> None:
        await owner.dispose()

    async def _launch(self) -> tuple[Fiber, Bridge]:
        from tether.acp import bridge as bridge_plugin

        fiber = self._ctx.plugin(bridge_plugin, self._config, label=self._label)
        try:
            await fiber
            bridge = self._ctx.get(ServiceKey["Bridge"](str(self._config["service"])))
            if bridge is None:
                raise RuntimeError("the ACP bridge did not start (see the log above)")
        except BaseException:
            await fiber.dispose()
            raise
        return fiber, bridge


class RemoteConnection:
    """One network client's ACP connection (see the module docs); its frame channel."""

    def __init__(
        self, connection_id: str, source: MountedBridge, *, grace: float, keep: int, images: bool
    ) -> None:
        self.id = connection_id
        self.outbox = Outbox(keep)
        self.reader: Reader | None = None
        self._source = source
        self._grace = grace
        self._inbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._readers_changed = asyncio.Event()
        self._initialize: tuple[object, asyncio.Future[dict[str, Any]]] | None = None
        self._ending = False
        self.ended = asyncio.Event()
        """Set once the connection's end (see the module docs) is complete."""
        self._images = images
        self._protocol: tuple[AcpServer, AgentConnection] | None = None
        """The server and connection of the version the first frame negotiated."""
        self._held: dict[str, Any] | None = None
        """The first frame, read to choose the version, given to the connection first."""

    # -- the frame channel ------------------------------------------------------------

    async def receive(self) -> dict[str, Any] | None:
        held, self._held = self._held, None
        return held if held is not None else await self._inbox.get()

    def write(self, frame: dict[str, Any]) -> None:
        waiting = self._initialize
        if waiting is not None and "method" not in frame and frame.get("id") == waiting[0]:
            self._initialize = None
            if not waiting[1].done():
                waiting[1].set_result(frame)
            return
        if self.outbox.closed:
            log.debug("connection %s has ended: a frame is dropped", self.id)
            return
        self.outbox.put(encode_frame(frame))

    async def drain(self) -> None:
        """Frames wait in the outbox for the client: nothing to wait for while it is open.

        Raises:
            ConnectionError: the connection has ended.
        """
        if self.outbox.closed:
            raise ConnectionClosedError(f"ACP connection {self.id} has ended")

    async def send(self, message: dict[str, Any]) -> None:
        """Write ``message``; a request on an ended connection raises ``ConnectionError``."""
        if self.outbox.closed and "method" in message and "id" in message:
            raise ConnectionClosedError(f"ACP connection {self.id} has ended")
        self.write(message)

    async def close(self) -> None:
        self.outbox.close()

    # -- what the endpoint does -----------------------------------------------------

    def deliver(self, frame: dict[str, Any]) -> None:
        """Queue a frame from the client, after every frame delivered before it.

        Raises:
            ConnectionClosedError: the connection is ending.
        """
        if self._ending:
            raise ConnectionClosedError(f"ACP connection {self.id} has ended")
        self._inbox.put_nowait(frame)

    async def initialize(self, frame: dict[str, Any]) -> dict[str, Any]:
        """Deliver the ``initialize`` request that opens the connection and return its
        answer (which the outbox does not keep: the request's response carries it).

        Raises:
            ConnectionClosedError: the connection ended before it was answered.
        """
        answered: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._initialize = (frame.get("id"), answered)
        self.deliver(frame)
        return await answered

    def attach(self, after: int) -> Reader:
        """The connection's reader from now on, continuing after frame ``after``
        (which confirms 1..``after``); the reader before it ends.

        Raises:
            ReplayGoneError: frames after ``after`` are no longer kept, or never were.
            ConnectionClosedError: the connection has ended.
        """
        if self.outbox.closed:
            raise ConnectionClosedError(f"ACP connection {self.id} has ended")
        self.outbox.check(after)
        self.outbox.confirm(after)
        reader = self.reader = Reader(self, after)
        self._changed()
        return reader

    def left(self, reader: Reader) -> None:
        if self.reader is reader:
            self.reader = None
            self._changed()

    def end(self) -> None:
        """Begin the connection's end (see the module docs); :attr:`ended` is set when done."""
        if not self._ending:
            self._ending = True
            self._inbox.put_nowait(None)

    # -- its life ---------------------------------------------------------------------

    async def serve(self) -> None:
        """Serve the client until the connection ends, then run its end (module docs)."""
        loop = asyncio.get_running_loop()
        watched = (
            loop.create_task(self._listen(), name=f"acp {self.id} receive"),
            loop.create_task(self._idle(), name=f"acp {self.id} idle"),
            loop.create_task(self._source.bridge_closed(), name=f"acp {self.id} bridge"),
        )
        try:
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._ending = True
            protocol = self._protocol
            try:
                await self._source.shutdown()
                if protocol is not None:
                    await protocol[0].settle(ANSWER_GRACE)
            finally:
                for task in watched:
                    task.cancel()
                await asyncio.gather(*watched, return_exceptions=True)
                if protocol is not None:
                    await protocol[1].close()
                waiting, self._initialize = self._initialize, None
                if waiting is not None and not waiting[1].done():
                    message = f"ACP connection {self.id} ended before initialize was answered"
                    waiting[1].set_exception(ConnectionClosedError(message))
                self.ended.set()

    async def _listen(self) -> None:
        """Read the first frame, serve the protocol version it negotiates (version 2
        when it is an ``initialize`` asking for exactly that, else version 1), and
        hand it and every frame after it to that version's connection (imported with
        the first connection, not with the web app: its start-up)."""
        first = await self._inbox.get()
        if first is None:
            return
        self._held = first
        from tether.acp.protocols import connect
        from tether.acp.v2.handshake import speaks_v2

        version = 2 if speaks_v2(first) else 1
        self._protocol = connect(self._source, self, version=version, images=self._images)
        await self._protocol[1].listen()

    async def _idle(self) -> None:
        """Return once the connection has had no reader for ``grace`` seconds."""
        while True:
            changed = self._readers_changed
            if self.reader is not None:
                await changed.wait()
                continue
            try:
                await asyncio.wait_for(changed.wait(), self._grace)
            except TimeoutError:
                log.info("ACP connection %s: no reader for %ss; it ends", self.id, self._grace)
                return

    def _changed(self) -> None:
        self._readers_changed.set()
        self._readers_changed = asyncio.Event()
        self.outbox.nudge()


class RemoteConnections:
    """The network clients of one server: each connection is served in a task this
    registry owns, and :meth:`close` ends them all."""

    def __init__(
        self,
        ctx: Context,
        *,
        mode: str = "ask",
        permission_timeout: float = 600.0,
        grace: float = GRACE,
        keep: int = MAX_KEPT,
        images: bool = False,
    ) -> None:
        self._ctx = ctx
        self._bridge_config: dict[str, object] = {
            "mode": mode,
            "permission_timeout": permission_timeout,
            "commands": False,
        }
        self._grace = grace
        self._keep = keep
        self._images = images
        self._connections: dict[str, RemoteConnection] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False

    def open(self) -> RemoteConnection:
        """A new connection, served from now on.

        Raises:
            ConnectionClosedError: the server is shutting down.
        """
        if self._closing:
            raise ConnectionClosedError("the server is shutting down")
        connection_id = secrets.token_hex(16)
        config = {**self._bridge_config, "service": f"acp_remote_{connection_id}"}
        source = MountedBridge(self._ctx, config, label=f"acp remote {connection_id[:8]}")
        connection = RemoteConnection(
            connection_id, source, grace=self._grace, keep=self._keep, images=self._images
        )
        self._connections[connection_id] = connection
        task = asyncio.get_running_loop().create_task(
            self._serve(connection), name=f"acp remote {connection_id[:8]}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return connection

    def get(self, connection_id: str) -> RemoteConnection | None:
        """The live connection ``connection_id``, if there is one."""
        return self._connections.get(connection_id)

    def __len__(self) -> int:
        return len(self._connections)

    def end_all(self) -> None:
        """Begin the end of every connection; no connection opens afterwards."""
        self._closing = True
        for connection in list(self._connections.values()):
            connection.end()

    async def close(self) -> None:
        """End every connection (:meth:`end_all`) and await their ends."""
        self.end_all()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _serve(self, connection: RemoteConnection) -> None:
        try:
            await connection.serve()
        except Exception:
            log.exception("ACP connection %s failed", connection.id)
        finally:
            self._connections.pop(connection.id, None)
