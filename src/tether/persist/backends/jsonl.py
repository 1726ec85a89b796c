"""Session logs as one JSON Lines file per session: the embedded default backend.

Each session is ``<root>/sessions/<id>.jsonl``, in the file format of
:mod:`tether.persist.backends.jsonl_format`. This module is the
:class:`~tether.persist.backends.base.LogBackend` over those files: how they
are created, appended to, locked, listed and deleted.

Durability rests on one rule: **a line exists once its newline is on disk.**
A session file is created whole (header and first batch, possibly empty,
written to a temporary file, fsynced, then hard-linked into place), so it
never appears half-written. Appends write a batch in one call and fsync before
returning — or, through :meth:`JsonlBackend.write_unsynced`, leave the fsync
to a later append or :meth:`JsonlBackend.sync` of the session, which makes
every line before it durable too. A failed append or sync cuts the file back
to where it was last fsynced: what it held after that point may not be on
disk, so it is taken back whole and written again by the next append. A crash
during an append can leave one torn line at the end; a load
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
import logging
import os
import zlib
from collections.abc import Callable, Mapping, Sequence, Sized
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import msgspec

from tether.location import private_dir
from tether.persist.backends.base import (
    LoadedLog,
    SessionSummary,
    StoredLog,
    TornTail,
    newest_first,
)
from tether.persist.backends.errors import (
    BackendClosedError,
    CorruptLogError,
    InvalidSessionIdError,
    SessionNotFoundError,
    StoreConflictError,
    UnsupportedFormatError,
)
from tether.persist.backends.jsonl_format import SessionFile, header_line
from tether.persist.backends.lease import FileLease, Holder, lock_holder, process_alive
from tether.persist.backends.lines import encode_lines
from tether.persist.backends.records import (
    EventRecord,
    HeaderRecord,
    check_continues,
    parse_batch,
    parse_header,
    validate_session_id,
)
from tether.session.lineage import read_lineage

if TYPE_CHECKING:
    from tether.session.registry import EventRegistry
    from tether.session.stored import StoredEvent

log = logging.getLogger(__name__)

_Events = TypeVar("_Events", bound=Sized)

_SUFFIX = ".jsonl"
_TEMP_SUFFIX = ".tmp"
_LOCK_SUFFIX = ".lock"


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
        self._synced: dict[str, _Tail] = {}
        """Each session's tail when its file was last fsynced (by this backend)."""
        self._marks: dict[str, _Mark] = {}
        """Where the last :meth:`events_after` of each session ended (any thread may set one)."""
        self._closed = False
        self._swept = False
        self._listed: dict[str, tuple[_FileStamp, SessionSummary]] = {}
        """Each file's row as the last :meth:`list` made it, with the file's stamp then."""
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
            file = SessionFile.open(self.path(session_id), session_id, writable=True)
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
        session_id, batch = self._writing(header, events)
        path = self.path(session_id)
        payload = encode_lines(batch)
        try:
            file = SessionFile.open(path, session_id, writable=True)
        except FileNotFoundError:
            self._create(path, session_id, header, batch, payload)
            return
        with file:
            if batch:
                self._append(file, batch, payload)

    def create(self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]) -> None:
        """Create the session's file whole, only if it has none; see :meth:`LogBackend.create`.

        The file is written aside and hard-linked into place, which fails if
        the name exists: the check and the create are one step.

        Raises:
            InvalidRecordError: the header or an event is invalid.
            StoreConflictError: the session has a file already.
        """
        session_id, batch = self._writing(header, events)
        self._create(self.path(session_id), session_id, header, batch, encode_lines(batch))

    def _writing(
        self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]
    ) -> tuple[str, builtins.list[EventRecord]]:
        """The session id and the checked batch of a write about to happen
        (leftovers of interrupted writes are swept before the first)."""
        self._check_open()
        if not self._swept:
            self._swept = True
            self._remove_orphaned_temp_files()
        session_id = validate_session_id(header.get("id"))
        return session_id, parse_batch(session_id, events)

    def try_write(
        self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]
    ) -> bool:
        """Append a batch unless the file's lock is held or the file is not stored yet.

        See :meth:`WritesWithoutWaiting.try_write`; raises what :meth:`write` raises.
        """
        self._check_open()
        if not self._swept:
            return False
        session_id = validate_session_id(header.get("id"))
        batch = parse_batch(session_id, events)
        try:
            file = SessionFile.open(self.path(session_id), session_id, writable=True, wait=False)
        except (FileNotFoundError, BlockingIOError):
            return False
        with file:
            if batch:
                self._append(file, batch, encode_lines(batch))
        return True

    def write_unsynced(
        self,
        header: Mapping[str, object],
        events: Sequence[Mapping[str, object]],
        *,
        wait: bool = True,
    ) -> bool:
        """Append a batch without fsyncing it; see :meth:`SyncsLater.write_unsynced`.

        A session not stored yet is created, durably, as by :meth:`write`.
        """
        if not wait:
            self._check_open()
            if not self._swept:
                return False
            session_id = validate_session_id(header.get("id"))
            batch = parse_batch(session_id, events)
            payload = encode_lines(batch)
            try:
                file = SessionFile.open(
                    self.path(session_id), session_id, writable=True, wait=False
                )
            except (FileNotFoundError, BlockingIOError):
                return False
        else:
            session_id, batch = self._writing(header, events)
            path = self.path(session_id)
            payload = encode_lines(batch)
            try:
                file = SessionFile.open(path, session_id, writable=True)
            except FileNotFoundError:
                self._create(path, session_id, header, batch, payload)
                return True
        with file:
            if batch:
                self._append(file, batch, payload, sync=False)
        return True

    def sync(self, session_id: str, *, wait: bool = True) -> bool:
        """fsync the session's file; see :meth:`SyncsLater.sync`."""
        self._check_open()
        try:
            file = SessionFile.open(self.path(session_id), session_id, writable=True, wait=wait)
        except FileNotFoundError:
            raise SessionNotFoundError(session_id) from None
        except BlockingIOError:
            return False
        with file:
            tail = self._tail(file)
            durable = self._durable(file, tail)
            try:
                os.fsync(file.fd)
            except BaseException:
                self._take_back(file, durable)
                raise
            self._synced[session_id] = tail
        return True

    def load(self, session_id: str) -> StoredLog:
        """Read and validate the whole log; see :meth:`LogBackend.load`.

        The file is opened read-only and never modified: a torn tail is
        reported, and cut off by the next write (which holds the lease).
        """
        header, events, torn = self._read(session_id, SessionFile.parse_events)
        return StoredLog(header, events, torn)

    def load_events(self, session_id: str, registry: EventRegistry) -> LoadedLog:
        """Read the whole log and decode it; see :meth:`LogBackend.load_events`.

        As :meth:`load`, the file is opened read-only and never modified.
        """
        header, events, torn = self._read(
            session_id, lambda file, start, end: file.decode_events(start, end, registry)
        )
        return LoadedLog(header, events, torn)

    def events_after(
        self, session_id: str, after_seq: int, *, limit: int | None = None
    ) -> builtins.list[StoredEvent]:
        """The stored events after ``after_seq``; see :meth:`LogBackend.events_after`.

        Read from the file a block of lines at a time, up to the block that
        fills ``limit``; the lines up to ``after_seq`` are counted, not parsed.
        A follower reads the same log again and again, so where its last read
        ended is kept (a :class:`_Mark`): a read after that seq of the same
        file starts there, and one of a file that has not grown since a read
        that reached its end reads one line. A file replaced (even on a reused
        inode) or cut short since, or a read from further back, is read from
        its first event.
        """
        with self._open_for_reading(session_id) as file:
            mark = self._marks.get(session_id)
            if mark is not None and after_seq >= mark.next_seq - 1 and mark.holds(file):
                if file.size == mark.seen:
                    return []
                try:
                    return self._read_after(
                        file,
                        mark.end,
                        file.whole_end(),
                        mark.next_seq,
                        after_seq=after_seq,
                        limit=limit,
                    )
                except CorruptLogError:
                    pass  # read from the start below, which tells a torn last line from damage
            layout = file.probe()
            return self._read_after(
                file, layout.header_end, layout.end, 0, after_seq=after_seq, limit=limit
            )

    def _read_after(
        self,
        file: SessionFile,
        start: int,
        end: int,
        first_seq: int,
        *,
        after_seq: int,
        limit: int | None,
    ) -> builtins.list[StoredEvent]:
        """`SessionFile.parse_after`'s events, marking where the read ended."""
        events, stop, next_seq = file.parse_after(start, end, first_seq, after_seq, limit)
        seen = file.size if stop == end else stop  # stopped short: more is stored
        self._marks[file.session_id] = _Mark.of(file, next_seq, stop, seen)
        return events

    def _read(
        self, session_id: str, read_events: Callable[[SessionFile, int, int], _Events]
    ) -> tuple[HeaderRecord, _Events, TornTail | None]:
        """The header, the events ``read_events`` makes of the intact event
        lines, and the torn tail if there is one."""
        with self._open_for_reading(session_id) as file:
            layout = file.probe()
            events = read_events(file, layout.header_end, layout.end)
            torn = None
            if layout.torn:
                torn = TornTail(
                    line=len(events) + 2,
                    offset=layout.end,
                    discarded_bytes=layout.size - layout.end,
                )
            else:
                self._tails[session_id] = _Tail(file.inode, len(events), layout.end)
        return layout.header, events, torn

    def acquire_lease(self, session_id: str) -> FileLease:
        """Take the session's lease: an ``flock`` on ``<id>.lock`` beside its log.

        Raises:
            SessionLeasedError: another process holds it.
        """
        self._check_open()
        lock = self._dir / (validate_session_id(session_id) + _LOCK_SUFFIX)
        return FileLease.acquire(lock, session_id)

    def lease_holder(self, session_id: str) -> Holder | None:
        """Who holds the ``flock`` on ``<id>.lock``; see :meth:`LogBackend.lease_holder`."""
        self._check_open()
        pid = lock_holder(self._dir / (validate_session_id(session_id) + _LOCK_SUFFIX))
        return None if pid is None else Holder(pid)

    def check_writable(self) -> None:
        """Write, sync and remove a small file where session logs go.

        Raises:
            OSError: the directory is read-only, not writable, or full.
        """
        self._check_open()
        probe = self._dir / f".probe.{os.getpid()}.{os.urandom(4).hex()}{_TEMP_SUFFIX}"
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
        listed: dict[str, tuple[_FileStamp, SessionSummary]] = {}
        for path in self._dir.glob("*" + _SUFFIX):
            session_id = path.name.removesuffix(_SUFFIX)
            try:
                validate_session_id(session_id)
            except InvalidSessionIdError:
                log.warning("ignoring %s: its name is not a session id", path)
                continue
            summary = self._summary(path, session_id, listed)
            if summary is not None:
                summaries.append(summary)
        self._listed = listed  # the files listed now: the ones gone are forgotten
        return newest_first(summaries)

    def _summary(
        self,
        path: Path,
        session_id: str,
        listed: dict[str, tuple[_FileStamp, SessionSummary]],
    ) -> SessionSummary | None:
        """The file's row: the one the last listing made if the file has not changed
        since (same inode, size and modification time: a log only grows, or is
        replaced whole), else read from it."""
        try:
            info = os.stat(path)
        except OSError:
            return _summarize(path, session_id)  # gone, or said in its row
        stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
        cached = self._listed.get(session_id)
        if cached is not None and cached[0] == stamp:
            summary: SessionSummary | None = cached[1]
        else:
            # Stamped before it is read: a write meanwhile makes the next listing read again.
            summary = _summarize(path, session_id)
        if summary is not None and summary.error is None:
            listed[session_id] = (stamp, summary)
        return summary

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
            self._synced.pop(session_id, None)
            self._marks.pop(session_id, None)
        _fsync_dir(self._dir)

    def close(self) -> None:
        """Forget cached state; later calls raise :class:`BackendClosedError`."""
        self._closed = True
        self._tails.clear()
        self._synced.clear()
        self._marks.clear()

    def _open_for_reading(self, session_id: str) -> SessionFile:
        self._check_open()
        try:
            return SessionFile.open(self.path(session_id), session_id, writable=False)
        except FileNotFoundError:
            raise SessionNotFoundError(session_id) from None

    def _open_stored(self, session_id: str) -> SessionFile:
        self._check_open()
        try:
            return SessionFile.open(self.path(session_id), session_id, writable=True)
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
        data = header_line(record) + payload
        # The pid lets a later backend tell a crashed write's leftovers from a
        # write in progress in another process.
        temp = self._dir / f".{session_id}.{os.getpid()}.{os.urandom(4).hex()}{_TEMP_SUFFIX}"
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
                raise StoreConflictError(f"session {session_id} is already stored") from None
        finally:
            _remove_quietly(temp)
        _fsync_dir(self._dir)
        self._tails[session_id] = self._synced[session_id] = _Tail(inode, len(batch), len(data))

    def _append(
        self, file: SessionFile, batch: Sequence[EventRecord], payload: bytes, *, sync: bool = True
    ) -> None:
        session_id = file.session_id
        tail = self._tail(file)
        check_continues(session_id, batch, tail.next_seq)
        durable = self._durable(file, tail)
        try:
            _write_all(file.fd, payload)
            if sync:
                os.fsync(file.fd)
        except BaseException:
            self._take_back(file, durable)
            raise
        written = _Tail(file.inode, tail.next_seq + len(batch), tail.size + len(payload))
        self._tails[session_id] = written
        self._synced[session_id] = written if sync else durable

    def _durable(self, file: SessionFile, tail: _Tail) -> _Tail:
        """Where ``file`` was last fsynced: what it held before this backend's first
        unsynced append to it counts as durable (its writer fsynced it)."""
        durable = self._synced.get(file.session_id)
        if durable is None or durable.inode != file.inode or durable.size > tail.size:
            return tail
        return durable

    def _take_back(self, file: SessionFile, durable: _Tail) -> None:
        """After a failed append or sync: cut ``file`` back to where it was last
        fsynced (nothing after it is known to be on disk), so the log ends on a whole
        batch; the tail is read again next time."""
        self._tails.pop(file.session_id, None)
        self._synced.pop(file.session_id, None)
        try:
            os.ftruncate(file.fd, durable.size)
        except OSError:
            log.exception("could not undo a failed append to %s", file.path)

    def _tail(self, file: SessionFile) -> _Tail:
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


class _Tail(msgspec.Struct, frozen=True):
    """What an append needs to know about a session file, valid while it is unchanged."""

    inode: int
    next_seq: int
    size: int


class _Mark(msgspec.Struct, frozen=True):
    """Where a follower's last read of a session file ended (see
    :meth:`JsonlBackend.events_after`)."""

    inode: int
    next_seq: int
    """The seq of the first event not read yet."""
    end: int
    """The offset past the last whole line read."""
    seen: int
    """The file's size at that read (a line still being written, or a torn one,
    included) if it read to the end, else ``end``."""
    last_line: int
    """Where the last whole line read starts."""
    last_crc: int
    """The CRC-32 of that line: the same file, not another one on a reused inode."""

    @classmethod
    def of(cls, file: SessionFile, next_seq: int, end: int, seen: int) -> _Mark:
        start = file.line_start(end)
        return cls(file.inode, next_seq, end, seen, start, zlib.crc32(file.read(start, end)))

    def holds(self, file: SessionFile) -> bool:
        """Whether ``file`` is the file read, with what was read still in place."""
        return (
            file.inode == self.inode
            and file.size >= self.end
            and zlib.crc32(file.read(self.last_line, self.end)) == self.last_crc
        )


_FileStamp = tuple[int, int, int]
"""A session file's inode, size and modification time (ns)."""


def _summarize(path: Path, session_id: str) -> SessionSummary | None:
    """The listing row for one session file; ``None`` if the file is gone."""
    try:
        file = SessionFile.open(path, session_id, writable=False)
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
    lineage, labels = read_lineage(header["lineage"], header["meta"])
    return SessionSummary(
        id=session_id,
        cwd=header["cwd"],
        created_at=header["created_at"],
        turn_count=activity.turn_count,
        last_activity=(
            activity.last_activity if activity.last_activity is not None else header["created_at"]
        ),
        title=activity.title,
        meta=labels,
        lineage=lineage,
    )


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
