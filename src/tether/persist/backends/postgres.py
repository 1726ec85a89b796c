"""Session logs in PostgreSQL, shared by many tether hosts: the third backend.

Every host that names the same database (and schema) sees the same sessions.
The schema is versioned (``schema_migrations``); :class:`PostgresBackend`
applies what is missing when it opens, under an advisory lock, so hosts that
start together migrate once. Tables:

* ``sessions``: one row per session, its header (``jsonb``), the listing
  columns (turn count, last activity, title) and ``next_seq``, kept up to date
  by every write;
* ``events``: ``(session_id, seq)`` primary key, ``data`` as ``jsonb``;
* ``leases``: who owns a session (holder ``host:pid``, fencing token, expiry).

**One live owner per session, across hosts: the fenced lease.** A host takes
a session's lease before it creates, resumes or repairs it. Taking it draws a
fresh **fencing token** from a sequence (never one another take drew: the
write check compares tokens for equality, so it needs them distinct, not
ordered) and sets its expiry, on the database's clock, one TTL ahead;
a live lease of another holder refuses the taker
(:class:`~tether.persist.backends.lease.SessionLeasedError`, naming the
host). A heartbeat thread renews every lease this backend holds every TTL/3.
**Every write checks the token in its own transaction** (the lease row is
read ``FOR SHARE``, which a takeover's update waits for): once another host
took the lease over, the former owner's writes are rejected with
:class:`~tether.persist.backends.lease.SessionTakenOverError` and store
nothing, however long it was paused.

A write is one statement, so one round trip and one transaction: a call of
the schema's ``append_batch`` function, which checks the lease, locks the
session row (two writers of one session are serialised and the seq check
holds), inserts the batch (sent as one JSON document) and rings a ``NOTIFY``
doorbell carrying only the session id and its last seq (see
:mod:`tether.persist.follow` and :mod:`tether.persist.cluster`). Under load,
writes of several sessions that wait for a pooled connection are committed
together, in one transaction (one commit, one WAL flush), each call fenced
on its own; a group with a refused batch is rolled back and its batches are
written again one by one, so a refusal never costs another session. A write
whose connection breaks is retried once on a fresh connection; a retry that
finds its batch already committed (the break hid the commit) succeeds
without writing it twice.

The driver is psycopg 3 (synchronous: the backend seam runs in worker
threads), imported with this module.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import psycopg
from psycopg import sql

from tether.persist.backends.base import LoadedLog, SessionSummary, StoredLog, newest_first
from tether.persist.backends.bulk import BadRecordError
from tether.persist.backends.channels import CHANNELS, EVENTS_CHANNEL, channel
from tether.persist.backends.errors import (
    BackendClosedError,
    CorruptLogError,
    InvalidRecordError,
    LogStoreError,
    SessionNotFoundError,
    StoreConflictError,
    UnsupportedFormatError,
)
from tether.persist.backends.lease import Holder, SessionLeasedError, SessionTakenOverError
from tether.persist.backends.lines import (
    decode_blocks,
    drained,
    gathered,
    parse_blocks,
    parse_lines,
)
from tether.persist.backends.records import (
    EventRecord,
    HeaderRecord,
    check_continues,
    encode_json,
    encode_record,
    parse_batch,
    parse_header,
    parse_stored_header,
    validate_session_id,
)
from tether.persist.backends.summary import Activity
from tether.session.stored import StoredEvent

if TYPE_CHECKING:
    from tether.session.registry import EventRegistry

log = logging.getLogger(__name__)

_T = TypeVar("_T")

MAX_IDENTIFIER = 63
"""The longest identifier PostgreSQL keeps (bytes): a NOTIFY channel's name is one."""

_Row = tuple[int, str, float, str]
"""An event row as read: ``(seq, type, time, data)``."""

SCHEMA_VERSION = 2
"""The newest schema this module creates, and the newest it reads."""

_APPEND_FUNCTION = """
CREATE OR REPLACE FUNCTION append_batch(
    p_id text, p_token bigint, p_header jsonb, p_created double precision, p_events jsonb,
    p_first bigint, p_count integer, p_turns integer, p_last double precision, p_title text,
    p_channel text, p_create boolean
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    lease record;
    stored_next bigint;
BEGIN
    -- The fence: FOR SHARE makes a takeover (an update of the row) wait for
    -- this write, and this write wait for a takeover under way.
    SELECT host, pid, token, expires_at > clock_timestamp() AS live INTO lease
        FROM leases WHERE session_id = p_id FOR SHARE;
    IF p_token IS NOT NULL THEN
        IF lease IS NULL OR lease.token <> p_token THEN
            RAISE EXCEPTION USING ERRCODE = 'TT001', MESSAGE = coalesce(lease.host, '');
        END IF;
    ELSIF lease IS NOT NULL AND lease.live THEN
        RAISE EXCEPTION USING ERRCODE = 'TT002', MESSAGE = lease.host || ' ' || lease.pid;
    END IF;
    SELECT next_seq INTO stored_next FROM sessions WHERE id = p_id FOR UPDATE;
    IF FOUND AND p_create THEN
        RAISE EXCEPTION USING ERRCODE = 'TT005', MESSAGE = 'already stored';
    END IF;
    IF NOT FOUND THEN
        IF p_header IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'TT004', MESSAGE = 'the session is not stored';
        END IF;
        IF p_count > 0 AND p_first <> 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'TT003', MESSAGE = '0';
        END IF;
        INSERT INTO sessions (id, header, created_at, next_seq, turn_count, last_activity, title)
            VALUES (p_id, p_header, p_created, p_count, p_turns, coalesce(p_last, p_created),
                    p_title)
            ON CONFLICT (id) DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'TT005', MESSAGE = 'created by another writer';
        END IF;
    ELSIF p_count = 0 THEN
        RETURN;
    ELSE
        IF stored_next <> p_first THEN
            RAISE EXCEPTION USING ERRCODE = 'TT003', MESSAGE = stored_next::text;
        END IF;
        UPDATE sessions SET next_seq = next_seq + p_count, turn_count = turn_count + p_turns,
            last_activity = p_last, title = coalesce(title, p_title)
            WHERE id = p_id;
    END IF;
    IF p_count > 0 THEN
        INSERT INTO events (session_id, seq, type, time, data)
            SELECT p_id, r.seq, r.type, r.time, r.data
            FROM jsonb_to_recordset(p_events)
                AS r(seq bigint, type text, time double precision, data jsonb);
        PERFORM pg_notify(p_channel, p_id || ' ' || (p_first + p_count - 1));
    END IF;
END
$$
"""
"""One batch, in one statement (one round trip, its own transaction): the fence,
the seq check, the session row, the events, the doorbell. Errors by SQLSTATE:
``TT001`` taken over (message: the new host), ``TT002`` leased by another
(``host pid``), ``TT003`` seq conflict (the stored next seq), ``TT004`` a
first write without a valid header, ``TT005`` a create (``p_create``) of a
session already stored, or created by another writer meanwhile."""

_APPEND_BEFORE_CREATE = (
    "append_batch(text, bigint, jsonb, double precision, jsonb, bigint, integer, integer,"
    " double precision, text, text)"
)
"""The signature of schema 1's ``append_batch``, which had no ``p_create``."""

_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """
        CREATE TABLE sessions (
            id text PRIMARY KEY,
            header jsonb NOT NULL,
            created_at double precision NOT NULL,
            next_seq bigint NOT NULL DEFAULT 0,
            turn_count integer NOT NULL,
            last_activity double precision NOT NULL,
            title text
        )
        """,
        """
        CREATE TABLE events (
            session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            seq bigint NOT NULL,
            type text NOT NULL,
            time double precision NOT NULL,
            data jsonb NOT NULL,
            PRIMARY KEY (session_id, seq)
        )
        """,
        """
        CREATE TABLE leases (
            session_id text PRIMARY KEY,
            holder text NOT NULL,
            host text NOT NULL,
            pid integer NOT NULL,
            token bigint NOT NULL,
            expires_at timestamptz NOT NULL
        )
        """,
        "CREATE SEQUENCE lease_tokens",
        _APPEND_FUNCTION,
    ),
    (f"DROP FUNCTION IF EXISTS {_APPEND_BEFORE_CREATE}", _APPEND_FUNCTION),
)
"""Migration ``n`` (1-based) brings the schema from version ``n - 1`` to ``n``."""

_LOCK_CLASS = 0x7E7E
"""The first key of the advisory lock migrations take (the second is the schema's hash)."""


def default_host_id() -> str:
    """This machine's host id when none is configured: its host name."""
    return socket.gethostname() or "localhost"


class LeaseInfo(msgspec.Struct, frozen=True):
    """Who holds a session's lease: ``host``, ``pid``, and whether it is live (unexpired)."""

    host: str
    pid: int
    live: bool

    @property
    def holder(self) -> str:
        return f"{self.host}:{self.pid}"


_APPEND_CALL = "SELECT append_batch(%s, %s, %s::jsonb, %s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s)"

_GROUP_MAX = 32
"""The most batches one transaction commits together."""

_LOCK_WAIT = 1.0
"""How long one attempt at a lease waits for its row's lock, in seconds (longer is logged)."""

_LOCK_MARGIN = 2.0
"""How long past :attr:`PostgresBackend.stall_limit` a take waits for a locked row."""

_STALL_MIN = 2.0
"""The shortest :attr:`PostgresBackend.stall_limit`, in seconds."""


class _Pending(msgspec.Struct, eq=False):
    """One session's batch on its way to the database, and how it ended."""

    session_id: str
    params: tuple[object, ...]
    batch: Sequence[EventRecord]
    bad_header: InvalidRecordError | None
    done: threading.Event = msgspec.field(default_factory=threading.Event)
    error: BaseException | None = None
    lost: bool = False
    """The connection broke while its group was committed (the group may have been stored)."""


class PostgresBackend:
    """A :class:`~tether.persist.backends.base.LogBackend` over one PostgreSQL schema.

    Connections come from a small pool (``pool_size``), so the writer's
    side-by-side writes of several sessions run concurrently.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str = "tether",
        host_id: str | None = None,
        lease_ttl: float = 15.0,
        pool_size: int = 4,
        on_lease_lost: Callable[[str, str | None], None] | None = None,
    ) -> None:
        """Connect to ``url`` (a libpq URL or key=value string) and migrate ``schema``.

        ``host_id`` names this host in leases (default: the host name);
        ``on_lease_lost(session_id, new_host)`` is called, once per lease, from
        the heartbeat or a writer thread when a renewal or a write finds a
        lease taken over (it reports the takeover; without it, the backend
        logs a warning).

        Raises:
            psycopg.OperationalError: the server cannot be reached.
            UnsupportedFormatError: the schema was made by a newer tether.
        """
        if lease_ttl <= 0:
            raise ValueError(f"lease TTL must be positive, got {lease_ttl}")
        longest = max(len(channel(schema, name).encode()) for name in CHANNELS)
        if longest > MAX_IDENTIFIER:
            # NOTIFY refuses a longer channel name, and LISTEN would truncate it.
            raise ValueError(
                f"schema name {schema!r} is too long for its NOTIFY channels: at most "
                f"{MAX_IDENTIFIER - longest + len(schema.encode())} bytes"
            )
        self._url = url
        self._schema = schema
        self._host = host_id or default_host_id()
        self._pid = os.getpid()
        self._ttl = lease_ttl
        self._stall_limit = max(_STALL_MIN, lease_ttl / 2)
        self._on_lease_lost = on_lease_lost
        self._events_channel = channel(schema, EVENTS_CHANNEL)
        self._lock = threading.Lock()
        self._closed = False
        self._idle: list[psycopg.Connection[Any]] = []
        self._slots = threading.BoundedSemaphore(max(1, pool_size))
        self._write_slots = threading.BoundedSemaphore(max(1, pool_size // 2))
        """Writes use at most half the pool: reads keep the rest, and batches that
        wait for a write connection are committed together (see :meth:`write`)."""
        self._queue: builtins.list[_Pending] = []
        """Batches waiting for a connection; the next writer to get one commits them together."""
        self._tokens: dict[str, int] = {}
        """The fencing token of each lease this backend holds."""
        self._lost_tokens: set[int] = set()
        """Tokens of leases found taken over (reported once)."""
        self._heartbeat: threading.Thread | None = None
        self._stop = threading.Event()
        try:
            with self._connection() as conn:
                self._migrate(conn)
        except BaseException:
            self.close()  # the connection the migration used, back in the pool
            raise

    def __repr__(self) -> str:
        return f"{type(self).__name__}(schema={self._schema!r}, host={self._host!r})"

    @property
    def schema(self) -> str:
        return self._schema

    @property
    def host_id(self) -> str:
        return self._host

    @property
    def holder_id(self) -> str:
        """This process's name in leases: ``host:pid``."""
        return f"{self._host}:{self._pid}"

    @property
    def lease_ttl(self) -> float:
        return self._ttl

    @property
    def stall_limit(self) -> float:
        """How long a transaction of this backend may wait for its own client, in
        seconds, before the server ends it (half the lease TTL, at least 2 s).

        tether sends a transaction's statements without waiting in between, so
        only a stopped or cut-off host reaches it; whatever rows such a host
        had locked (a lease row, mid-renewal) are free again after it.
        """
        return self._stall_limit

    # -- the LogBackend seam -------------------------------------------------

    def exists(self, session_id: str) -> bool:
        """Whether the session has a row."""
        validate_session_id(session_id)
        return self._run(
            lambda cur: (
                cur.execute("SELECT 1 FROM sessions WHERE id = %s", (session_id,)).fetchone()
                is not None
            )
        )

    def next_seq(self, session_id: str) -> int:
        """The seq the session's next event must carry; 0 if it is not stored."""
        validate_session_id(session_id)

        def read(cur: psycopg.Cursor[Any]) -> int:
            row = cur.execute(
                "SELECT next_seq FROM sessions WHERE id = %s", (session_id,)
            ).fetchone()
            return 0 if row is None else int(row[0])

        return self._run(read)

    def write(self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]) -> None:
        """Store a batch in one transaction, under the lease's fencing token.

        See :meth:`LogBackend.write`. When this backend holds the session's
        lease, the lease must still carry its token; when it does not, no
        other holder may have the lease live. The whole batch is one
        statement (:data:`_APPEND_FUNCTION`); batches of other sessions that
        wait for a connection at the same time share its transaction.

        Raises:
            InvalidRecordError: the header (first write) or an event is invalid.
            StoreConflictError: the batch does not continue the stored log.
            SessionTakenOverError: another host took this backend's lease over.
            SessionLeasedError: another host holds the lease (a write without one).
        """
        self._submit(header, events, create=False)

    def create(self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]) -> None:
        """Insert the session's row and first batch in one statement, only if it has
        no row, under the lease as :meth:`write`; see :meth:`LogBackend.create`.

        Raises:
            InvalidRecordError: the header or an event is invalid.
            StoreConflictError: the session has a row already.
            SessionTakenOverError, SessionLeasedError: as :meth:`write`.
        """
        self._submit(header, events, create=True)

    def _submit(
        self, header: Mapping[str, object], events: Sequence[Mapping[str, object]], *, create: bool
    ) -> None:
        """Queue one batch and return once it is committed (by this thread or
        another one committing a group); raise what refused it."""
        session_id = validate_session_id(header.get("id"))
        batch = parse_batch(session_id, events)
        # The header matters only to a first write, which the server tells apart.
        record: HeaderRecord | None = None
        bad_header: InvalidRecordError | None = None
        try:
            record = parse_header(header)
        except InvalidRecordError as exc:
            bad_header = exc
        activity = Activity().extend_written(batch)
        params = (
            session_id,
            self._tokens.get(session_id),
            None if record is None else _storable(encode_json(record)),
            None if record is None else record["created_at"],
            _storable(b"[" + b",".join(encode_record(event) for event in batch) + b"]"),
            batch[0]["seq"] if batch else 0,
            len(batch),
            activity.turn_count,
            activity.last_activity,
            activity.title,
            self._events_channel,
            create,
        )
        mine = _Pending(session_id, params, batch, bad_header)
        with self._lock:
            self._queue.append(mine)
        while not mine.done.is_set():
            group: builtins.list[_Pending] = []
            try:
                with self._write_slots:
                    with self._connection() as conn:
                        with self._lock:
                            group = self._queue[:_GROUP_MAX]
                            del self._queue[:_GROUP_MAX]
                        alone = self._commit_group(conn, group) if group else []
                    for pending in alone:
                        self._commit_alone(pending, retried=pending.lost)
            except BaseException as exc:
                for pending in group:
                    if not pending.done.is_set():
                        pending.error = exc
                        pending.done.set()
                with self._lock:
                    queued = mine in self._queue
                    if queued:  # never to be written once its caller got the error
                        self._queue.remove(mine)
                if queued or mine in group:
                    raise
                mine.done.wait()  # another thread took it: its outcome is this call's
            if not group:
                mine.done.wait()  # another thread is committing it
        if mine.error is not None:
            raise mine.error

    def _commit_group(
        self, conn: psycopg.Connection[Any], group: builtins.list[_Pending]
    ) -> builtins.list[_Pending]:
        """Commit the batches of ``group`` (of several sessions) in one transaction.

        Returns the batches to commit one by one: all of them when the group
        failed (a refused batch rolls the others back with it; they are then
        written again, each alone, with the checks of a first attempt), or
        just ``group`` itself when it holds one batch.
        """
        if len(group) == 1:
            return group
        # One lock order (code point order of the ids) for every group and renewal.
        group.sort(key=lambda pending: pending.session_id)
        try:
            with conn.transaction(), conn.pipeline():
                for pending in group:
                    conn.execute(_APPEND_CALL, pending.params)
        except psycopg.OperationalError as exc:
            lost = _connection_lost(exc)
            for pending in group:
                pending.lost = lost
            return group
        except psycopg.Error:
            return group
        for pending in group:
            pending.done.set()
        return []

    def _commit_alone(self, pending: _Pending, *, retried: bool) -> None:
        """Commit one batch in its own transaction, retried once on a fresh connection
        when the connection broke (a retry first checks whether the break hid its commit)."""
        try:
            while True:
                try:
                    with self._connection() as conn:
                        if retried and self._already_stored(conn, pending):
                            return
                        conn.execute(_APPEND_CALL, pending.params)
                    return
                except psycopg.OperationalError as exc:
                    if retried or not _connection_lost(exc):
                        raise
                    log.info(
                        "session %s: the connection broke during a write (%s); retrying",
                        pending.session_id,
                        exc,
                    )
                    retried = True
                except psycopg.Error as exc:
                    self._raise_refusal(exc, pending.session_id, pending.batch, pending.bad_header)
                    raise
        except Exception as exc:  # the writer of this batch raises it
            pending.error = exc
        finally:
            pending.done.set()

    def _raise_refusal(
        self,
        exc: psycopg.Error,
        session_id: str,
        batch: Sequence[EventRecord],
        bad_header: InvalidRecordError | None,
    ) -> None:
        """Turn a refusal of :data:`_APPEND_FUNCTION` into the backend's error; return otherwise."""
        message = exc.diag.message_primary or ""
        if exc.sqlstate == "TT001":
            host = message or None
            self._lost(session_id, host)
            raise SessionTakenOverError(session_id, host) from None
        if exc.sqlstate == "TT002":
            host, _, pid = message.rpartition(" ")
            raise SessionLeasedError(session_id, int(pid) or None, host=host) from None
        if exc.sqlstate == "TT003":
            check_continues(session_id, batch, int(message))
            raise StoreConflictError(f"session {session_id!r}: the batch does not continue the log")
        if exc.sqlstate == "TT004" and bad_header is not None:
            raise bad_header from None
        if exc.sqlstate == "TT005":
            raise StoreConflictError(f"session {session_id} is already stored") from None

    def _already_stored(self, conn: psycopg.Connection[Any], pending: _Pending) -> bool:
        """Whether a retried batch was committed by the attempt whose connection broke.

        A create's is when the stored header is its own and the log ends with
        its batch (an empty create leaves only the header to compare).
        """
        batch, create = pending.batch, pending.params[-1] is True
        if not batch and not create:
            return False
        first = batch[0]["seq"] if batch else 0
        row = conn.execute(
            "SELECT s.next_seq, e.type, e.time, s.header = %s::jsonb FROM sessions s"
            " LEFT JOIN events e ON e.session_id = s.id AND e.seq = %s WHERE s.id = %s",
            (pending.params[2], first, pending.session_id),
        ).fetchone()
        if row is None or (create and not row[3]):
            return False
        if not batch:
            return bool(row[0] == 0)
        return row[0] == batch[-1]["seq"] + 1 and (row[1], row[2]) == (
            batch[0]["type"],
            batch[0]["time"],
        )

    def load(self, session_id: str) -> StoredLog:
        """Read and validate the whole log; see :meth:`LogBackend.load`.

        Raises:
            SessionNotFoundError: the session has no row.
            CorruptLogError: the stored header or an event is invalid, or seqs
                have a gap; it names the session and seq.
        """
        header, rows = self._read(session_id)
        try:
            events = parse_blocks(_event_blocks(rows))
        except BadRecordError as exc:
            raise CorruptLogError(session_id, exc.reason, seq=exc.index) from None
        return StoredLog(header, events)

    def load_events(self, session_id: str, registry: EventRegistry) -> LoadedLog:
        """Read the whole log and decode it; see :meth:`LogBackend.load_events`.

        The rows become event lines and are decoded a block at a time
        (`decode_blocks`), each row let go once decoded.
        """
        header, rows = self._read(session_id)
        try:
            return LoadedLog(header, decode_blocks(_event_blocks(rows), registry))
        except BadRecordError as exc:
            raise CorruptLogError(session_id, exc.reason, seq=exc.index) from None

    def _read(self, session_id: str) -> tuple[HeaderRecord, builtins.list[_Row]]:
        validate_session_id(session_id)

        def read(cur: psycopg.Cursor[Any]) -> tuple[str, builtins.list[_Row]]:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            stored = cur.execute(
                "SELECT header::text FROM sessions WHERE id = %s", (session_id,)
            ).fetchone()
            if stored is None:
                raise SessionNotFoundError(session_id)
            rows = cur.execute(
                "SELECT seq, type, time, data::text FROM events WHERE session_id = %s ORDER BY seq",
                (session_id,),
            ).fetchall()
            return stored[0], rows

        header_text, rows = self._run(read)
        return parse_stored_header(session_id, header_text), rows

    def events_after(
        self, session_id: str, after_seq: int, *, limit: int | None = None
    ) -> builtins.list[StoredEvent]:
        """The stored events of ``session_id`` whose seq is greater than ``after_seq``,
        in order, the first ``limit`` of them; see :meth:`LogBackend.events_after`.

        Raises:
            SessionNotFoundError: the session has no row.
            CorruptLogError: an event is invalid.
        """
        validate_session_id(session_id)

        def read(cur: psycopg.Cursor[Any]) -> builtins.list[_Row]:
            if (
                cur.execute("SELECT 1 FROM sessions WHERE id = %s", (session_id,)).fetchone()
                is None
            ):
                raise SessionNotFoundError(session_id)
            return cur.execute(
                "SELECT seq, type, time, data::text FROM events"
                " WHERE session_id = %s AND seq > %s ORDER BY seq LIMIT %s",
                (session_id, after_seq, limit),
            ).fetchall()

        rows = self._run(read)
        if not rows:
            return []
        first = after_seq + 1
        try:
            return parse_lines(_event_lines(rows), first)
        except BadRecordError as exc:
            raise CorruptLogError(session_id, exc.reason, seq=first + exc.index) from None

    def list(self) -> builtins.list[SessionSummary]:
        """Summarise every session from its row, with the holder of a live lease.

        See :meth:`LogBackend.list`; ``holder`` is the host and pid of a
        session live on some host.
        """

        def read(cur: psycopg.Cursor[Any]) -> builtins.list[tuple[Any, ...]]:
            return cur.execute(
                "SELECT s.id, s.header::text, s.turn_count, s.last_activity, s.title,"
                " CASE WHEN l.expires_at > clock_timestamp() THEN l.host END, l.pid"
                " FROM sessions s LEFT JOIN leases l ON l.session_id = s.id"
            ).fetchall()

        summaries = [
            SessionSummary.of_row(
                session_id,
                header_text,
                turn_count,
                last_activity,
                title,
                holder=None if host is None else Holder(pid, host),
            )
            for session_id, header_text, turn_count, last_activity, title, host, pid in self._run(
                read
            )
        ]
        return newest_first(summaries)

    def delete(self, session_id: str) -> None:
        """Remove the session's row and all its events in one transaction.

        Raises:
            SessionNotFoundError: the session has no row.
        """
        validate_session_id(session_id)

        attempts = 0

        def delete(cur: psycopg.Cursor[Any]) -> None:
            nonlocal attempts
            attempts += 1
            deleted = cur.execute("DELETE FROM sessions WHERE id = %s", (session_id,)).rowcount
            # A retry that finds no row: the attempt whose connection broke
            # may have committed the delete; the session is gone either way.
            if deleted == 0 and attempts == 1:
                raise SessionNotFoundError(session_id)

        self._run(delete)

    # -- leases --------------------------------------------------------------

    def acquire_lease(self, session_id: str) -> _FencedLease:
        """Take the session's lease with a fresh fencing token.

        A lease whose expiry has passed (its holder died, or was paused or
        cut off past its TTL) is taken over; the heartbeat renews it from then
        on.

        Raises:
            SessionLeasedError: another holder has the lease live (it names the host).
        """
        validate_session_id(session_id)
        # The token is drawn first, on its own: a take retried after a lost
        # connection (whose first attempt may have committed) finds its own
        # token in the row and takes it again, instead of being refused by
        # itself until the TTL passes.
        token = self._run(_next_token)
        taken = self._take_waiting(session_id, token)
        if isinstance(taken, LeaseInfo):
            raise SessionLeasedError(session_id, taken.pid or None, host=taken.host)
        with self._lock:
            self._tokens[session_id] = taken
            self._start_heartbeat()
        return _FencedLease(self, session_id, taken)

    def _take_waiting(self, session_id: str, token: int) -> int | LeaseInfo:
        """Take the lease under ``token`` (its token), or say who holds it live.

        The lease row may be locked by a transaction of a holder that is
        stopped or cut off (paused in the middle of a renewal, say). The wait
        for it is bounded: the server ends such a transaction once it has been
        idle for :attr:`stall_limit` (every connection of this backend sets
        ``idle_in_transaction_session_timeout``), and past that bound (and a
        margin) the take gives up, refused. A wait longer than
        :data:`_LOCK_WAIT` is logged once, naming the host that holds the row.
        """
        deadline = time.monotonic() + self._stall_limit + _LOCK_MARGIN
        said = False
        while True:
            try:
                return self._run(lambda cur: self._take(cur, session_id, token))
            except psycopg.errors.LockNotAvailable:
                info = self.lease_info(session_id)  # a plain read: it waits for no lock
                holder = LeaseInfo("unknown", 0, True) if info is None else info
                if time.monotonic() >= deadline:
                    return LeaseInfo(holder.host, holder.pid, True)
                if not said:
                    said = True
                    log.warning(
                        "session %s: waiting for its lease, whose row host %s (pid %d) keeps "
                        "locked; at most %.0f s more",
                        session_id,
                        holder.host,
                        holder.pid,
                        max(0.0, deadline - time.monotonic()),
                    )

    def _take(self, cur: psycopg.Cursor[Any], session_id: str, token: int) -> int | LeaseInfo:
        """One attempt at the lease, waiting at most :data:`_LOCK_WAIT` for its row.

        Raises:
            psycopg.errors.LockNotAvailable: the row stayed locked that long.
        """
        cur.execute(f"SET LOCAL lock_timeout = '{int(_LOCK_WAIT * 1000)}ms'")
        row = cur.execute(
            "INSERT INTO leases AS l (session_id, holder, host, pid, token, expires_at)"
            " VALUES (%(id)s, %(holder)s, %(host)s, %(pid)s, %(token)s,"
            "         clock_timestamp() + %(ttl)s * interval '1 second')"
            " ON CONFLICT (session_id) DO UPDATE SET holder = excluded.holder,"
            "   host = excluded.host, pid = excluded.pid, token = excluded.token,"
            # Not excluded.expires_at: that was reckoned before the wait for the row.
            "   expires_at = clock_timestamp() + %(ttl)s * interval '1 second'"
            " WHERE l.expires_at <= clock_timestamp() OR l.token = excluded.token"
            " RETURNING token",
            {
                "id": session_id,
                "holder": self.holder_id,
                "host": self._host,
                "pid": self._pid,
                "token": token,
                "ttl": self._ttl,
            },
        ).fetchone()
        if row is not None:
            return int(row[0])
        held = cur.execute(
            "SELECT host, pid FROM leases WHERE session_id = %s", (session_id,)
        ).fetchone()
        return LeaseInfo(held[0], held[1], True) if held else LeaseInfo("unknown", 0, True)

    def lease_holder(self, session_id: str) -> Holder | None:
        """The host and pid of a live lease's holder (on any host), else ``None``."""
        info = self.lease_info(session_id)
        return Holder(info.pid, info.host) if info is not None and info.live else None

    def lease_info(self, session_id: str) -> LeaseInfo | None:
        """Who holds (or last held) the session's lease, ``None`` if no one does."""
        validate_session_id(session_id)
        row = self._run(
            lambda cur: cur.execute(
                "SELECT host, pid, expires_at > clock_timestamp() FROM leases"
                " WHERE session_id = %s",
                (session_id,),
            ).fetchone()
        )
        return None if row is None else LeaseInfo(row[0], row[1], row[2])

    def renew_leases(self) -> builtins.list[str]:
        """Push the expiry of every lease this backend holds one TTL ahead.

        Returns the sessions whose lease was taken over (reported once to
        ``on_lease_lost``; their writes fail as taken over).
        """
        with self._lock:
            held = {s: t for s, t in self._tokens.items() if t not in self._lost_tokens}
        if not held:
            return []

        def renew(cur: psycopg.Cursor[Any]) -> set[str]:
            # The rows are locked in the order a group of writes locks them
            # (by session id, code point order), so the two never deadlock.
            rows = cur.execute(
                "UPDATE leases SET expires_at = clock_timestamp() + %s * interval '1 second'"
                " WHERE session_id IN (SELECT session_id FROM leases"
                "   WHERE (session_id, token) IN (SELECT * FROM unnest(%s::text[], %s::bigint[]))"
                '   ORDER BY session_id COLLATE "C" FOR UPDATE)'
                " RETURNING session_id",
                (self._ttl, builtins.list(held), builtins.list(held.values())),
            ).fetchall()
            return {row[0] for row in rows}

        # One statement, no transaction around it: the server commits it as it
        # ends, so a host stopped meanwhile never keeps the rows locked.
        renewed = self._run(renew, transaction=False)
        lost = [session_id for session_id in held if session_id not in renewed]
        for session_id in lost:
            with self._lock:
                still_held = self._tokens.get(session_id) == held[session_id]
            if still_held:  # not released meanwhile
                info = self.lease_info(session_id)
                self._lost(session_id, info.host if info is not None else None)
        return lost

    def _lost(self, session_id: str, host: str | None) -> None:
        """Report, once per lease, that another host took ``session_id`` over."""
        with self._lock:
            token = self._tokens.get(session_id)
            if token is None or token in self._lost_tokens:
                return
            self._lost_tokens.add(token)
        if self._on_lease_lost is None:
            log.warning("session %s was taken over by host %s", session_id, host or "unknown")
        else:  # which reports it
            self._on_lease_lost(session_id, host)

    def _start_heartbeat(self) -> None:
        if self._heartbeat is None and not self._closed:
            self._heartbeat = threading.Thread(
                target=self._beat, name="tether-lease-heartbeat", daemon=True
            )
            self._heartbeat.start()

    def _beat(self) -> None:
        while not self._stop.wait(self._ttl / 3):
            try:
                self.renew_leases()
            except BackendClosedError:
                return
            except (psycopg.Error, LogStoreError) as exc:
                # The next beat tries again; a lease that expires meanwhile
                # may be taken over, and the writes then say so.
                log.warning("renewing session leases failed: %s", exc)

    def _release(self, session_id: str, token: int) -> None:
        with self._lock:
            if self._tokens.get(session_id) == token:
                del self._tokens[session_id]
        # Expired, not deleted: the row keeps naming the host that held the
        # session last (a host it was taken from says who took it).
        self._run(
            lambda cur: cur.execute(
                "UPDATE leases SET expires_at = clock_timestamp()"
                " WHERE session_id = %s AND token = %s AND expires_at > clock_timestamp()",
                (session_id, token),
            ),
            transaction=False,
        )

    def notify(self, channel_name: str, payload: str) -> None:
        """Send ``payload`` on the NOTIFY channel ``channel_name`` (delivered at once)."""
        self._run(lambda cur: cur.execute("SELECT pg_notify(%s, %s)", (channel_name, payload)))

    def check_writable(self) -> None:
        """Commit a transaction that writes (and then removes) a row.

        Raises:
            psycopg.Error: the server refuses writes (read-only, full, down).
        """

        def probe(cur: psycopg.Cursor[Any]) -> None:
            cur.execute(
                "INSERT INTO leases (session_id, holder, host, pid, token, expires_at)"
                " VALUES ('.probe', '', '', 0, 0, clock_timestamp()) ON CONFLICT DO NOTHING"
            )
            cur.execute("DELETE FROM leases WHERE session_id = '.probe'")

        self._run(probe)

    def close(self) -> None:
        """Stop the heartbeat and close every connection; later calls raise
        :class:`BackendClosedError`. Leases still held expire with their TTL."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            idle, self._idle = self._idle, []
            heartbeat = self._heartbeat
        self._stop.set()
        if heartbeat is not None and heartbeat is not threading.current_thread():
            heartbeat.join()
        for conn in idle:
            conn.close()

    # -- connections ---------------------------------------------------------

    def _run(self, work: Callable[[psycopg.Cursor[Any]], _T], *, transaction: bool = True) -> _T:
        """Run ``work`` in one transaction (without ``transaction``, each of its
        statements in its own), retried once on a fresh connection when the
        connection was lost (``work`` must be safe to run twice)."""
        for attempt in (1, 2):
            try:
                with self._connection() as conn, conn.cursor() as cur:
                    if not transaction:
                        return work(cur)
                    with conn.transaction():
                        return work(cur)
            except psycopg.OperationalError as exc:
                if attempt == 2 or not _connection_lost(exc):
                    raise
        raise AssertionError("unreachable")

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection for the caller alone; a broken one is dropped."""
        if self._closed:
            raise BackendClosedError(f"{self!r} is closed")
        with self._slots:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None or conn.closed:
                conn = self._connect()
            try:
                yield conn
            finally:
                if conn.broken or conn.closed:
                    conn.close()
                else:
                    with self._lock:
                        if self._closed:
                            conn.close()
                        else:
                            self._idle.append(conn)

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(
            self._url, autocommit=True, application_name=f"tether {self._schema}"[:63]
        )
        try:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self._schema)))
            conn.execute(
                sql.SQL("SET idle_in_transaction_session_timeout = {}").format(
                    sql.Literal(f"{int(self._stall_limit * 1000)}ms")
                )
            )
        except BaseException:
            conn.close()
            raise
        return conn

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        """Bring the schema to :data:`SCHEMA_VERSION`, once, whoever else starts now.

        Raises:
            UnsupportedFormatError: the schema is newer than this module.
        """
        schema = sql.Identifier(self._schema)
        conn.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (_LOCK_CLASS, self._schema))
        try:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
            version = int(row[0]) if row is not None else 0
            if version > SCHEMA_VERSION:
                raise UnsupportedFormatError(
                    f"PostgreSQL schema {self._schema}", version, SCHEMA_VERSION
                )
            for number, statements in enumerate(_MIGRATIONS[version:], version + 1):
                with conn.transaction():
                    for statement in statements:
                        conn.execute(statement)
                    conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (number,))
                log.info("PostgreSQL schema %s migrated to version %d", self._schema, number)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (_LOCK_CLASS, self._schema))


def _next_token(cur: psycopg.Cursor[Any]) -> int:
    """A fresh fencing token, one no other take drew."""
    row = cur.execute("SELECT nextval('lease_tokens')").fetchone()
    assert row is not None
    return int(row[0])


class _FencedLease:
    """A held lease: its fencing token; released by deleting the row if the token is still its."""

    def __init__(self, backend: PostgresBackend, session_id: str, token: int) -> None:
        self._backend = backend
        self._key: tuple[str, int] | None = (session_id, token)

    @property
    def token(self) -> int:
        assert self._key is not None
        return self._key[1]

    def release(self) -> None:
        key, self._key = self._key, None
        if key is None:
            return
        try:
            self._backend._release(*key)
        except BackendClosedError:
            log.debug("lease of session %s left to expire", key[0])
        except psycopg.Error as exc:
            log.warning(
                "the lease of session %s could not be released (%s); it expires with its TTL",
                key[0],
                exc,
            )


def _connection_lost(exc: psycopg.OperationalError) -> bool:
    """Whether ``exc`` means the connection is gone (the server ended it, or the network)."""
    return isinstance(exc, psycopg.errors.AdminShutdown) or exc.sqlstate in (
        None,
        "57P01",  # terminated by the administrator (pg_terminate_backend)
        "25P03",  # ended as idle in a transaction too long (this host was stopped)
        "08000",
        "08003",
        "08006",
    )


def _storable(text: str | bytes) -> str:
    """JSON text ``jsonb`` accepts: a NUL character (``\\u0000``, which it
    refuses) in a string is stored as U+FFFD, as a lone surrogate is."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if "\\u0000" not in text:
        return text
    return encode_json(_without_nul(json.loads(text)))


def _without_nul(value: object) -> object:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, builtins.list):
        return [_without_nul(v) for v in value]
    return value


def _event_lines(rows: Iterable[_Row]) -> bytes:
    """The event lines (`tether.persist.backends.lines`) of event rows, in their order."""
    return b"".join([_event_line(row) for row in rows])


def _event_line(row: _Row) -> bytes:
    """The event line of an event row: the line the file backends store, its
    ``data`` as the database gives it back.

    The lines are then read by the same decoder as theirs, which checks each
    one (a row's ``data`` that is not a JSON object fails there, naming its seq).
    """
    seq, kind, time, data = row
    return (
        _LINE_ENCODER.encode({"type": kind, "seq": seq, "time": time, "data": msgspec.Raw(data)})
        + b"\n"
    )


def _event_blocks(rows: builtins.list[_Row]) -> Iterator[bytes]:
    """:func:`_event_lines` of ``rows`` in blocks (`gathered`), each row let go
    as its block is built."""
    return gathered(_event_line(row) for row in drained(rows))


_LINE_ENCODER = msgspec.json.Encoder()
