"""Session logs in one SQLite database: the second backend.

All sessions live in ``<root>/sessions.sqlite3`` (WAL journal,
``synchronous=FULL``). Each ``write`` is one ``BEGIN IMMEDIATE`` transaction,
so a batch, and the first batch together with its header, is stored whole or
not at all, and writers in other processes are serialised by SQLite. The
listing columns of ``sessions`` (turn count, last activity, title) are kept up
to date in the same transaction, so listing reads one row per session.

A batch is stored as one row of ``batches`` holding its event lines, the
form the JSONL backend appends to its files (:mod:`~tether.persist.backends.lines`):
loading a session reads a few rows and decodes their lines in one pass,
where one row per event made fetching the rows cost as much as decoding
them. Databases of schema 1 (one row per event, in ``events``) are
migrated when opened writable, and read as they are when opened read-only.

A session's lease is a row of ``leases`` (see
:mod:`tether.persist.backends.lease`). The database is created mode 0600 (its
WAL and shared-memory files take the same mode) in a directory created 0700.
"""

from __future__ import annotations

import builtins
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import msgspec

from tether.location import private_dir
from tether.persist.backends.base import LoadedLog, SessionSummary, StoredLog, newest_first
from tether.persist.backends.bulk import BadRecordError
from tether.persist.backends.errors import (
    BackendClosedError,
    CorruptLogError,
    SessionNotFoundError,
    StoreConflictError,
    UnsupportedFormatError,
)
from tether.persist.backends.lease import (
    Holder,
    SessionLeasedError,
    process_alive,
    process_start,
)
from tether.persist.backends.lines import (
    decode_blocks,
    drained,
    encode_lines,
    gathered,
    parse_blocks,
    parse_lines_after,
)
from tether.persist.backends.records import (
    HeaderRecord,
    check_continues,
    encode_json,
    parse_batch,
    parse_header,
    parse_stored_header,
    validate_session_id,
)
from tether.persist.backends.summary import Activity

if TYPE_CHECKING:
    from tether.session.registry import EventRegistry
    from tether.session.stored import StoredEvent

log = logging.getLogger(__name__)

_BUSY_TIMEOUT = 30.0
"""How long a write waits for another process's transaction to end, in seconds."""

_MAX_SEQ = 2**63 - 1
"""The largest integer SQLite stores: no seq is past it."""


class _Busy(Exception):
    """A write that may not wait found the connection or the write lock taken."""


SCHEMA_VERSION = 2
"""The schema this module creates (kept in ``PRAGMA user_version``), and the newest it reads."""

_EVENT_ROWS = 1
"""The schema that kept one row per event, in ``events``."""

_SESSIONS_AND_BATCHES = (
    """
    CREATE TABLE IF NOT EXISTS sessions (
        id TEXT PRIMARY KEY,
        header TEXT NOT NULL,
        created_at REAL NOT NULL,
        turn_count INTEGER NOT NULL,
        last_activity REAL NOT NULL,
        title TEXT
    ) WITHOUT ROWID
    """,
    # A rowid table: its rows are large, which a WITHOUT ROWID table keeps badly.
    """
    CREATE TABLE IF NOT EXISTS batches (
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        first_seq INTEGER NOT NULL,
        end_seq INTEGER NOT NULL,
        lines BLOB NOT NULL,
        UNIQUE (session_id, first_seq)
    )
    """,
)

# Created by every open, not by the schema migration: databases of schema 1
# made before leases existed get the table too.
_LEASES = """
    CREATE TABLE IF NOT EXISTS leases (
        session_id TEXT PRIMARY KEY,
        pid INTEGER NOT NULL,
        started TEXT NOT NULL
    ) WITHOUT ROWID
"""


class SqliteBackend:
    """A :class:`~tether.persist.backends.base.LogBackend` keeping all sessions in one database.

    One connection serves every thread; a lock lets one call use it at a time.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        """Open (creating if needed) ``<root>/sessions.sqlite3``.

        On a read-only file system an existing database is opened read-only,
        so listing and loading work; every write raises. Transactions a writer
        left in the write-ahead log (it died before merging them) are read
        too: the database is opened ``mode=ro`` then, and ``immutable`` (which
        would skip them) only when that log is empty.

        Raises:
            UnsupportedFormatError: the database was created by a newer schema.
            sqlite3.Error: the file cannot be opened as a database.
        """
        self._lock = threading.Lock()
        self._closed = False
        self._unreleased: set[str] = set()
        """Sessions whose lease row this backend failed to delete (it may take them again)."""
        self._path = Path(root) / "sessions.sqlite3"
        self._version = SCHEMA_VERSION
        if self._path.is_file() and _read_only_file_system(self._path):
            wal = self._path.with_name(f"{self._path.name}-wal")
            pending = wal.is_file() and wal.stat().st_size > 0
            mode = "mode=ro" if pending else "immutable=1"
            uri = f"file:{quote(str(self._path))}?{mode}"
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            try:
                self._version = self._check_version(conn)
            except sqlite3.OperationalError as exc:
                conn.close()
                if not pending:
                    raise
                raise sqlite3.OperationalError(
                    f"{self._path}: its write-ahead log holds transactions not merged yet, "
                    f"and the read-only file system does not let them be read ({exc})"
                ) from None
            except BaseException:
                conn.close()
                raise
            self._conn = conn
            return
        root_path = private_dir(Path(root))
        if not self._path.exists():
            os.close(os.open(self._path, os.O_WRONLY | os.O_CREAT, 0o600))
        # isolation_level=None leaves transactions to the explicit BEGINs below.
        conn = sqlite3.connect(
            root_path / "sessions.sqlite3",
            timeout=_BUSY_TIMEOUT,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            (journal_mode,) = conn.execute("PRAGMA journal_mode=WAL").fetchone()
            if journal_mode != "wal":
                log.warning(
                    "%s: WAL is unavailable, using journal mode %s", self._path, journal_mode
                )
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            self._migrate(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self._path.parent)!r})"

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    def exists(self, session_id: str) -> bool:
        """Whether the session has a row."""
        validate_session_id(session_id)
        with self._connection() as conn:
            return (
                conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
                is not None
            )

    def next_seq(self, session_id: str) -> int:
        """The seq the session's next event must carry; 0 if it is not stored."""
        validate_session_id(session_id)
        with self._connection() as conn:
            return self._next_seq(conn, session_id)

    def write(self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]) -> None:
        """Store a batch in one transaction; see :meth:`LogBackend.write` for the contract.

        Raises:
            InvalidRecordError: the header (first write) or an event is invalid.
            StoreConflictError: the batch does not continue the stored log.
        """
        self._write(header, events, wait=True)

    def create(self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]) -> None:
        """Insert the session's row and first batch in one transaction, only if it
        has no row; see :meth:`LogBackend.create`.

        The transaction holds the database's write lock from its start, so the
        check and the insert are one step.

        Raises:
            InvalidRecordError: the header or an event is invalid.
            StoreConflictError: the session has a row already.
        """
        self._write(header, events, wait=True, create=True)

    def try_write(
        self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]
    ) -> bool:
        """Store a batch unless the connection or the database's write lock is taken,
        or the session has no row yet.

        See :meth:`WritesWithoutWaiting.try_write`; raises what :meth:`write` raises.
        """
        try:
            return self._write(header, events, wait=False)
        except _Busy:
            return False

    def _write(
        self,
        header: Mapping[str, object],
        events: Sequence[Mapping[str, object]],
        *,
        wait: bool,
        create: bool = False,
    ) -> bool:
        session_id = validate_session_id(header.get("id"))
        batch = parse_batch(session_id, events)
        lines = encode_lines(batch)
        with self._transaction(wait=wait) as conn:
            stored = conn.execute(
                "SELECT turn_count, last_activity, title FROM sessions WHERE id = ?",
                (session_id,),
            ).fetchone()
            if stored is not None and create:
                raise StoreConflictError(f"session {session_id} is already stored")
            if stored is None and not wait:
                # A first write: left to the caller that may wait.
                conn.execute("ROLLBACK")
                return False
            if stored is None:
                record = parse_header(header)
                if batch:
                    check_continues(session_id, batch, 0)
                activity = Activity().extend_written(batch)
                conn.execute(
                    "INSERT INTO sessions"
                    " (id, header, created_at, turn_count, last_activity, title)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        session_id,
                        encode_json(record),
                        record["created_at"],
                        activity.turn_count,
                        record["created_at"]
                        if activity.last_activity is None
                        else activity.last_activity,
                        activity.title,
                    ),
                )
            elif batch:
                check_continues(session_id, batch, self._next_seq(conn, session_id))
                activity = Activity(*stored).extend_written(batch)
                conn.execute(
                    "UPDATE sessions SET turn_count = ?, last_activity = ?, title = ? WHERE id = ?",
                    (activity.turn_count, activity.last_activity, activity.title, session_id),
                )
            if batch:
                conn.execute(
                    "INSERT INTO batches (session_id, first_seq, end_seq, lines)"
                    " VALUES (?, ?, ?, ?)",
                    (session_id, batch[0]["seq"], batch[-1]["seq"] + 1, lines),
                )
        return True

    def load(self, session_id: str) -> StoredLog:
        """Read and validate the whole log; see :meth:`LogBackend.load`.

        ``repaired_tail`` is always ``None``: transactions leave nothing torn.

        Raises:
            SessionNotFoundError: the session has no row.
            CorruptLogError: the stored header or an event is invalid, or seqs
                have a gap; it names the session and seq.
        """
        header, blocks = self._read(session_id)
        try:
            events = parse_blocks(blocks)
        except BadRecordError as exc:
            raise CorruptLogError(session_id, exc.reason, seq=exc.index) from None
        return StoredLog(header, events)

    def load_events(self, session_id: str, registry: EventRegistry) -> LoadedLog:
        """Read the whole log and decode it; see :meth:`LogBackend.load_events`.

        The event lines of its batches are decoded a block at a time
        (`decode_blocks`), as the JSONL backend decodes a file's, each batch
        row let go once decoded.
        """
        header, blocks = self._read(session_id)
        try:
            return LoadedLog(header, decode_blocks(blocks, registry))
        except BadRecordError as exc:
            raise _corrupt(session_id, exc) from None

    def events_after(
        self, session_id: str, after_seq: int, *, limit: int | None = None
    ) -> builtins.list[StoredEvent]:
        """The stored events after ``after_seq``; see :meth:`LogBackend.events_after`.

        Reads only the batches that hold the events wanted, each row let go
        once read (a schema 1 database, read as it is, reads the rows wanted).
        """
        validate_session_id(session_id)
        with self._transaction(write=False) as conn:
            if (
                conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
                is None
            ):
                raise SessionNotFoundError(session_id)
            if self._version == _EVENT_ROWS:
                first = after_seq + 1
                batches = [(first, _lines_of_event_rows(conn, session_id, after_seq, limit))]
            else:
                last = _MAX_SEQ if limit is None else min(_MAX_SEQ, after_seq + limit)
                batches = conn.execute(
                    "SELECT first_seq, lines FROM batches WHERE session_id = ? AND end_seq > ?"
                    " AND first_seq <= ? ORDER BY first_seq",
                    (session_id, after_seq + 1, last),
                ).fetchall()
                if not batches:
                    return []
                first = batches[0][0]
        blocks = (_lines(session_id, first_seq, lines) for first_seq, lines in drained(batches))
        try:
            events, _size, _next = parse_lines_after(blocks, first, after_seq, limit)
        except BadRecordError as exc:
            raise CorruptLogError(session_id, exc.reason, seq=first + exc.index) from None
        return events

    def _read(self, session_id: str) -> tuple[HeaderRecord, Iterator[bytes]]:
        """The session's header and the event lines of its whole log, in seq
        order, in blocks (`gathered`) to be taken once.

        The rows are read in one transaction; each is let go as its block is
        taken.

        Raises:
            SessionNotFoundError: the session has no row.
            CorruptLogError: the stored header is invalid, or (as its block is
                taken) a batch holds something other than event lines.
        """
        validate_session_id(session_id)
        with self._transaction(write=False) as conn:
            stored = conn.execute(
                "SELECT header FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            if stored is None:
                raise SessionNotFoundError(session_id)
            if self._version == _EVENT_ROWS:
                blocks = iter([_lines_of_event_rows(conn, session_id)])
            else:
                batches = conn.execute(
                    "SELECT first_seq, lines FROM batches WHERE session_id = ? ORDER BY first_seq",
                    (session_id,),
                ).fetchall()
                blocks = gathered(_lines(session_id, *row) for row in drained(batches))
        return parse_stored_header(session_id, stored[0]), blocks

    def list(self) -> builtins.list[SessionSummary]:
        """Summarise every session from its row, newest activity first; see :meth:`LogBackend.list`.

        A session whose stored header is invalid is listed with ``error`` set.
        """
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT id, header, turn_count, last_activity, title FROM sessions"
            ).fetchall()
        summaries = [SessionSummary.of_row(*row) for row in rows]
        return newest_first(summaries)

    def delete(self, session_id: str) -> None:
        """Remove the session's row and all its events in one transaction.

        Raises:
            SessionNotFoundError: the session has no row.
        """
        validate_session_id(session_id)
        with self._transaction() as conn:
            if conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount == 0:
                raise SessionNotFoundError(session_id)

    def acquire_lease(self, session_id: str) -> _RowLease:
        """Take the session's lease: a ``leases`` row naming this process.

        A row left by a process that no longer runs is replaced, and so is a
        row this backend could not delete when it released the lease.

        Raises:
            SessionLeasedError: a running process holds it.
        """
        validate_session_id(session_id)
        pid, started = os.getpid(), process_start(os.getpid())
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT pid, started FROM leases WHERE session_id = ?", (session_id,)
            ).fetchone()
            ours = (
                row is not None
                and (row[0], row[1]) == (pid, started)
                and session_id in self._unreleased
            )
            if row is not None and not ours and process_alive(row[0], row[1]):
                raise SessionLeasedError(session_id, row[0])
            conn.execute(
                "INSERT OR REPLACE INTO leases (session_id, pid, started) VALUES (?, ?, ?)",
                (session_id, pid, started),
            )
        self._unreleased.discard(session_id)
        return _RowLease(self, session_id, pid, started)

    def lease_holder(self, session_id: str) -> Holder | None:
        """The process of a live ``leases`` row; see :meth:`LogBackend.lease_holder`."""
        validate_session_id(session_id)
        try:
            with self._transaction(write=False) as conn:
                row = conn.execute(
                    "SELECT pid, started FROM leases WHERE session_id = ?", (session_id,)
                ).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            # A database older than leases, opened read-only: no one holds one.
            return None
        if row is None or not process_alive(row[0], row[1]):
            return None
        return Holder(int(row[0]))

    def _drop_lease(self, session_id: str, pid: int, started: str) -> None:
        with self._transaction() as conn:
            conn.execute(
                "DELETE FROM leases WHERE session_id = ? AND pid = ? AND started = ?",
                (session_id, pid, started),
            )

    def check_writable(self) -> None:
        """Commit a transaction that writes (and then removes) a row.

        Raises:
            sqlite3.Error: the database is read-only, damaged, or the disk is full.
        """
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO leases (session_id, pid, started) VALUES ('.probe', 0, '')"
            )
            conn.execute("DELETE FROM leases WHERE session_id = '.probe'")

    def close(self) -> None:
        """Close the connection; later calls raise :class:`BackendClosedError`."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    @contextmanager
    def _connection(self, *, wait: bool = True) -> Iterator[sqlite3.Connection]:
        """Hold the connection; without ``wait``, raise :class:`_Busy` if another call holds it."""
        if not self._lock.acquire(blocking=wait):
            raise _Busy
        try:
            if self._closed:
                raise BackendClosedError(f"{self!r} is closed")
            yield self._conn
        finally:
            self._lock.release()

    @contextmanager
    def _transaction(
        self, *, write: bool = True, wait: bool = True
    ) -> Iterator[sqlite3.Connection]:
        """Hold the connection for one transaction, committed on success
        (a body that ended it itself is left ended).

        A write transaction takes the database's write lock up front, so the
        seq checked at its start still holds when it commits; a read one sees
        one snapshot across its queries. Without ``wait``, :class:`_Busy` is
        raised at once when the connection or the write lock is taken.
        """
        with self._connection(wait=wait) as conn:
            if wait:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN DEFERRED")
            else:
                conn.execute("PRAGMA busy_timeout = 0")
                try:
                    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN DEFERRED")
                except sqlite3.OperationalError as exc:
                    if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:  # BUSY_RECOVERY too
                        raise _Busy from None
                    raise
                finally:
                    conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT * 1000)}")
            try:
                yield conn
                if conn.in_transaction:
                    conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _next_seq(self, conn: sqlite3.Connection, session_id: str) -> int:
        if self._version == _EVENT_ROWS:
            query = "SELECT coalesce(max(seq) + 1, 0) FROM events WHERE session_id = ?"
        else:
            query = (
                "SELECT coalesce(max(end_seq), 0) FROM"
                " (SELECT end_seq FROM batches WHERE session_id = ?"
                " ORDER BY first_seq DESC LIMIT 1)"
            )
        (next_seq,) = conn.execute(query, (session_id,)).fetchone()
        return int(next_seq)

    def _check_version(self, conn: sqlite3.Connection) -> int:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise UnsupportedFormatError(str(self._path), version, SCHEMA_VERSION)
        return int(version)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = self._check_version(conn)
            if version < SCHEMA_VERSION:
                for statement in _SESSIONS_AND_BATCHES:
                    conn.execute(statement)
                if version == _EVENT_ROWS:
                    _migrate_event_rows(conn)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute(_LEASES)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


class _RowLease:
    """A lease held as a ``leases`` row; released by deleting the row (if still ours)."""

    def __init__(self, backend: SqliteBackend, session_id: str, pid: int, started: str) -> None:
        self._backend = backend
        self._key: tuple[str, int, str] | None = (session_id, pid, started)

    def release(self) -> None:
        key, self._key = self._key, None
        if key is None:
            return
        try:
            self._backend._drop_lease(*key)
        except BackendClosedError:
            # Closing without releasing leaves a row of a process that is
            # about to end; the next taker sees it is stale.
            log.debug("lease of session %s left to expire with this process", key[0])
        except sqlite3.Error as exc:
            # A full disk, say: the row stays, naming this process. This
            # backend may take the lease again; others may once it ends.
            self._backend._unreleased.add(key[0])
            log.warning(
                "the lease of session %s could not be released (%s); it ends with this process",
                key[0],
                exc,
            )


def _corrupt(session_id: str, exc: BadRecordError) -> CorruptLogError:
    """The error naming the bad line of a whole log: line ``n`` holds seq ``n``."""
    return CorruptLogError(session_id, exc.reason, seq=exc.index)


def _lines(session_id: str, first_seq: int, lines: object) -> bytes:
    """The event lines of a batch row.

    Raises:
        CorruptLogError: the row's lines are neither bytes nor text (SQLite
            stores what it is given).
    """
    if type(lines) is bytes:
        return lines
    if type(lines) is str:
        return lines.encode("utf-8")
    raise CorruptLogError(
        session_id, "the batch stored from here holds no event lines", seq=first_seq
    )


_ENCODER = msgspec.json.Encoder()


def _lines_of_event_rows(
    conn: sqlite3.Connection, session_id: str, after_seq: int = -1, limit: int | None = None
) -> bytes:
    """The event lines holding a session's rows of the schema 1 layout whose seq
    is greater than ``after_seq``, the first ``limit`` of them (all with
    ``None``), in seq order.

    A row's data stored as text goes in as it is (whitespace that holds a
    newline compacted, as a line cannot hold one); every other value goes
    in as its JSON value. So a row that schema 1 refused to load (data that
    is no JSON object, a type or time of the wrong type, a gap in the seqs)
    is a line that is refused to load, at the same seq.
    """
    rows = conn.execute(
        "SELECT type, seq, time, data FROM events WHERE session_id = ? AND seq > ?"
        " ORDER BY seq LIMIT ?",
        (session_id, after_seq, -1 if limit is None else limit),
    ).fetchall()
    return _ENCODER.encode_lines(
        [
            {"type": kind, "seq": seq, "time": time, "data": _stored_data(data)}
            for kind, seq, time, data in rows
        ]
    )


def _stored_data(data: object) -> object:
    """A schema 1 data column as the data of an event line."""
    if not isinstance(data, str):
        return data
    text = data.encode("utf-8")
    if b"\n" in text:
        try:
            text = msgspec.json.format(text, indent=-1)
        except msgspec.DecodeError:
            return data  # Not JSON: stored as a string, which no event's data is.
    return msgspec.Raw(text)


def _migrate_event_rows(conn: sqlite3.Connection) -> None:
    """Move every session's event rows (schema 1) into one batch row, then drop them.

    Runs inside the migration's transaction.
    """
    sessions = conn.execute("SELECT DISTINCT session_id FROM events").fetchall()
    for (session_id,) in sessions:
        conn.execute(
            "INSERT INTO batches (session_id, first_seq, end_seq, lines) VALUES"
            " (?, 0, (SELECT coalesce(max(seq) + 1, 0) FROM events WHERE session_id = ?), ?)",
            (session_id, session_id, _lines_of_event_rows(conn, session_id)),
        )
    conn.execute("DROP TABLE events")
    if sessions:
        log.info("moved the events of %d sessions into the batch layout", len(sessions))


def _read_only_file_system(path: Path) -> bool:
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
