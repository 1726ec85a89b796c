"""The JSON Lines session file: its lines, its header line, and reading it back.

A session file's first line is ``{"tether_session":1,"header":{...}}``, where
the number is the format version; every further line is one event in compact
JSON with its keys in the order ``type, seq, time, data``. **A line exists
once its newline is on disk**: whatever follows the last intact line is a
torn tail, left by a crash during an append.

`SessionFile` is an open file and the reads done on it: probing where its
parts lie without parsing its events (`Layout`), parsing the event lines,
folding them into a listing's `Activity`, cutting off a torn tail. How files
are created, appended to, locked and listed is the backend's
(:mod:`tether.persist.backends.jsonl`).
"""

from __future__ import annotations

import builtins
import errno
import fcntl
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import msgspec

from tether.persist.backends.bulk import BadRecordError
from tether.persist.backends.errors import (
    CorruptLogError,
    InvalidRecordError,
    UnsupportedFormatError,
)
from tether.persist.backends.lines import (
    BLOCK,
    decode_blocks,
    parse_blocks,
    parse_lines,
    parse_lines_after,
)
from tether.persist.backends.records import (
    HeaderRecord,
    encode_json,
    parse_header,
)
from tether.persist.backends.summary import Activity, title_of
from tether.session.stored import StoredEvent

if TYPE_CHECKING:
    from tether.session.log import LoadedEvents
    from tether.session.registry import EventRegistry

__all__ = [
    "FORMAT_VERSION",
    "Layout",
    "SessionFile",
    "header_line",
    "is_json",
]

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
"""The file format this module writes, and the newest it reads."""

_CHUNK = 1 << 16

# Event lines in the compact form written here start with these bytes;
# listing counts and finds events by them instead of parsing every line.
_EVENT_START = b'\n{"type":"'
_TURN_START = b'\n{"type":"turn/start",'
_USER_MESSAGE = b'\n{"type":"user/message",'
_SESSION_TITLE = b'\n{"type":"session/title",'


def header_line(header: HeaderRecord) -> bytes:
    """The first line of a session file holding ``header``, newline included."""
    return encode_json({"tether_session": FORMAT_VERSION, "header": header}).encode("utf-8") + b"\n"


class Layout(msgspec.Struct, frozen=True):
    """Where the parts of a session file lie, learned without parsing its events.

    ``end`` is the offset just past the last intact line; bytes from there to
    ``size`` are a torn line.
    """

    header: HeaderRecord
    header_end: int
    end: int
    size: int
    last_event: StoredEvent | None

    @property
    def torn(self) -> bool:
        return self.size > self.end

    @property
    def next_seq(self) -> int:
        return 0 if self.last_event is None else self.last_event.seq + 1


class SessionFile:
    """An open session file and the reads done on it.

    Opened to write, it is locked exclusively, and its size and identity are
    read once the lock is held, so they stay true until it is closed
    (cooperating writers all take the lock). Opened to read, it is not
    locked: what it reads ends at the size it had when opened, and a line a
    writer had half appended by then reads as a torn tail.
    """

    def __init__(self, path: Path, session_id: str, fd: int, stat: os.stat_result) -> None:
        self.path = path
        self.session_id = session_id
        self.fd = fd
        self.inode = stat.st_ino
        self.size = stat.st_size
        self.mtime = stat.st_mtime

    @classmethod
    def open(cls, path: Path, session_id: str, *, writable: bool, wait: bool = True) -> SessionFile:
        """Open ``path``: locked exclusively to write, unlocked to read.

        Raises:
            FileNotFoundError: there is no such file, or it was deleted while
                this call waited for the lock.
            BlockingIOError: without ``wait``, another writer holds the lock.
        """
        fd = os.open(path, (os.O_RDWR | os.O_APPEND) if writable else os.O_RDONLY)
        try:
            if writable:
                fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            stat = os.fstat(fd)
            if stat.st_nlink == 0:
                raise FileNotFoundError(errno.ENOENT, "session file was deleted", str(path))
        except BaseException:
            os.close(fd)
            raise
        return cls(path, session_id, fd, stat)

    def __enter__(self) -> SessionFile:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        os.close(self.fd)

    def probe(self) -> Layout:
        """Read the header and the last intact event, and locate a torn tail.

        Raises:
            CorruptLogError: the header is missing or invalid, or the last
                intact line is not a valid event.
            UnsupportedFormatError: the header declares a newer format.
        """
        last_newline = self._rfind_newline(self.size)
        if last_newline < 0:
            raise self._corrupt(1, "the header line is missing or incomplete")
        header_end = self._find_newline(0) + 1
        header = self._parse_header(self.read(0, header_end - 1))
        end = last_newline + 1
        if end == self.size and end > header_end:
            start = self._rfind_newline(end - 1) + 1
            if not is_json(self.read(start, end - 1)):
                # Torn as well, though it ends in a newline: after a crash the
                # file system may keep a write's last block but not an earlier
                # one, leaving zeros inside the line.
                end = start
        last_event: StoredEvent | None = None
        if end > header_end:
            start = self._rfind_newline(end - 1) + 1
            try:
                [last_event] = parse_lines(self.read(start, end), None)
            except BadRecordError as exc:
                raise self._corrupt(self._line_number(start), exc.reason) from None
        return Layout(header, header_end, end, self.size, last_event)

    def parse_events(self, start: int, end: int) -> builtins.list[StoredEvent]:
        """Parse and validate the event lines in ``[start, end)``, which begin at seq 0.

        Read a block at a time (:meth:`blocks`).

        Raises:
            CorruptLogError: a line is not a valid event, or its seq is out of order.
        """
        try:
            return parse_blocks(self.blocks(start, end))
        except BadRecordError as exc:
            raise self._corrupt(self._line_number(start) + exc.index, exc.reason) from None

    def decode_events(self, start: int, end: int, registry: EventRegistry) -> LoadedEvents:
        """Decode the event lines in ``[start, end)``, which begin at seq 0, into events.

        Decoded as read, a block at a time, and kept packed (`decode_blocks`),
        so the file is never held decoded whole.

        Raises:
            CorruptLogError: a line is not a valid event, or its seq is out of order.
            UnknownEventTypeError, EventFormatError: as `EventRegistry.decode_stored`.
        """
        try:
            return decode_blocks(self.blocks(start, end), registry)
        except BadRecordError as exc:
            raise self._corrupt(self._line_number(start) + exc.index, exc.reason) from None

    def blocks(self, start: int, end: int) -> Iterator[bytes]:
        """The lines in ``[start, end)`` (``end`` just past a newline), read in
        runs of whole lines of about :data:`BLOCK` bytes.

        A line longer than a block comes whole, in a block of its own size.
        """
        while start < end:
            stop = min(start + BLOCK, end)
            block = self.read(start, stop)
            if stop < end:
                cut = block.rfind(b"\n") + 1
                if cut:
                    block = block[:cut]
                else:
                    block += self.read(stop, self._find_newline(stop) + 1)
            yield block
            start += len(block)

    def line_start(self, end: int) -> int:
        """Where the line that ends just before offset ``end`` (past its newline) starts."""
        return self._rfind_newline(end - 1) + 1

    def whole_end(self) -> int:
        """The offset just past the file's last newline: a line still being
        written (no newline yet) is not whole."""
        return self._rfind_newline(self.size) + 1

    def parse_after(
        self, start: int, end: int, first_seq: int, after_seq: int, limit: int | None
    ) -> tuple[builtins.list[StoredEvent], int, int]:
        """Of the event lines in ``[start, end)`` (``start`` a line's start, ``end``
        just past a newline), which begin at seq ``first_seq``: the events whose
        seq is greater than ``after_seq``, at most ``limit`` of them (all with
        ``None``), in order; the offset just past the last line read; and the
        seq of the line there.

        Read a block at a time (:meth:`blocks`), as `parse_lines_after` reads.

        Raises:
            CorruptLogError: a line read is not a valid event, or its seq is
                out of order (a torn line that ends in a newline reads as one too).
        """
        blocks = self.blocks(start, end)
        try:
            events, size, seq = parse_lines_after(blocks, first_seq, after_seq, limit)
        except BadRecordError as exc:
            raise self._corrupt(self._line_number(start) + exc.index, exc.reason) from None
        return events, start + size, seq

    def scan_activity(self, layout: Layout) -> Activity:
        """Fold the file's events into an :class:`Activity` without parsing most of them.

        The file is read a block at a time (:meth:`blocks`): what a listing
        holds of a session is one block, whatever the session's size.

        Raises:
            CorruptLogError: a line that had to be parsed is not a valid event.
        """
        if layout.last_event is None:
            return Activity()
        activity = Activity()
        offset, seq = layout.header_end, 0
        for block in self.blocks(layout.header_end, layout.end):
            activity = self._scan_block(block, offset, seq, activity)
            offset += len(block)
            seq += block.count(b"\n")
        return Activity(activity.turn_count, layout.last_event.time, activity.title)

    def _scan_block(self, block: bytes, offset: int, seq: int, activity: Activity) -> Activity:
        """``activity`` after the event lines ``block``, found at ``offset``, from seq ``seq``."""
        # A newline before the block puts one before every event line.
        window = b"\n" + block
        if window.count(_EVENT_START) != window.count(b"\n") - 1:
            # Not all in this backend's compact form: parse it the exact way.
            try:
                return activity.extend(parse_lines(block, seq))
            except BadRecordError as exc:
                raise self._corrupt(self._line_number(offset) + exc.index, exc.reason) from None
        title = activity.title
        found = window.find(_USER_MESSAGE) if title is None else -1
        while title is None and found >= 0:
            title = title_of(self._line_in(window, found, offset).data_object())
            found = window.find(_USER_MESSAGE, found + 1)
        named = window.rfind(_SESSION_TITLE)
        if named >= 0:
            # A title written for the session replaces the first prompt's.
            written = self._line_in(window, named, offset).data_object().get("title")
            title = written if isinstance(written, str) and written else title
        return Activity(activity.turn_count + window.count(_TURN_START), None, title)

    def _line_in(self, window: bytes, newline: int, offset: int) -> StoredEvent:
        """The event on the line after ``window[newline]``, a window that starts
        just before file offset ``offset``.

        Raises:
            CorruptLogError: the line is not a valid event.
        """
        line_end = window.index(b"\n", newline + 1) + 1
        try:
            [event] = parse_lines(window[newline + 1 : line_end], None)
        except BadRecordError as exc:
            raise self._corrupt(self._line_number(offset + newline), exc.reason) from None
        return event

    def cut_torn_tail(self, layout: Layout) -> None:
        """Truncate the file to its last intact line, durably."""
        os.ftruncate(self.fd, layout.end)
        os.fsync(self.fd)
        self.size = layout.end
        log.warning(
            "cut a torn last line of %d bytes from %s at offset %d",
            layout.size - layout.end,
            self.path,
            layout.end,
        )

    def read(self, start: int, end: int) -> bytes:
        """The bytes in ``[start, end)``."""
        chunks = []
        while start < end:
            chunk = os.pread(self.fd, end - start, start)
            if not chunk:
                raise self._corrupt(None, f"the file ended at offset {start} while being read")
            chunks.append(chunk)
            start += len(chunk)
        return b"".join(chunks)

    def _parse_header(self, line: bytes) -> HeaderRecord:
        try:
            obj = json.loads(line.decode("utf-8"))
        except ValueError as exc:
            raise self._corrupt(1, f"the header line is not valid JSON: {exc}") from None
        if not isinstance(obj, dict) or "tether_session" not in obj:
            raise self._corrupt(1, 'the first line has no "tether_session" format version')
        version = obj["tether_session"]
        if type(version) is int and version > FORMAT_VERSION:
            raise UnsupportedFormatError(str(self.path), version, FORMAT_VERSION)
        if type(version) is not int or version != FORMAT_VERSION:
            raise self._corrupt(1, f"unknown format version {version!r}")
        if obj.keys() != {"tether_session", "header"}:
            raise self._corrupt(1, f"header line keys are {sorted(obj)}")
        try:
            header = parse_header(obj["header"])
        except InvalidRecordError as exc:
            raise self._corrupt(1, str(exc)) from None
        if header["id"] != self.session_id:
            raise self._corrupt(1, f"the header names session {header['id']!r}")
        return header

    def _find_newline(self, start: int) -> int:
        while start < self.size:
            chunk = self.read(start, min(start + _CHUNK, self.size))
            found = chunk.find(b"\n")
            if found >= 0:
                return start + found
            start += len(chunk)
        return -1

    def _rfind_newline(self, before: int) -> int:
        while before > 0:
            start = max(0, before - _CHUNK)
            found = self.read(start, before).rfind(b"\n")
            if found >= 0:
                return start + found
            before = start
        return -1

    def _line_number(self, offset: int) -> int:
        """The 1-based number of the line starting at ``offset``; reads the file up to it."""
        newlines = 0
        for start in range(0, offset, _CHUNK):
            newlines += self.read(start, min(start + _CHUNK, offset)).count(b"\n")
        return newlines + 1

    def _corrupt(self, line: int | None, reason: str) -> CorruptLogError:
        return CorruptLogError(self.session_id, reason, path=self.path, line=line)


def is_json(line: bytes) -> bool:
    try:
        json.loads(line.decode("utf-8"))
    except ValueError:
        return False
    return True
