"""The process's stdio, claimed for the protocol.

:func:`claim_stdio` takes file descriptors 0 and 1 for the ACP connection and
leaves harmless stand-ins in their place: fd 0 reads ``/dev/null`` and fd 1
writes to stderr. So nothing else in the process — a stray ``print``, a
library, a child process that inherits the descriptors — can write into the
protocol stream or read frames meant for the server. stdout carries protocol
frames only.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import stat
import sys
import threading
from typing import IO, NamedTuple

STREAM_LIMIT = 1024 * 1024
"""The stream reader's buffer limit; longer frames are read in pieces (the
frame limit itself is the transport's, see ``MAX_FRAME_BYTES``)."""


class ProtocolStreams(NamedTuple):
    """The protocol's own input and output, as asyncio streams."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter


async def claim_stdio() -> ProtocolStreams:
    """Move the protocol onto private descriptors and open them as asyncio streams."""
    sys.stdout.flush()
    protocol_in = os.dup(0)
    protocol_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=STREAM_LIMIT)
    source = os.fdopen(protocol_in, "rb", buffering=0)
    if _streamable(protocol_in):
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), source)
    else:
        _feed_from_thread(loop, source, reader)
    sink = os.fdopen(protocol_out, "wb", buffering=0)
    transport: asyncio.WriteTransport
    if _streamable(protocol_out):
        transport, protocol = await loop.connect_write_pipe(_WriteProtocol, sink)
    else:
        protocol = _WriteProtocol()
        transport = _BlockingWriteTransport(sink, protocol)
    return ProtocolStreams(reader, asyncio.StreamWriter(transport, protocol, None, loop))


def _streamable(fd: int) -> bool:
    """Whether asyncio can watch ``fd``: a pipe, socket or terminal, not a regular
    file or a device the kernel's poller refuses (``/dev/null`` is one)."""
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        return False
    with selectors.DefaultSelector() as probe:
        try:
            probe.register(fd, selectors.EVENT_READ | selectors.EVENT_WRITE)
        except OSError:
            return False
    return True


class _WriteProtocol(asyncio.streams.FlowControlMixin, asyncio.Protocol):
    """Flow control for the output pipe (what ``StreamWriter.drain`` waits on)."""

    def __init__(self) -> None:
        super().__init__()
        self._closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if not self._closed.done():
            self._closed.set_result(None)

    def _get_close_waiter(self, stream: asyncio.StreamWriter) -> asyncio.Future[None]:
        return self._closed


def _feed_from_thread(
    loop: asyncio.AbstractEventLoop, source: IO[bytes], reader: asyncio.StreamReader
) -> None:
    # A regular file cannot be watched by the event loop; read it in a thread.
    def pump() -> None:
        try:
            while data := source.read(65536):
                loop.call_soon_threadsafe(reader.feed_data, data)
        finally:
            loop.call_soon_threadsafe(reader.feed_eof)

    threading.Thread(target=pump, name="acp-stdin", daemon=True).start()


class _BlockingWriteTransport(asyncio.WriteTransport):
    """Writes straight to a regular file (output redirected to a file)."""

    def __init__(self, sink: IO[bytes], protocol: _WriteProtocol) -> None:
        super().__init__()
        self._sink = sink
        self._protocol = protocol
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._closing:
            self._sink.write(data)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._sink.close()
        self._protocol.connection_lost(None)

    def get_write_buffer_size(self) -> int:
        return 0
