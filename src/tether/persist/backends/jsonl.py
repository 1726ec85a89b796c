"""Session logs as one JSON Lines file per session: the embedded default backend.

Each session is ``<root>/sessions/<id>.jsonl``. Its first line is
``{"tether_session":1,"header":{...}}``, where the number is the file format
version; every further line is one event in compact JSON with its keys in the
order ``type, seq, time, data``.

Durability rests on one rule: **a line exists once its newline is on disk.**
A session file is created whole (header and first batch, possibly empty,
written to a temporary file, fsynced, then hard-linked into place), so it
never appears half-written. Appends write a batch in one call and fsync before
returning. A crash during an append can leave one torn line at the end; a load
reports it without touching the file (loads open files read-only), and the
next write cuts it off. Damage anywhere else is reported as corruption.

The session's lease (:mod:`tether.persist.backends.lease`) is an ``flock`` on
``<id>.lock`` beside its log; files tether creates here are mode 0600 and
the directories 0700.

Every write to a session file holds an exclusive ``flock`` on it, so writers
in other threads and processes are serialised per session while different
sessions proceed in parallel. Readers (``load``, listing) take no lock and
write nothing: a line still being appended reads as a torn tail, reported and
left for the writer, so a reader can never stall the session's owner.
"""

from __future__ import annotations

import builtins
import errno
import fcntl
import json
import logging
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from tether.persist.backends.base import SessionSummary, StoredLog, TornTail, newest_first
from tether.persist.backends.bulk import BadRecordError, decode_event_lines_of
from tether.persist.backends.errors import (
    BackendClosedError,
    CorruptLogError,
    InvalidRecordError,
    InvalidSessionIdError,
    SessionNotFoundError,
    StoreConflictError,
    UnsupportedFormatError,
)
from tether.persist.backends.lease import FileLease, process_alive
from tether.persist.backends.records import (
    EventRecord,
    HeaderRecord,
    check_continues,
    encode_json,
    encode_record,
    parse_batch,
    parse_header,
    validate_session_id,
)
from tether.persist.backends.summary import Activity, title_of
from tether.persist.location import private_dir
from tether.session.stored import StoredEvent

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
"""The file format this module writes, and the newest it reads."""

_SUFFIX = ".jsonl"
_TEMP_SUFFIX = ".tmp"
_LOCK_SUFFIX = ".lock"
_CHUNK = 1 << 16

# Lines this backend writes start with these bytes; list() counts and finds
# events by them instead of parsing every line.
_EVENT_START = b'\n{"type":"'
_TURN_START = b'\n{"type":"turn/start",'
_USER_MESSAGE = b'\n{"type":"user/message",'
_SESSION_TITLE = b'\n{"type":"session/title",'


class JsonlBackend:
    """A :class:`~tether.persist.backends.base.LogBackend` keeping one JSONL file per session.

    Writes are O(batch): the next expected seq of each session is cached
    together with the file's identity and size, and re-read from the file's
    last line (without parsing the rest) whenever the file has changed under
    the cache. Hard links must be supported by the file system.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        """Open (creating if needed) the store under ``root``.

        Temporary files left by writes of processes that no longer run are
        removed before this backend's first write (a backend that only reads
        changes nothing).
        """
        self._dir = Path(root) / "sessions"
        # Entries are only replaced whole while the session's flock is held;
        # single dict operations need no lock of their own.
        self._tails: dict[str, _Tail] = {}
        self._closed = False
        self._swept = False
        if not self._dir.is_dir():
            private_dir(self._dir)
            _fsync_dir(self._dir.parent)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self._dir.parent)!r})"

    @property
    def directory(self) -> Path:
        """The directory holding the session files."""
        return self._dir

    def path(self, session_id: str) -> Path:
        """The file that holds (or would hold) the session.

        Raises:
            InvalidSessionIdError: ``session_id`` is not a valid session id.
        """
        return self._dir / (validate_session_id(session_id) + _SUFFIX)

    def exists(self, session_id: str) -> bool:
        """Whether the session's file exists."""
        self._check_open()
        return self.path(session_id).is_file()

    def next_seq(self, session_id: str) -> int:
        """The seq the session's next event must carry; 0 if it is not stored.

        Reads no more than the file's header and last lines, and cuts off a
        torn last line (as a write would).

        Raises:
            CorruptLogError: the header or the last intact line is damaged.
            UnsupportedFormatError: the file was written by a newer format.
        """
        self._check_open()
        try:
            file = _SessionFile.open(self.path(session_id), session_id, writable=True)
        except FileNotFoundError:
            return 0
        with file:
            return self._tail(file).next_seq

    def write(self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]) -> None:
        """Store a batch; see :meth:`LogBackend.write` for the contract.

        A torn last line found before appending is cut off first (and logged).

        Raises:
            InvalidRecordError: the header (first write) or an event is invalid.
            StoreConflictError: the batch does not continue the stored log.
            CorruptLogError: the stored file is damaged before its last line.
            UnsupportedFormatError: the file was written by a newer format.
        """
        self._check_open()
        if not self._swept:
            self._swept = True
            self._remove_orphaned_temp_files()
        session_id = validate_session_id(header.get("id"))
        batch = parse_batch(session_id, events)
        path = self.path(session_id)
        payload = _encode_lines(batch)
        try:
            file = _SessionFile.open(path, session_id, writable=True)
        except FileNotFoundError:
            self._create(path, session_id, header, batch, payload)
            return
        with file:
            if batch:
                self._append(file, batch, payload)

    def load(self, session_id: str) -> StoredLog:
        """Read and validate the whole log; see :meth:`LogBackend.load`.

        The file is opened read-only and never modified: a torn tail is
        reported, and cut off by the next write (which holds the lease).
        """
        self._check_open()
        try:
            file = _SessionFile.open(self.path(session_id), session_id, writable=False)
        except FileNotFoundError:
            raise SessionNotFoundError(session_id) from None
        with file:
            layout = file.probe()
            events = file.parse_events(layout.header_end, layout.end)
            torn = None
            if layout.torn:
                torn = TornTail(
                    line=len(events) + 2,
                    offset=layout.end,
                    discarded_bytes=layout.size - layout.end,
                )
            else:
                self._tails[session_id] = _Tail(file.inode, len(events), layout.end)
        return StoredLog(layout.header, events, torn)

    def acquire_lease(self, session_id: str) -> FileLease:
        """Take the session's lease: an ``flock`` on ``<id>.lock`` beside its log.

        Raises:
            SessionLeasedError: another process holds it.
        """
        self._check_open()
        lock = self._dir / (validate_session_id(session_id) + _LOCK_SUFFIX)
        return FileLease.acquire(lock, session_id)

    def check_writable(self) -> None:
        """Write, sync and remove a small file where session logs go.

        Raises:
            OSError: the directory is read-only, not writable, or full.
        """
        self._check_open()
        probe = self._dir / f".probe.{os.getpid()}.{secrets.token_hex(4)}{_TEMP_SUFFIX}"
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_all(fd, b"\0" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            _remove_quietly(probe)

    def list(self) -> builtins.list[SessionSummary]:
        """Summarise every session file, newest activity first; see :meth:`LogBackend.list`.

        Files are scanned as bytes: only the header, the last line and the
        user messages needed for the title are parsed (files not in this
        backend's own compact form are parsed whole). A damaged or
        newer-format file is listed with ``error`` set and its modification
        time as ``last_activity``. Files whose names are not session ids are
        skipped with a warning.
        """
        self._check_open()
        summaries: builtins.list[SessionSummary] = []
        for path in self._dir.glob("*" + _SUFFIX):
            session_id = path.name.removesuffix(_SUFFIX)
            try:
                validate_session_id(session_id)
            except InvalidSessionIdError:
                log.warning("ignoring %s: its name is not a session id", path)
                continue
            summary = _summarize(path, session_id)
            if summary is not None:
                summaries.append(summary)
        return newest_first(summaries)

    def delete(self, session_id: str) -> None:
        """Remove the session's file, durably.

        A write waiting for the file's lock meanwhile sees the session as not
        stored.

        Raises:
            SessionNotFoundError: the session has no file.
        """
        with self._open_stored(session_id) as file:
            os.unlink(file.path)
            self._tails.pop(session_id, None)
        _fsync_dir(self._dir)

    def close(self) -> None:
        """Forget cached state; later calls raise :class:`BackendClosedError`."""
        self._closed = True
        self._tails.clear()

    def _open_stored(self, session_id: str) -> _SessionFile:
        self._check_open()
        try:
            return _SessionFile.open(self.path(session_id), session_id, writable=True)
        except FileNotFoundError:
            raise SessionNotFoundError(session_id) from None

    def _check_open(self) -> None:
        if self._closed:
            raise BackendClosedError(f"{self!r} is closed")

    def _create(
        self,
        path: Path,
        session_id: str,
        header: Mapping[str, object],
        batch: Sequence[EventRecord],
        payload: bytes,
    ) -> None:
        record = parse_header(header)
        if batch:
            check_continues(session_id, batch, 0)
        first_line = encode_json({"tether_session": FORMAT_VERSION, "header": record})
        data = first_line.encode("utf-8") + b"\n" + payload
        # The pid lets a later backend tell a crashed write's leftovers from a
        # write in progress in another process.
        temp = self._dir / f".{session_id}.{os.getpid()}.{secrets.token_hex(4)}{_TEMP_SUFFIX}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                _write_all(fd, data)
                os.fsync(fd)
                inode = os.fstat(fd).st_ino
            finally:
                os.close(fd)
            try:
                # Unlike rename, link refuses to replace a file that another
                # writer created meanwhile.
                os.link(temp, path)
            except FileExistsError:
                raise StoreConflictError(
                    f"session {session_id!r} was created by another writer"
                ) from None
        finally:
            _remove_quietly(temp)
        _fsync_dir(self._dir)
        self._tails[session_id] = _Tail(inode, len(batch), len(data))

    def _append(self, file: _SessionFile, batch: Sequence[EventRecord], payload: bytes) -> None:
        session_id = file.session_id
        tail = self._tail(file)
        check_continues(session_id, batch, tail.next_seq)
        try:
            _write_all(file.fd, payload)
            os.fsync(file.fd)
        except BaseException:
            # Whatever reached the file is unacknowledged: take it back so the
            # log ends on a whole batch, and re-read the tail next time.
            self._tails.pop(session_id, None)
            try:
                os.ftruncate(file.fd, tail.size)
            except OSError:
                log.exception("could not undo a failed append to %s", file.path)
            raise
        self._tails[session_id] = _Tail(
            file.inode, tail.next_seq + len(batch), tail.size + len(payload)
        )

    def _tail(self, file: _SessionFile) -> _Tail:
        """The cached tail of ``file`` if still current, else one read from its last line.

        A torn last line found on the way is cut off.
        """
        tail = self._tails.get(file.session_id)
        if tail is not None and tail.inode == file.inode and tail.size == file.size:
            return tail
        layout = file.probe()
        if layout.torn:
            file.cut_torn_tail(layout)
        tail = _Tail(file.inode, layout.next_seq, layout.end)
        self._tails[file.session_id] = tail
        return tail

    def _remove_orphaned_temp_files(self) -> None:
        for temp in self._dir.glob(".*" + _TEMP_SUFFIX):
            # Named ".<id>.<pid>.<random>.tmp" by _create.
            parts = temp.name.rsplit(".", 3)
            try:
                pid = int(parts[1])
            except (IndexError, ValueError):
                continue
            if pid > 0 and not process_alive(pid, ""):
                log.info("removing %s, left by an interrupted write", temp)
                _remove_quietly(temp)


@dataclass(frozen=True)
class _Tail:
    """What an append needs to know about a session file, valid while it is unchanged."""

    inode: int
    next_seq: int
    size: int


@dataclass(frozen=True)
class _Layout:
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


class _SessionFile:
    """An open session file and the reads the backend does on it.

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
    def open(cls, path: Path, session_id: str, *, writable: bool) -> _SessionFile:
        """Open ``path``: locked exclusively to write, unlocked to read.

        Raises:
            FileNotFoundError: there is no such file, or it was deleted while
                this call waited for the lock.
        """
        fd = os.open(path, (os.O_RDWR | os.O_APPEND) if writable else os.O_RDONLY)
        try:
            if writable:
                fcntl.flock(fd, fcntl.LOCK_EX)
            stat = os.fstat(fd)
            if stat.st_nlink == 0:
                raise FileNotFoundError(errno.ENOENT, "session file was deleted", str(path))
        except BaseException:
            os.close(fd)
            raise
        return cls(path, session_id, fd, stat)

    def __enter__(self) -> _SessionFile:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        os.close(self.fd)

    def probe(self) -> _Layout:
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
            if not _is_json(self.read(start, end - 1)):
                # Torn as well, though it ends in a newline: after a crash the
                # file system may keep a write's last block but not an earlier
                # one, leaving zeros inside the line.
                end = start
        last_event: StoredEvent | None = None
        if end > header_end:
            start = self._rfind_newline(end - 1) + 1
            try:
                [last_event] = _parse_lines(self.read(start, end), None)
            except BadRecordError as exc:
                raise self._corrupt(self._line_number(start), exc.reason) from None
        return _Layout(header, header_end, end, self.size, last_event)

    def parse_events(self, start: int, end: int) -> builtins.list[StoredEvent]:
        """Parse and validate the event lines in ``[start, end)``, which begin at seq 0.

        Raises:
            CorruptLogError: a line is not a valid event, or its seq is out of order.
        """
        try:
            return _parse_lines(self.read(start, end), 0)
        except BadRecordError as exc:
            raise self._corrupt(self._line_number(start) + exc.index, exc.reason) from None

    def scan_activity(self, layout: _Layout) -> Activity:
        """Fold the file's events into an :class:`Activity` without parsing most of them.

        Raises:
            CorruptLogError: a line that had to be parsed is not a valid event.
        """
        if layout.last_event is None:
            return Activity()
        # Starting at the header's newline puts a newline before every event line.
        start = layout.header_end - 1
        window = self.read(start, layout.end)
        if window.count(_EVENT_START) != window.count(b"\n") - 1:
            # Not all in this backend's compact form: parse it the exact way.
            return Activity().extend(self.parse_events(layout.header_end, layout.end))
        title = None
        found = window.find(_USER_MESSAGE)
        while title is None and found >= 0:
            line_end = window.index(b"\n", found + 1) + 1
            try:
                [message] = _parse_lines(window[found + 1 : line_end], None)
            except BadRecordError as exc:
                raise self._corrupt(self._line_number(start + found + 1), exc.reason) from None
            title = title_of(message.data_object())
            found = window.find(_USER_MESSAGE, line_end - 1)
        named = window.rfind(_SESSION_TITLE)
        if named >= 0:
            # A title written for the session replaces the first prompt's.
            line_end = window.index(b"\n", named + 1) + 1
            try:
                [titled] = _parse_lines(window[named + 1 : line_end], None)
            except BadRecordError as exc:
                raise self._corrupt(self._line_number(start + named + 1), exc.reason) from None
            written = titled.data_object().get("title")
            title = written if isinstance(written, str) and written else title
        return Activity(window.count(_TURN_START), layout.last_event.time, title)

    def cut_torn_tail(self, layout: _Layout) -> None:
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


def _parse_lines(block: bytes, first_seq: int | None) -> builtins.list[StoredEvent]:
    """Parse newline-terminated event lines; with ``first_seq``, seqs must count up from it.

    Raises:
        BadRecordError: the first line that is not valid UTF-8, JSON or an event.
    """
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError as exc:
        index = block.count(b"\n", 0, exc.start)
        column = exc.start - block.rfind(b"\n", 0, exc.start)
        raise BadRecordError(index, f"invalid UTF-8 at byte {column} of the line") from None
    return decode_event_lines_of(text, first_seq)


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line.decode("utf-8"))
    except ValueError:
        return False
    return True


def _summarize(path: Path, session_id: str) -> SessionSummary | None:
    """The listing row for one session file; ``None`` if the file is gone."""
    try:
        file = _SessionFile.open(path, session_id, writable=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return SessionSummary.unreadable(session_id, 0.0, str(exc))
    with file:
        try:
            layout = file.probe()
            activity = file.scan_activity(layout)
        except (CorruptLogError, UnsupportedFormatError, OSError) as exc:
            return SessionSummary.unreadable(session_id, file.mtime, str(exc))
    header = layout.header
    return SessionSummary(
        id=session_id,
        cwd=header["cwd"],
        created_at=header["created_at"],
        turn_count=activity.turn_count,
        last_activity=(
            activity.last_activity if activity.last_activity is not None else header["created_at"]
        ),
        title=activity.title,
    )


def _encode_lines(batch: Sequence[EventRecord]) -> bytes:
    if not batch:
        return b""
    return b"\n".join([encode_record(event) for event in batch]) + b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError:
        log.exception("could not remove %s", path)
