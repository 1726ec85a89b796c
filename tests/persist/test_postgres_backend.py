"""What only the PostgreSQL backend has: migrations, the fenced lease, lost connections."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from tests import postgres
from tests.persist.factory import events, header, records
from tether.persist.backends.errors import (
    BackendClosedError,
    StoreConflictError,
    UnsupportedFormatError,
)
from tether.persist.backends.lease import SessionLeasedError, SessionTakenOverError
from tether.persist.backends.postgres import SCHEMA_VERSION, PostgresBackend


@pytest.fixture
def schema() -> Iterator[str]:
    name = postgres.new_schema()
    yield name
    postgres.drop(name)


def sql(query: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(postgres.URL, autocommit=True) as conn:
        cur = conn.execute(query, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def kill_connections(schema: str) -> int:
    """Terminate every connection a backend on ``schema`` has open; how many."""
    rows = sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE application_name = %s AND pid <> pg_backend_pid()",
        f"tether {schema}",
    )
    return len(rows)


def wait_until_expired(backend: PostgresBackend, session_id: str) -> None:
    deadline = time.monotonic() + 5
    while (info := backend.lease_info(session_id)) is not None and info.live:
        assert time.monotonic() < deadline, "the lease never expired"
        time.sleep(0.02)


def test_hosts_starting_together_migrate_the_schema_once(schema: str) -> None:
    opened: list[PostgresBackend] = []
    barrier = threading.Barrier(4)

    def start() -> None:
        barrier.wait()
        opened.append(PostgresBackend(postgres.URL, schema=schema))

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert len(opened) == 4
        versions = sql(f'SELECT version FROM "{schema}".schema_migrations')
        assert versions == [(version,) for version in range(1, SCHEMA_VERSION + 1)]
    finally:
        for backend in opened:
            backend.close()


def test_a_schema_made_by_a_newer_tether_is_refused(schema: str) -> None:
    PostgresBackend(postgres.URL, schema=schema).close()
    sql(f'INSERT INTO "{schema}".schema_migrations (version) VALUES (%s)', SCHEMA_VERSION + 1)
    with pytest.raises(UnsupportedFormatError, match=schema):
        PostgresBackend(postgres.URL, schema=schema)


def test_a_taken_over_lease_fences_its_former_holder(schema: str) -> None:
    lost: list[tuple[str, str | None]] = []
    a = PostgresBackend(
        postgres.URL,
        schema=schema,
        host_id="a",
        lease_ttl=0.3,
        on_lease_lost=lambda *args: lost.append(args),
    )
    b = PostgresBackend(postgres.URL, schema=schema, host_id="b", lease_ttl=30)
    try:
        first = a.acquire_lease("s1")
        a.write(header("s1"), events(0, 2))
        with pytest.raises(SessionLeasedError, match="open on host a"):
            b.acquire_lease("s1")
        a._leases._stop.set()  # a paused host: no more renewals
        wait_until_expired(b, "s1")
        second = b.acquire_lease("s1")
        assert second.token > first.token  # type: ignore[attr-defined]
        with pytest.raises(SessionTakenOverError, match="session s1 was taken over by host b"):
            a.write(header("s1"), events(2, 1))
        assert lost == [("s1", "b")]
        a.renew_leases()  # a renewal cannot take it back, and says so once only
        assert b.lease_info("s1").host == "b"  # type: ignore[union-attr]
        assert lost == [("s1", "b")]
        b.write(header("s1"), events(2, 1))
        first.release()  # releasing a lost lease leaves the new holder's alone
        assert b.lease_info("s1").live  # type: ignore[union-attr]
        assert records(b.load("s1")) == events(0, 3)
    finally:
        a.close()
        b.close()


def test_the_heartbeat_keeps_a_lease_past_its_ttl(schema: str) -> None:
    holder = PostgresBackend(postgres.URL, schema=schema, host_id="a", lease_ttl=0.3)
    other = PostgresBackend(postgres.URL, schema=schema, host_id="b")
    try:
        holder.acquire_lease("s1")
        deadline = time.monotonic() + 1.0  # three TTLs
        while time.monotonic() < deadline:
            with pytest.raises(SessionLeasedError):
                other.acquire_lease("s1")
            time.sleep(0.05)
        holder.close()  # the heartbeat stops with the backend
        wait_until_expired(other, "s1")
        other.acquire_lease("s1").release()
    finally:
        holder.close()
        other.close()


class _Connection:
    """A connection that, once, breaks around the statement that writes a batch:
    before it (the server ends the connection) or after it (the answer is lost)."""

    def __init__(self, conn: psycopg.Connection[Any], backend: _Breaking) -> None:
        self._conn = conn
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def execute(self, query: Any, params: Any = None) -> Any:
        breaking = "append_batch" in str(query) and not self._backend.broken
        if breaking and self._backend.when == "before":
            self._backend.broken = True
            sql("SELECT pg_terminate_backend(%s)", self._conn.info.backend_pid)
        result = self._conn.execute(query, params)
        if breaking and self._backend.when == "after":
            self._backend.broken = True
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return result


class _Breaking(PostgresBackend):
    def __init__(self, schema: str, when: str) -> None:
        self.when = when
        self.broken = True  # not while migrating
        super().__init__(postgres.URL, schema=schema)
        self.broken = False

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        with super()._connection() as conn:
            yield _Connection(conn, self)


def test_a_batch_whose_connection_is_terminated_is_written_on_a_new_one(schema: str) -> None:
    backend = _Breaking(schema, "before")
    try:
        backend.write(header("s1"), events(0, 3))
        assert backend.broken
        backend.write(header("s1"), events(3, 4))
        assert records(backend.load("s1")) == events(0, 7)
    finally:
        backend.close()


def test_a_batch_committed_before_the_connection_broke_is_not_stored_twice(schema: str) -> None:
    backend = _Breaking(schema, "after")
    backend.broken = True
    try:
        backend.write(header("s1"), events(0, 2))
        backend.broken = False
        backend.write(header("s1"), events(2, 3))  # committed, answer lost, retried
        assert backend.broken
        assert records(backend.load("s1")) == events(0, 5)
        assert backend.next_seq("s1") == 5
    finally:
        backend.close()


@pytest.mark.parametrize("count", [0, 2])
def test_a_create_committed_before_the_connection_broke_is_not_refused_as_stored(
    schema: str, count: int
) -> None:
    backend = _Breaking(schema, "after")
    try:
        backend.create(header("s1"), events(0, count))  # committed, answer lost, retried
        assert backend.broken
        assert records(backend.load("s1")) == events(0, count)
        with pytest.raises(StoreConflictError, match="session s1 is already stored"):
            backend.create(header("s1", cwd="/other"), [])
    finally:
        backend.close()


def test_writes_under_repeated_connection_kills_lose_nothing_acknowledged(schema: str) -> None:
    backend = PostgresBackend(postgres.URL, schema=schema)
    stop = threading.Event()
    kills = 0

    def killer() -> None:
        nonlocal kills
        while not stop.wait(0.01):
            killed = kill_connections(schema)
            kills += killed
            if killed:
                # Leave a reconnected backend a moment to write, so writes go on.
                stop.wait(0.05)

    acknowledged = 0
    failures = 0
    thread = threading.Thread(target=killer)
    thread.start()
    try:
        deadline = time.monotonic() + 1.0
        # Until something was both killed and acknowledged: on a loaded machine
        # the first second can pass with every write's connection killed.
        while time.monotonic() < deadline or kills == 0 or acknowledged == 0:
            # What the writer does: a failed batch stays pending and is
            # written again, from what the store says it holds.
            try:
                backend.write(header("s1"), events(acknowledged, 20))
                acknowledged += 20
            except psycopg.OperationalError:
                failures += 1
    finally:
        stop.set()
        thread.join()
    try:
        assert kills > 0
        assert records(backend.load("s1")) == events(0, acknowledged)
        assert backend.next_seq("s1") == acknowledged
    finally:
        backend.close()


def test_batches_committed_together_keep_their_own_refusals(schema: str) -> None:
    """Batches of several sessions waiting for a connection are committed in one
    transaction; a refused one fails alone, the others are stored."""
    backend = PostgresBackend(postgres.URL, schema=schema, pool_size=1)
    try:
        for session_id in ("blocker", "s1", "s2", "s3"):
            backend.write(header(session_id), events(0, 2))
        outcomes: dict[str, BaseException | None] = {}

        def write(session_id: str, start: int) -> None:
            try:
                backend.write(header(session_id), events(start, 3))
                outcomes[session_id] = None
            except BaseException as exc:
                outcomes[session_id] = exc

        with psycopg.connect(postgres.URL, autocommit=True) as lock:
            lock.execute(f'SET search_path TO "{schema}"')
            with lock.transaction():
                # The only pooled connection waits on this row lock in its write,
                # so the next three batches queue up behind it.
                lock.execute("SELECT 1 FROM sessions WHERE id = 'blocker' FOR UPDATE")
                writers = [threading.Thread(target=write, args=("blocker", 2))]
                writers[0].start()
                deadline = time.monotonic() + 10
                while not sql(
                    "SELECT 1 FROM pg_stat_activity WHERE application_name = %s"
                    " AND wait_event_type = 'Lock'",
                    f"tether {schema}",
                ):
                    assert time.monotonic() < deadline, "the first write never waited"
                    time.sleep(0.01)
                for session_id, start in (("s1", 2), ("s2", 5), ("s3", 2)):
                    writers.append(threading.Thread(target=write, args=(session_id, start)))
                    writers[-1].start()
                while len(backend._writer.queue) < 3:
                    assert time.monotonic() < deadline, "the writes never queued"
                    time.sleep(0.01)
        for writer in writers:
            writer.join()
        assert outcomes["blocker"] is None and outcomes["s1"] is None and outcomes["s3"] is None
        assert isinstance(outcomes["s2"], StoreConflictError)
        for session_id in ("blocker", "s1", "s3"):
            assert records(backend.load(session_id)) == events(0, 5)
        assert records(backend.load("s2")) == events(0, 2)
    finally:
        backend.close()


def test_a_write_that_fails_before_reaching_the_server_is_not_left_to_be_written_later(
    schema: str,
) -> None:
    backend = PostgresBackend(postgres.URL, schema=schema)
    backend.write(header("s1"), events(0, 2))
    backend.close()
    with pytest.raises(BackendClosedError):
        backend.write(header("s1"), events(2, 1))
    assert backend._writer.queue == []  # no later writer of this backend picks it up


def test_a_schema_name_too_long_for_its_channels_is_refused_before_connecting() -> None:
    # "tether.<schema>.control" must fit PostgreSQL's 63-byte identifiers: NOTIFY
    # refuses a longer channel, and LISTEN would quietly listen to a truncated one.
    with pytest.raises(ValueError, match="too long for its NOTIFY channels: at most 48 bytes"):
        PostgresBackend("postgresql://nowhere.invalid/x", schema="s" * 49)


class AnswerLost(PostgresBackend):
    """While ``losing``, each transaction commits and is then run again: what the one
    retry of a transaction whose connection broke before its answer came does."""

    losing = False

    def _run(self, work: Any, **options: Any) -> Any:
        if self.losing:
            super()._run(work, **options)
        return super()._run(work, **options)


def test_a_lease_take_or_a_delete_retried_after_it_committed_does_what_was_asked(
    schema: str,
) -> None:
    backend = AnswerLost(postgres.URL, schema=schema, host_id="a")
    try:
        backend.write(header("s1"), events(0, 1))
        backend.losing = True
        lease = backend.acquire_lease("s1")  # not refused by its own first attempt
        assert backend.lease_info("s1").host == "a"  # type: ignore[union-attr]
        backend.losing = False
        backend.write(header("s1"), events(1, 1))  # under the token the retry kept
        backend.losing = True
        lease.release()
        released = backend.lease_info("s1")
        assert released is not None and not released.live and released.host == "a"
        backend.delete("s1")  # not "not found" because its first attempt deleted it
        assert not backend.exists("s1")
    finally:
        backend.close()


class _PausedRenewal(PostgresBackend):
    """A backend whose next lease renewal stops before its statement until ``go`` is set."""

    def __init__(self, schema: str) -> None:
        super().__init__(postgres.URL, schema=schema, lease_ttl=60.0)
        self.renewing = threading.Event()
        self.go = threading.Event()

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        with super()._connection() as conn:
            yield _PausingConnection(conn, self)


class _PausingConnection:
    def __init__(self, conn: psycopg.Connection[Any], backend: _PausedRenewal) -> None:
        self._conn = conn
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        return _PausingCursor(self._conn.cursor(*args, **kwargs), self._backend)

    def execute(self, query: Any, params: Any = None) -> Any:
        return self.cursor().execute(query, params)


class _PausingCursor:
    def __init__(self, cur: psycopg.Cursor[Any], backend: _PausedRenewal) -> None:
        self._cur = cur
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)

    def __enter__(self) -> _PausingCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cur.close()

    def execute(self, query: Any, params: Any = None) -> Any:
        if "unnest" in str(query) and not self._backend.renewing.is_set():
            self._backend.renewing.set()
            assert self._backend.go.wait(10)
        self._cur.execute(query, params)
        return self


def test_a_lease_released_while_a_renewal_is_under_way_stays_released(schema: str) -> None:
    backend = _PausedRenewal(schema)
    try:
        lease = backend.acquire_lease("s1")
        renewal = threading.Thread(target=backend.renew_leases)
        renewal.start()
        assert backend.renewing.wait(10)  # the renewal read the token, not yet renewed
        release = threading.Thread(target=lease.release)
        release.start()
        release.join(0.3)
        backend.go.set()
        renewal.join(10)
        release.join(10)
        info = backend.lease_info("s1")
        assert info is not None and not info.live
    finally:
        backend.go.set()
        backend.close()
