"""JSON-RPC frames over a byte stream pair: one JSON object per line.

:class:`FrameTransport` is the connection's transport (``receive``, ``send``,
``close``; :mod:`tether.acp.rpc`) for stdio, with these guarantees:

* **Bad input is answered, never fatal.** A line that cannot be decoded gets
  a ``-32700`` parse error — whatever the decoder raised, including
  ``RecursionError`` for deep nesting and ``MemoryError`` for one frame that
  does not fit; a frame that is not a strict JSON-RPC 2.0 request,
  notification or response gets ``-32600`` (with the frame's id when it has a
  usable one). Either way the connection keeps serving. Strict means:
  ``"jsonrpc"`` is ``"2.0"``; an ``id`` is a string, a number (not a boolean)
  or null; a frame nests no deeper than :data:`MAX_DEPTH`; numbers are finite
  (no ``NaN``/``Infinity``) and strings hold no lone UTF-16 surrogate — so
  nothing that passes can break the code it reaches later (re-encoding it,
  validating it, writing it to a session log).
* **``_meta`` is never taken for parameters.** A ``_meta`` that is not a JSON
  object is dropped from the params of every request and notification (the
  schema allows only an object, and a malformed one must not fail the
  request); an object stays, and the connection hands it to a handler as
  ``meta`` apart from its parameters (:mod:`tether.acp.rpc`), so its keys can
  never override them.
* **Frames leave in the order they are written.** :meth:`FrameTransport.write`
  serializes a frame at once, synchronously, into one outgoing buffer, so
  updates written from event listeners keep the order of the events that
  caused them, and a response written afterwards follows them. The buffer
  goes to the stream at the end of the event loop's current pass (one system
  call for every frame written in it), or at once on :meth:`drain`.

A broken output stream (the client went away) makes :meth:`send` raise
``ConnectionError``; :meth:`write` drops frames from then on (logged once).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any, Protocol

log = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600

MAX_DEPTH = 64
"""The deepest nesting of arrays and objects a frame may have (the protocol needs under ten)."""

_SURROGATE = re.compile("[\ud800-\udfff]")

MAX_FRAME_BYTES = 50 * 1024 * 1024
"""The longest frame accepted (images in prompts make frames large)."""


class FrameTransport:
    """Newline-delimited JSON-RPC frames over ``reader`` and ``writer``."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_frame_bytes: int = MAX_FRAME_BYTES,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._max_frame_bytes = max_frame_bytes
        self._broken = False
        self._outgoing: list[bytes] = []
        self._returned: list[dict[str, Any]] = []

    # -- receiving ----------------------------------------------------------------

    async def receive(self) -> dict[str, Any] | None:
        """The next well-formed frame, or ``None`` at end of input.

        Lines that are blank are skipped; malformed frames are answered with
        an error frame and skipped. A frame given back with :meth:`unread`
        comes first.
        """
        if self._returned:
            return self._returned.pop()
        while True:
            line = await self._read_line()
            if line is None:
                self.write(
                    error_frame(
                        None,
                        INVALID_REQUEST,
                        f"Invalid request: frame longer than {self._max_frame_bytes} bytes",
                    )
                )
                continue
            if not line:
                return None
            line = line.strip()
            if not line:
                continue
            try:
                return read_frame(line)
            except FrameRefusedError as exc:
                self.write(exc.answer)

    def unread(self, frame: dict[str, Any]) -> None:
        """Give ``frame`` back: the next :meth:`receive` returns it."""
        self._returned.append(frame)

    async def _read_line(self) -> bytes | None:
        """The next line (``b""`` at end of input), or ``None`` for one that was too long.

        A line longer than the frame limit is read to its end and dropped
        without being kept in memory.
        """
        chunks: list[bytes] = []
        size = 0
        try:
            while True:
                try:
                    piece = await self._reader.readuntil(b"\n")
                    complete = True
                except asyncio.LimitOverrunError as exc:
                    piece = await self._reader.readexactly(exc.consumed)
                    complete = False
                size += len(piece)
                if size <= self._max_frame_bytes:
                    chunks.append(piece)
                else:
                    chunks.clear()
                if complete:
                    return b"".join(chunks) if size <= self._max_frame_bytes else None
        except asyncio.IncompleteReadError as exc:
            if size + len(exc.partial) > self._max_frame_bytes:
                return None
            chunks.append(exc.partial)
            return b"".join(chunks)
        except ConnectionError:
            return b""

    # -- sending ------------------------------------------------------------------

    def write(self, frame: dict[str, Any]) -> None:
        """Queue ``frame`` after every frame written before it (dropped once broken)."""
        if self._broken:
            return
        if not self._outgoing:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outgoing.append(encode_frame(frame) + b"\n")

    def _flush(self) -> None:
        if not self._outgoing:
            return
        data = b"".join(self._outgoing)
        self._outgoing.clear()
        if self._broken:
            return
        if self._writer.is_closing():
            self._broken = True
            log.info("the client's input is closed; frames are dropped from now on")
            return
        try:
            self._writer.write(data)
        except (ConnectionError, RuntimeError) as exc:
            self._broken = True
            log.info("the client's input is closed (%s); frames are dropped from now on", exc)

    async def drain(self) -> None:
        """Hand every written frame to the stream; wait until it has taken them (backpressure).

        Raises:
            ConnectionError: the output stream is broken.
        """
        self._flush()
        if self._broken:
            raise ConnectionError("the ACP client's input is closed")
        try:
            await self._writer.drain()
        except (ConnectionError, RuntimeError) as exc:
            self._broken = True
            raise ConnectionError(f"the ACP client's input is closed: {exc}") from exc

    async def send(self, message: dict[str, Any]) -> None:
        """Write ``message`` and wait for the stream to take it (the connection's seam).

        A response or notification to a client that went away is dropped;
        a request fails, since its caller would wait for an answer.

        Raises:
            ConnectionError: the output stream is broken and ``message`` is a request.
        """
        self.write(message)
        try:
            await self.drain()
        except ConnectionError:
            if "method" in message and "id" in message:
                raise
            log.debug("dropped a frame for a client that went away")

    async def close(self) -> None:
        """Flush what was written and close the output stream."""
        self._flush()
        if self._writer.is_closing():
            return
        try:
            if not self._broken:
                await self._writer.drain()
            self._writer.close()
            await self._writer.wait_closed()
        except (ConnectionError, RuntimeError) as exc:
            log.debug("closing the output stream: %s", exc)


class FrameDecodeError(ValueError):
    """A line that is not a JSON value (the message says why)."""


class FrameRefusedError(ValueError):
    """A frame that is not strict JSON-RPC 2.0; ``answer`` is the error frame to send back."""

    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__(answer["error"]["message"])
        self.answer = answer


def read_frame(data: bytes) -> dict[str, Any]:
    """The JSON-RPC frame in ``data`` (one JSON object), checked as the module docs say.

    Raises:
        FrameRefusedError: ``-32700`` for what does not decode, ``-32600`` for a
            value that is not a strict JSON-RPC 2.0 message (with its id when usable).
    """
    try:
        frame = decode(data)
    except FrameDecodeError as exc:
        raise FrameRefusedError(error_frame(None, PARSE_ERROR, f"Parse error: {exc}")) from None
    problem = _frame_problem(frame)
    if problem is not None:
        message = f"Invalid request: {problem}"
        raise FrameRefusedError(error_frame(_usable_id(frame), INVALID_REQUEST, message))
    assert isinstance(frame, dict)
    return _without_meta(frame)


class FrameChannel(Protocol):
    """What the protocol server reads frames from and writes them to, whatever carries
    them: :class:`FrameTransport` on stdio, a network connection
    (:mod:`tether.acp.remote`)."""

    async def receive(self) -> dict[str, Any] | None:
        """The next well-formed frame, or ``None`` at end of input."""
        ...

    def write(self, frame: dict[str, Any]) -> None:
        """Queue ``frame`` after every frame written before it."""
        ...

    async def drain(self) -> None:
        """Wait until the frames written are handed on; ``ConnectionError`` if they cannot be."""
        ...

    async def send(self, message: dict[str, Any]) -> None:
        """Write ``message`` and drain; ``ConnectionError`` for a request the peer cannot get."""
        ...

    async def close(self) -> None: ...


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def encode_frame(frame: Mapping[str, Any]) -> bytes:
    """``frame`` as one line of JSON (without the newline).

    msgspec encodes it, several times faster than the standard library (a
    replayed session writes tens of thousands of frames), once it has been
    imported: the ``initialize`` answer, written before tether boots, does
    not wait for that import, and goes out through the standard library like
    text msgspec cannot encode as UTF-8 (a lone surrogate, which the
    standard library escapes).
    """
    return _ENCODER.encode(frame)


class _FrameEncoder:
    """msgspec's JSON encoder once msgspec is imported; the standard library before."""

    __slots__ = ("_encode", "_refused")

    def __init__(self) -> None:
        self._encode: Callable[[object], bytes] | None = None
        self._refused: tuple[type[Exception], ...] = ()

    def encode(self, frame: Mapping[str, Any]) -> bytes:
        if self._encode is None:
            msgspec = sys.modules.get("msgspec")
            if msgspec is not None and hasattr(msgspec, "json"):
                self._encode = msgspec.json.Encoder().encode
                self._refused = (msgspec.EncodeError, UnicodeEncodeError, TypeError)
        if self._encode is not None:
            try:
                return self._encode(frame)
            except self._refused:
                pass
        return json.dumps(frame, separators=(",", ":")).encode()


_ENCODER = _FrameEncoder()


def decode(line: bytes) -> object:
    """The JSON value in ``line``.

    Raises:
        FrameDecodeError: for any failure of the decoder — invalid JSON or
            UTF-8, ``NaN``/``Infinity``, an integer too long to convert,
            nesting too deep for the decoder (``RecursionError``), a value too
            large for memory (``MemoryError``) — so one frame can never stop
            the receive loop.
    """
    try:
        return json.loads(line, parse_constant=_reject_constant)
    except RecursionError:
        raise FrameDecodeError(f"nesting deeper than {MAX_DEPTH} levels") from None
    except MemoryError:
        raise FrameDecodeError("the frame does not fit in memory") from None
    except Exception as exc:
        raise FrameDecodeError(str(exc) or type(exc).__name__) from None


def valid_id(value: object) -> bool:
    """Whether ``value`` is a JSON-RPC id: a string, a finite number (not a boolean) or null."""
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or (isinstance(value, str | int) and not isinstance(value, bool))


def _shape_problem(frame: object) -> str | None:
    """Why ``frame``'s values could break the code that handles it, or ``None``.

    Walks the value with an explicit stack (no recursion, whatever the depth).
    """
    stack: list[tuple[object, int]] = [(frame, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return "a string holds a lone UTF-16 surrogate"
            continue
        if isinstance(value, float) and not math.isfinite(value):
            # 1e400 decodes to inf: no JSON can carry it back.
            return "a number is too large to be a finite JSON number"
        if isinstance(value, dict):
            children: list[object] = [*value.keys(), *value.values()]
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > MAX_DEPTH:
            return f"nesting deeper than {MAX_DEPTH} levels"
        stack.extend((child, depth + 1) for child in children)
    return None


def _frame_problem(frame: object) -> str | None:
    """Why ``frame`` is not a strict JSON-RPC 2.0 message, or ``None`` when it is one."""
    if not isinstance(frame, dict):
        return f"a frame must be a JSON object, got {type(frame).__name__}"
    shape = _shape_problem(frame)
    if shape is not None:
        return shape
    if frame.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if "id" in frame and not valid_id(frame["id"]):
        return "id must be a string, a number or null"
    method = frame.get("method")
    if method is not None:
        if not isinstance(method, str):
            return "method must be a string"
        params = frame.get("params")
        if params is not None and not isinstance(params, dict | list):
            return "params must be an object or an array"
        return None
    if "id" in frame and ("result" in frame or "error" in frame):
        return None
    return "a frame needs a method (request, notification) or a result or error (response)"


def _without_meta(frame: dict[str, Any]) -> dict[str, Any]:
    """``frame`` without a ``params._meta`` that is not an object, in a request or
    notification (one that is stays: see the module docs)."""
    params = frame.get("params")
    if (
        "method" in frame
        and isinstance(params, dict)
        and "_meta" in params
        and not isinstance(params["_meta"], dict)
    ):
        frame = {**frame, "params": {k: v for k, v in params.items() if k != "_meta"}}
    return frame


def _usable_id(frame: object) -> object:
    if isinstance(frame, dict):
        frame_id = frame.get("id")
        if not isinstance(frame_id, str) or not _SURROGATE.search(frame_id):
            return frame_id if valid_id(frame_id) else None
    return None


def error_frame(frame_id: object, code: int, message: str) -> dict[str, Any]:
    """The JSON-RPC error response to ``frame_id``."""
    return {"jsonrpc": "2.0", "id": frame_id, "error": {"code": code, "message": message}}
