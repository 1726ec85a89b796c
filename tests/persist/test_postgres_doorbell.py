"""The events doorbell rung after commit: coalesced per host, never a wake-up lost.

The unit tests drive :class:`CommitBell` over a scripted connection (to hold a
ring mid-flight or make one fail); the others use the real server: a host's
writes, heard by a listener, and followers on another host that never poll.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import psycopg
import pytest
from psycopg import sql

from tests import postgres
from tether.persist import postgres as postgres_plugin
from tether.persist.backends.channels import EVENTS_CHANNEL, channel, sessions_rung
from tether.persist.backends.postgres_doorbell import PAYLOAD_LIMIT, CommitBell
from tether.persist.cluster import CLUSTER
from tether.persist.service import PERSISTENCE
from tether.runtime import Runtime
from tether.session import AssistantChunk, StepStart, TurnStart
from tether.session.store import SESSIONS
from tether.session.store import apply as store_plugin


class ScriptedConnection:
    """Records each ring; the first ring may wait for ``release`` or fail."""

    def __init__(self, *, hold_first: bool = False, fail_first: bool = False) -> None:
        self.rings: list[list[str]] = []
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self._hold_first = hold_first
        self._fail_first = fail_first
        self._rung = asyncio.Condition()

    async def until(self, condition: Callable[[], bool]) -> None:
        """Return once ``condition()`` holds, checked after each ring."""
        async with asyncio.timeout(10), self._rung:
            await self._rung.wait_for(condition)

    async def connect(self) -> ScriptedConnection:
        return self

    async def execute(self, _query: object, params: tuple[str, list[str]]) -> None:
        first = not self.entered.is_set()
        self.entered.set()
        if first and self._hold_first:
            await self.release.wait()
        if first and self._fail_first:
            raise psycopg.OperationalError("the connection was lost")
        self.rings.append(params[1])
        async with self._rung:
            self._rung.notify_all()

    async def close(self) -> None:
        pass


def heard(rings: list[list[str]]) -> dict[str, int]:
    """The last seq each session was rung for."""
    last: dict[str, int] = {}
    for payloads in rings:
        for payload in payloads:
            for line in payload.split("\n"):
                sid, _, seq = line.rpartition(" ")
                last[sid] = max(last.get(sid, -1), int(seq))
    return last


@asynccontextmanager
async def ringing(conn: ScriptedConnection) -> AsyncIterator[CommitBell]:
    """A bell over ``conn``, its task running while the block runs, then stopped."""
    bell = CommitBell(conn.connect, "ch", interval=0.0)
    task = asyncio.ensure_future(bell.run())
    try:
        yield bell
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_commits_during_a_ring_share_the_next_one_with_each_sessions_last_seq() -> None:
    conn = ScriptedConnection(hold_first=True)
    async with ringing(conn) as bell:
        bell.committed("a", 0)
        await conn.entered.wait()
        for seq in range(1, 100):
            bell.committed(f"s{seq % 10}", seq)
        bell.committed("a", 7)
        bell.committed("a", 3)  # an older seq never hides a newer one
        conn.release.set()
        await conn.until(lambda: len(conn.rings) == 2)
    assert len(conn.rings) == 2  # one ring for the hundred commits made meanwhile
    assert heard(conn.rings) == {"a": 7, **{f"s{n}": 90 + n for n in range(10)}}


async def test_a_ring_that_fails_is_sent_again_never_dropped() -> None:
    conn = ScriptedConnection(fail_first=True)
    async with ringing(conn) as bell:
        bell.committed("a", 4)
        await conn.entered.wait()
        bell.committed("b", 1)
        await conn.until(lambda: heard(conn.rings) == {"a": 4, "b": 1})


async def test_what_is_pending_when_the_bell_stops_is_rung_once_more() -> None:
    conn = ScriptedConnection(hold_first=True)
    async with ringing(conn) as bell:
        bell.committed("a", 0)
        await conn.entered.wait()
        bell.committed("b", 5)
        conn.release.set()
        await asyncio.sleep(0)
    assert heard(conn.rings) == {"a": 0, "b": 5}


async def test_a_long_ring_is_split_into_payloads_the_server_accepts() -> None:
    conn = ScriptedConnection(hold_first=True)
    ids = [f"session-{n:04d}-" + "x" * 40 for n in range(500)]
    async with ringing(conn) as bell:
        bell.committed("first", 0)
        await conn.entered.wait()
        for sid in ids:
            bell.committed(sid, 1)
        conn.release.set()
        await conn.until(lambda: len(conn.rings) == 2)
    payloads = conn.rings[1]
    assert len(payloads) > 1
    assert all(len(p.encode()) <= PAYLOAD_LIMIT for p in payloads)
    assert [sid for p in payloads for sid in sessions_rung(p)] == ids


@pytest.fixture
def schema() -> Iterator[str]:
    name = postgres.new_schema()
    yield name
    postgres.drop(name)


@asynccontextmanager
async def host(schema: str, name: str) -> AsyncIterator[Runtime]:
    """A tether host (store and PostgreSQL persistence) on ``schema``, listening."""
    async with Runtime() as runtime:
        await runtime.ctx.plugin(store_plugin)
        await runtime.ctx.plugin(
            postgres_plugin, {"url": postgres.URL, "db_schema": schema, "host_id": name}
        )
        cluster = runtime.ctx.get(CLUSTER)
        assert cluster is not None
        await cluster.listening()
        yield runtime


async def write_turns(runtime: Runtime, sids: list[str], chunks: int) -> dict[str, int]:
    """A turn in each of ``sids`` at once, a flush after each of its ``chunks`` chunks;
    the last seq of each."""
    store = runtime.ctx.get(SESSIONS)
    assert store is not None

    async def one(sid: str) -> int:
        session = store.prepare(sid, cwd="/test")
        store.enter(session)
        session.append(TurnStart(turn=1))
        session.append(StepStart(turn=1, step=1))
        await store.flush(session)
        for _ in range(chunks):
            session.append(AssistantChunk(kind="text", delta="x"))
            await store.flush(session)
        return len(session.events) - 1

    return dict(zip(sids, await asyncio.gather(*(one(sid) for sid in sids)), strict=True))


async def test_every_write_is_rung_after_its_commit_with_its_session_and_last_seq(
    schema: str,
) -> None:
    listener = await psycopg.AsyncConnection.connect(postgres.URL, autocommit=True)
    name = channel(schema, EVENTS_CHANNEL)
    await listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
    async with host(schema, "A") as a:
        written = await write_turns(a, [f"s{n}" for n in range(24)], 10)
        last: dict[str, int] = {}
        async for notice in listener.notifies(timeout=5.0):
            for line in notice.payload.split("\n"):
                sid, _, seq = line.rpartition(" ")
                last[sid] = max(last.get(sid, -1), int(seq))
            if last == written:
                break
    await listener.close()
    assert last == written


async def test_followers_on_another_host_hear_every_write_without_polling(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower that never polls (its poll is an hour) is woken for every session a
    host writes to, up to its last event: the coalesced doorbell loses no wake-up."""
    monkeypatch.setattr(postgres_plugin, "POLL", 3600.0)
    sids = [f"f{n}" for n in range(16)]
    async with host(schema, "A") as a, host(schema, "B") as b:
        await write_turns(a, sids, 0)  # each session exists, its turn open
        persistence = b.ctx.get(PERSISTENCE)
        assert persistence is not None
        store = a.ctx.get(SESSIONS)
        assert store is not None

        async def follow(sid: str, last: int) -> int:
            seen = -1
            async for batch in persistence.follow(sid):
                seen = batch[-1].seq
                if seen == last:
                    break
            return seen

        async def more(sid: str) -> int:
            session = store.get(sid)
            assert session is not None
            for _ in range(20):
                session.append(AssistantChunk(kind="text", delta="x"))
                await store.flush(session)
            return len(session.events) - 1

        followers = [asyncio.ensure_future(follow(sid, 21)) for sid in sids]
        try:
            written = await asyncio.gather(*(more(sid) for sid in sids))
            async with asyncio.timeout(20):
                seen = await asyncio.gather(*followers)
        finally:
            for task in followers:
                task.cancel()
    assert seen == written == [21] * len(sids)
