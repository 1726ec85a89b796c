"""A takeover completes within the lease's TTL and a bounded wait, whatever a stale
holder is doing: here a real second process stopped (SIGSTOP) while a
transaction of its own keeps the lease row locked, as a host paused in the
middle of a renewal does. And a database fault is said in one line."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from tests import postgres
from tests.persist.conftest import postgres_connection
from tests.persist.factory import events, header
from tests.persist.test_postgres_backend import wait_until_expired
from tether.cli.failures import describe
from tether.persist.backends.errors import storage_failure
from tether.persist.backends.lease import SessionLeasedError, SessionTakenOverError
from tether.persist.backends.postgres import PostgresBackend

TTL = 1.0

BOUND = TTL + 2.0 + 2.0
"""The promise: the TTL, the stall limit (half the TTL, at least 2 s), 2 s of margin."""

STALLED_HOLDER = """
import os, signal, sys
from tether.persist.backends.postgres import PostgresBackend

url, schema, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
backend = PostgresBackend(url, schema=schema, host_id="hostA", lease_ttl=ttl)
backend.acquire_lease("s1")
with backend._connection() as conn, conn.transaction():
    # A renewal under way: the lease row is locked until the transaction ends.
    conn.execute("SELECT 1 FROM leases WHERE session_id = 's1' FOR UPDATE")
    print("locked", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
"""


@pytest.fixture
def schema() -> Iterator[str]:
    name = postgres.new_schema()
    try:
        yield name
    finally:
        postgres.drop(name)


def test_a_takeover_completes_within_ttl_and_a_bounded_wait_while_a_stopped_host_holds_the_row(
    schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", STALLED_HOLDER, postgres.URL, schema, str(TTL)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    taker = PostgresBackend(postgres.URL, schema=schema, host_id="hostB", lease_ttl=TTL)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        locked = time.monotonic()
        bound = BOUND
        taken: list[object] = []

        def take() -> None:
            while True:
                try:
                    taken.append(taker.acquire_lease("s1"))
                    return
                except SessionLeasedError as exc:  # live still: its TTL has not passed
                    if time.monotonic() - locked > bound:
                        taken.append(exc)
                        return

        with caplog.at_level(logging.WARNING, logger="tether.persist.backends.postgres_lease"):
            thread = threading.Thread(target=take, daemon=True)
            thread.start()
            thread.join(bound + 5.0)
            assert not thread.is_alive(), "the takeover hung on the stopped host's lock"
        assert taken and not isinstance(taken[0], BaseException), taken
        assert time.monotonic() - locked < bound
        info = taker.lease_info("s1")
        assert info is not None and info.host == "hostB"  # taken over
        waits = [r.getMessage() for r in caplog.records if "waiting for its lease" in r.message]
        assert len(waits) == 1 and "host hostA (pid " in waits[0], waits
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
        holder.communicate(timeout=30)
        taker.close()


def test_a_database_fault_is_one_line_naming_the_database_not_the_disk_nor_the_query(
    schema: str,
) -> None:
    backend = PostgresBackend(postgres.URL, schema=schema, host_id="hostA")
    try:
        with postgres_connection(backend) as conn:
            # A fault met inside the append function, whose error carries its statement.
            conn.execute("ALTER TABLE events ADD CONSTRAINT refuse_all CHECK (seq < 0)")
        with pytest.raises(psycopg.Error) as failed:
            backend.write(header("s1"), events(0, 1))
        assert "\n" in str(failed.value)  # what the driver says spans lines
        said = storage_failure(failed.value)
        assert said.startswith("the session database failed: ")
        assert "\n" not in said and "disk" not in said
        assert "append_batch" not in said and "INSERT" not in said
        assert describe(failed.value) == said
    finally:
        backend.close()


def test_a_host_its_session_was_taken_from_is_told_which_host_took_it(schema: str) -> None:
    former = PostgresBackend(postgres.URL, schema=schema, host_id="hostA", lease_ttl=0.3)
    taker = PostgresBackend(postgres.URL, schema=schema, host_id="hostB", lease_ttl=0.3)
    try:
        former.write(header("s1"), events(0, 1))
        former.acquire_lease("s1")
        former._leases._stop.set()  # paused: its lease is not renewed
        wait_until_expired(taker, "s1")
        taker.acquire_lease("s1").release()  # taken over, then let go
        with pytest.raises(SessionTakenOverError) as fenced:
            former.write(header("s1"), events(1, 1))
        assert str(fenced.value) == "session s1 was taken over by host hostB"
    finally:
        former.close()
        taker.close()
