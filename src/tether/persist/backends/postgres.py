"""Session logs in PostgreSQL, shared by many tether hosts: the third backend.

Every host that names the same database (and schema) sees the same sessions.
:class:`PostgresBackend` is the seam; each concern has its own module:

* ``postgres_schema``: the tables, the ``append_batch`` function, and the
  versioned migrations, applied when the backend opens, under an advisory
  lock, so hosts that start together migrate once;
* ``postgres_lease``: **one live owner per session, across hosts: the fenced
  lease.** A host takes a session's lease (a fresh fencing token, an expiry
  one TTL ahead on the database's clock) before it creates, resumes or
  repairs it; a heartbeat thread renews it every TTL/3;
* ``postgres_writes``: a write is one call of ``append_batch``, one round trip
  and one transaction. **Every write checks the token in its own transaction**
  (the lease row is read ``FOR SHARE``, which a takeover's update waits for):
  once another host took the lease over, the former owner's writes are
  rejected with :class:`~tether.persist.backends.lease.SessionTakenOverError`
  and store nothing, however long it was paused. Writes of several sessions
  are committed together under load; a broken connection is retried once;
* ``postgres_reads``: the read queries, and event rows as event lines;
* ``postgres_pool``: the connection pool;
* ``postgres_budget``: the cluster budget's reads (its reservations are
  granted or refused inside ``append_batch``, in the transaction of the
  batch that logs them).

* ``postgres_doorbell``: once a write committed, the host's coalesced
  ``NOTIFY`` doorbell carries its session id and last seq (see
  :mod:`tether.persist.follow` and :mod:`tether.persist.cluster`, which
  rings it); it is rung outside the write transaction, so commits of many
  hosts never queue on PostgreSQL's notification lock.

The driver is psycopg 3 (synchronous: the backend seam runs in worker
threads), imported with this module.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from tether.persist.backends.base import LoadedLog, SessionSummary, StoredLog, newest_first
from tether.persist.backends.bulk import BadRecordError
from tether.persist.backends.channels import CHANNELS, channel
from tether.persist.backends.errors import CorruptLogError, SessionNotFoundError
from tether.persist.backends.lease import Holder
from tether.persist.backends.lines import decode_blocks, parse_blocks, parse_lines
from tether.persist.backends.postgres_budget import (
    ClusterOutcome,
    DayTotals,
    read_day,
    read_outcome,
)
from tether.persist.backends.postgres_lease import (
    FencedLease,
    LeaseInfo,
    Leases,
    default_host_id,
)
from tether.persist.backends.postgres_pool import Pool, connection_lost
from tether.persist.backends.postgres_reads import (
    Row,
    event_blocks,
    event_lines,
    read_after,
    read_listing,
    read_log,
)
from tether.persist.backends.postgres_runs import RunQueue
from tether.persist.backends.postgres_schema import SCHEMA_VERSION, migrate
from tether.persist.backends.postgres_writes import BatchWriter
from tether.persist.backends.records import (
    HeaderRecord,
    parse_stored_header,
    validate_session_id,
)
from tether.session.stored import StoredEvent

if TYPE_CHECKING:
    from tether.session.registry import EventRegistry

__all__ = [
    "MAX_IDENTIFIER",
    "SCHEMA_VERSION",
    "LeaseInfo",
    "PostgresBackend",
    "default_host_id",
]

_T = TypeVar("_T")

MAX_IDENTIFIER = 63
"""The longest identifier PostgreSQL keeps (bytes): a NOTIFY channel's name is one."""

_STALL_MIN = 2.0
"""The shortest :attr:`PostgresBackend.stall_limit`, in seconds."""


_HELD_BY = """
WITH named AS (
    SELECT session_id, expires_at > clock_timestamp() AS live FROM leases
    WHERE host = %(host)s OR holder = %(host)s
), taken AS (
    SELECT session_id, state = 'running' AND claimed_until > clock_timestamp() AS live
    FROM runs WHERE worker = %(host)s OR left(worker, length(%(host)s) + 1) = %(host)s || ':'
)
SELECT (SELECT count(DISTINCT session_id) FROM (
            SELECT session_id FROM named WHERE live UNION SELECT session_id FROM taken WHERE live
        ) AS held),
       EXISTS (SELECT 1 FROM named) OR EXISTS (SELECT 1 FROM taken)
"""
"""How many sessions a host has live, and whether any lease or run ever named it."""


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
        self._schema = schema
        self._host = host_id or default_host_id()
        self._pid = os.getpid()
        self._ttl = lease_ttl
        self._stall_limit = max(_STALL_MIN, lease_ttl / 2)
        self._pool = Pool(
            url, schema, stall_limit=self._stall_limit, size=pool_size, name=repr(self)
        )
        self._leases = Leases(
            self._run,
            host=self._host,
            pid=self._pid,
            ttl=lease_ttl,
            stall_limit=self._stall_limit,
            on_lease_lost=on_lease_lost,
        )
        # Writes use at most half the pool: reads keep the rest, and batches
        # that wait for a write connection are committed together.
        self._writer = BatchWriter(self._connection, self._leases, slots=pool_size // 2)
        try:
            with self._connection() as conn:
                migrate(conn, schema)
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
    def lease_ttl(self) -> float:
        return self._ttl

    @property
    def runs(self) -> RunQueue:
        """The queue of submitted runs (see :mod:`~tether.persist.backends.postgres_runs`)."""
        return RunQueue(self._run)

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
        statement (``append_batch``); batches of other sessions that
        wait for a connection at the same time share its transaction.

        Raises:
            InvalidRecordError: the header (first write) or an event is invalid.
            StoreConflictError: the batch does not continue the stored log.
            SessionTakenOverError: another host took this backend's lease over.
            SessionLeasedError: another host holds the lease (a write without one).
        """
        self._writer.submit(header, events, create=False)

    def create(self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]) -> None:
        """Insert the session's row and first batch in one statement, only if it has
        no row, under the lease as :meth:`write`; see :meth:`LogBackend.create`.

        Raises:
            InvalidRecordError: the header or an event is invalid.
            StoreConflictError: the session has a row already.
            SessionTakenOverError, SessionLeasedError: as :meth:`write`.
        """
        self._writer.submit(header, events, create=True)

    def load(self, session_id: str) -> StoredLog:
        """Read and validate the whole log; see :meth:`LogBackend.load`.

        Raises:
            SessionNotFoundError: the session has no row.
            CorruptLogError: the stored header or an event is invalid, or seqs
                have a gap; it names the session and seq.
        """
        header, rows = self._read(session_id)
        try:
            events = parse_blocks(event_blocks(rows))
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
            return LoadedLog(header, decode_blocks(event_blocks(rows), registry))
        except BadRecordError as exc:
            raise CorruptLogError(session_id, exc.reason, seq=exc.index) from None

    def _read(self, session_id: str) -> tuple[HeaderRecord, builtins.list[Row]]:
        validate_session_id(session_id)
        header_text, rows = self._run(lambda cur: read_log(cur, session_id))
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
        rows = self._run(lambda cur: read_after(cur, session_id, after_seq, limit))
        if not rows:
            return []
        first = after_seq + 1
        try:
            return parse_lines(event_lines(rows), first)
        except BadRecordError as exc:
            raise CorruptLogError(session_id, exc.reason, seq=first + exc.index) from None

    def list(self) -> builtins.list[SessionSummary]:
        """Summarise every session from its row, with the holder of a live lease.

        See :meth:`LogBackend.list`; ``holder`` is the host and pid of a
        session live on some host.
        """
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
                read_listing
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

    def acquire_lease(self, session_id: str) -> FencedLease:
        """Take the session's lease with a fresh fencing token.

        A lease whose expiry has passed (its holder died, or was paused or
        cut off past its TTL) is taken over; the heartbeat renews it from then
        on. A take waits a bounded time for a lease row another host keeps
        locked (past :attr:`stall_limit` the server ends that host's transaction).

        Raises:
            SessionLeasedError: another holder has the lease live (it names the host).
        """
        validate_session_id(session_id)
        return self._leases.acquire(session_id)

    def lease_holder(self, session_id: str) -> Holder | None:
        """The host and pid of a live lease's holder (on any host), else ``None``."""
        info = self.lease_info(session_id)
        return Holder(info.pid, info.host) if info is not None and info.live else None

    def lease_info(self, session_id: str) -> LeaseInfo | None:
        """Who holds (or last held) the session's lease, ``None`` if no one does."""
        validate_session_id(session_id)
        return self._leases.info(session_id)

    def held_by(self, host: str) -> int | None:
        """How many sessions ``host`` (a host id, or ``HOST:PID``) has live: those
        whose lease it holds unexpired, and runs it took whose claim still runs
        (it is opening them). ``None`` when no lease or run ever named it."""

        def count(cur: psycopg.Cursor[Any]) -> int | None:
            row = cur.execute(_HELD_BY, {"host": host}).fetchone()
            assert row is not None
            return int(row[0]) if row[1] else None

        return self._run(count)

    def renew_leases(self) -> builtins.list[str]:
        """Push the expiry of every lease this backend holds one TTL ahead.

        Returns the sessions whose lease was taken over (reported once to
        ``on_lease_lost``; their writes fail as taken over).
        """
        return self._leases.renew()

    # -- the cluster budget ----------------------------------------------------

    def budget_outcome(self, session_id: str, reservation_id: str) -> ClusterOutcome | None:
        """How the cluster budget decided on reservation ``reservation_id``, which
        ``session_id`` logged (with a ``cluster`` claim) in a committed batch;
        ``None`` when it has no open row (it was settled already)."""
        validate_session_id(session_id)
        return self._run(lambda cur: read_outcome(cur, session_id, reservation_id))

    def budget_day(self, day: str) -> DayTotals:
        """What all hosts spent and have reserved on ``day`` (``YYYY-MM-DD``)."""
        return self._run(lambda cur: read_day(cur, day))

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
        if self._pool.closed:
            return
        self._pool.close()
        self._leases.stop()

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
                if attempt == 2 or not connection_lost(exc):
                    raise
        raise AssertionError("unreachable")

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection for the caller alone; a broken one is dropped.

        Raises:
            BackendClosedError: the backend was closed.
        """
        with self._pool.connection() as conn:
            yield conn
