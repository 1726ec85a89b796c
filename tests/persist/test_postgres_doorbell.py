"""The events doorbell rung after commit: coalesced per host, never a wake-up lost.

The unit tests drive :class:`CommitBell` over a scripted connection (to hold a
ring mid-flight or make one fail); the others use the real server: a host's
writes, heard by a listener, and followers on another host that never poll.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests import postgres
from tests.persist.factory import events, header
from tether.persist import postgres as postgres_plugin
from tether.persist.backends.channels import EVENTS_CHANNEL, channel, sessions_rung
from tether.persist.backends.postgres import PostgresBackend
from tether.persist.backends.postgres_doorbell import PAYLOAD_LIMIT, CommitBell
from tether.persist.cluster import CLUSTER
from tether.persist.service import PERSISTENCE
from tether.runtime import Runtime
from tether.session.store import apply as store_plugin


class ScriptedConnection:
    """Records each ring; the first ring may wait for ``release`` or fail."""

    def __init__(self, *, hold_first: bool = False, fail_first: bool = False) -> None:
        self.rings: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self._hold_first = hold_first
        self._fail_first = fail_first

    @contextmanager
    def connect(self) -> Iterator[ScriptedConnection]:
        yield self

    def execute(self, _query: str, params: tuple[str, list[str]]) -> None:
        first = not self.entered.is_set()
        self.entered.set()
        if first and self._hold_first:
            self.release.wait(10)
        if first and self._fail_first:
            raise psycopg.OperationalError("the connection was lost")
        self.rings.append(params[1])


def heard(rings: list[list[str]]) -> dict[str, int]:
    """The last seq each session was rung for."""
    last: dict[str, int] = {}
    for payloads in rings:
        for payload in payloads:
            for line in payload.split("\n"):
                sid, _, seq = line.rpartition(" ")
                last[sid] = max(last.get(sid, -1), int(seq))
    return last


def test_commits_during_a_ring_share_the_next_one_with_each_sessions_last_seq() -> None:
    conn = ScriptedConnection(hold_first=True)
    bell = CommitBell(conn.connect, "ch", interval=0.0)  # type: ignore[arg-type]
    bell.committed("a", 0)
    assert conn.entered.wait(5)
    for seq in range(1, 100):
        bell.committed(f"s{seq % 10}", seq)
    bell.committed("a", 7)
    bell.committed("a", 3)  # an older seq never hides a newer one
    conn.release.set()
    bell.close()
    assert len(conn.rings) == 2  # one ring for the hundred commits made meanwhile
    assert heard(conn.rings) == {"a": 7, **{f"s{n}": 90 + n for n in range(10)}}


def test_a_ring_that_fails_is_sent_again_never_dropped() -> None:
    conn = ScriptedConnection(fail_first=True)
    bell = CommitBell(conn.connect, "ch", interval=0.0)  # type: ignore[arg-type]
    bell.committed("a", 4)
    assert conn.entered.wait(5)
    bell.committed("b", 1)
    bell.close()
    assert heard(conn.rings) == {"a": 4, "b": 1}


def test_a_long_ring_is_split_into_payloads_the_server_accepts() -> None:
    conn = ScriptedConnection(hold_first=True)
    bell = CommitBell(conn.connect, "ch", interval=0.0)  # type: ignore[arg-type]
    bell.committed("first", 0)
    assert conn.entered.wait(5)
    ids = [f"session-{n:04d}-" + "x" * 40 for n in range(500)]
    for sid in ids:
        bell.committed(sid, 1)
    conn.release.set()
    bell.close()
    payloads = conn.rings[1]
    assert len(payloads) > 1
    assert all(len(p.encode()) <= PAYLOAD_LIMIT for p in payloads)
    assert [sid for p in payloads for sid in sessions_rung(p)] == ids


@pytest.fixture
def schema() -> Iterator[str]:
    name = postgres.new_schema()
    yield name
    postgres.drop(name)


def write_turns(backend: PostgresBackend, sids: list[str], batches: int) -> dict[str, int]:
    """``batches`` one-event writes to each of ``sids``, eight threads at once; the last seqs."""

    def one(sid: str) -> int:
        head = header(sid)
        backend.write(head, [])
        for seq in range(batches):
            backend.write(head, events(seq, 1))
        return batches - 1

    with ThreadPoolExecutor(8) as pool:
        return dict(zip(sids, pool.map(one, sids), strict=True))


def test_every_commit_is_rung_after_it_with_its_session_and_last_seq(schema: str) -> None:
    listener = psycopg.connect(postgres.URL, autocommit=True)
    name = channel(schema, EVENTS_CHANNEL)
    listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
    backend = PostgresBackend(postgres.URL, schema=schema, host_id="A")
    try:
        written = write_turns(backend, [f"s{n}" for n in range(24)], 10)
    finally:
        backend.close()
    last: dict[str, int] = {}
    for notice in listener.notifies(timeout=2.0):
        assert notice.channel == name
        for line in notice.payload.split("\n"):
            sid, _, seq = line.rpartition(" ")
            last[sid] = max(last.get(sid, -1), int(seq))
        if last == written:
            break
    listener.close()
    assert last == written


async def test_followers_on_another_host_hear_every_write_without_polling(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower that never polls (its poll is an hour) is woken for every session a
    host writes to, up to its last event: the coalesced doorbell loses no wake-up."""
    monkeypatch.setattr(postgres_plugin, "POLL", 3600.0)
    sids = [f"f{n}" for n in range(16)]
    writer = PostgresBackend(postgres.URL, schema=schema, host_id="A")
    async with Runtime() as runtime:
        await runtime.ctx.plugin(store_plugin)
        await runtime.ctx.plugin(
            postgres_plugin, {"url": postgres.URL, "db_schema": schema, "host_id": "B"}
        )
        await runtime.ctx.get(CLUSTER).listening()  # type: ignore[union-attr]
        persistence = runtime.ctx.get(PERSISTENCE)
        assert persistence is not None
        await asyncio.to_thread(write_turns, writer, sids, 1)  # each session exists

        async def follow(sid: str, last: int) -> int:
            seen = -1
            async for batch in persistence.follow(sid):
                seen = batch[-1].seq
                if seen == last:
                    break
            return seen

        followers = [asyncio.ensure_future(follow(sid, 19)) for sid in sids]
        try:
            written = await asyncio.to_thread(_more_turns, writer, sids)
            async with asyncio.timeout(20):
                seen = await asyncio.gather(*followers)
        finally:
            for task in followers:
                task.cancel()
            writer.close()
    assert dict(zip(sids, seen, strict=True)) == written


def _more_turns(backend: PostgresBackend, sids: list[str]) -> dict[str, Any]:
    def one(sid: str) -> int:
        head = header(sid)
        for seq in range(1, 20):
            backend.write(head, events(seq, 1))
        return 19

    with ThreadPoolExecutor(8) as pool:
        return dict(zip(sids, pool.map(one, sids), strict=True))
