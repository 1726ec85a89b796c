"""Persistence plugins over the runtime: write-behind, flush barrier, resume, repair.

One contract, run against the JSONL, SQLite and PostgreSQL plugins.
"""

import asyncio
import os
import threading
import time
import types
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import postgres
from tether.content import TextBlock, ToolCallBlock
from tether.persist import jsonl as jsonl_plugin
from tether.persist import postgres as postgres_plugin
from tether.persist import sqlite as sqlite_plugin
from tether.persist.backends import JsonlBackend, LogBackend, SqliteBackend
from tether.persist.backends.errors import SessionNotFoundError
from tether.persist.backends.lease import Lease, LeaseBook, SessionTakenOverError
from tether.persist.backends.postgres import PostgresBackend
from tether.persist.follow import Doorbell, follow
from tether.persist.service import PERSISTENCE, SESSION_WRITTEN, Persistence, mount_persistence
from tether.persist.writer import WriteBehind
from tether.runtime import Context, Fiber, Runtime
from tether.session import (
    AssistantMessageEvent,
    Completed,
    Interrupted,
    SessionInvariantError,
    StepEnd,
    StepStart,
    ToolCallEvent,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)
from tether.session.log import Session, SessionHeader
from tether.session.registry import DEFAULT_REGISTRY
from tether.session.store import SESSIONS, SessionConflictError, SessionStore
from tether.session.store import apply as store_plugin


@dataclass
class World:
    runtime: Runtime
    store: SessionStore
    persistence: Persistence
    fiber: Fiber
    plugin: object
    data_dir: Path
    config: dict[str, object]

    async def remount(self) -> None:
        """Unload and mount the persistence plugin again (a fresh writer)."""
        await self.fiber.dispose()
        self.fiber = await self.runtime.ctx.plugin(self.plugin, self.config)
        self.persistence = self.runtime.ctx.get(PERSISTENCE)

    def other_backend(self) -> LogBackend:
        """A backend of the same kind on the same storage: another process's, say."""
        backend = self.persistence._backend
        if isinstance(backend, PostgresBackend):
            return PostgresBackend(postgres.URL, schema=backend.schema, host_id="elsewhere")
        return type(backend)(self.data_dir)  # type: ignore[call-arg]


PLUGINS = {"jsonl": jsonl_plugin, "sqlite": sqlite_plugin, "postgres": postgres_plugin}


@pytest.fixture(params=sorted(PLUGINS))
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[World]:
    config: dict[str, object] = {"data_dir": str(tmp_path)}
    if request.param == "postgres":
        config.update(url=postgres.URL, db_schema=postgres.new_schema())
    plugin = PLUGINS[request.param]
    async with Runtime() as runtime:
        await runtime.ctx.plugin(store_plugin)
        fiber = await runtime.ctx.plugin(plugin, config)
        yield World(
            runtime,
            runtime.ctx.get(SESSIONS),
            runtime.ctx.get(PERSISTENCE),
            fiber,
            plugin,
            tmp_path,
            config,
        )


def live(store: SessionStore, session_id: str | None = None) -> Session:
    session = store.prepare(session_id, cwd="/work")
    store.enter(session)
    store.announce(session)
    return session


def prompt(session: Session, text: str) -> None:
    turn = session.last_turn + 1
    session.append(TurnStart(turn=turn))
    session.append(StepStart(turn=turn, step=1))
    session.append(UserMessageEvent(id=f"m{turn}", source="user", content=(TextBlock(text),)))


def complete(session: Session, reply: str) -> None:
    turn = session.open_turn
    assert turn is not None
    session.append(
        AssistantMessageEvent(content=(TextBlock(reply),), finish="stop", interrupted=False)
    )
    session.append(StepEnd(turn=turn, step=1))
    session.append(TurnEnd(turn=turn, reason=Completed()))


async def test_flush_makes_everything_appended_before_it_durable(world: World) -> None:
    session = live(world.store, "durable")
    prompt(session, "hello")
    complete(session, "hi")
    await world.store.flush(session)
    stored = await world.persistence.load("durable")
    assert [e.to_record() for e in stored.events] == [e.to_record() for e in session.events]
    assert stored.header == session.header


async def test_write_behind_writes_without_a_flush(world: World) -> None:
    written: asyncio.Queue[int] = asyncio.Queue()
    world.runtime.ctx.on(SESSION_WRITTEN, lambda session, durable: written.put_nowait(durable))
    session = live(world.store, "behind")
    prompt(session, "hello")
    # No flush: the writer picks the batch up after its window.
    assert await asyncio.wait_for(written.get(), timeout=10) == len(session.events)
    assert [s.id for s in await world.persistence.list()] == ["behind"]


@pytest.mark.parametrize("backend_class", [JsonlBackend, SqliteBackend], ids=["jsonl", "sqlite"])
async def test_a_turns_end_is_written_at_once_and_unloading_does_not_wait_out_the_window(
    backend_class: type[JsonlBackend] | type[SqliteBackend], tmp_path: Path
) -> None:
    # An hour's window: only a turn's end can have the writer write before it.
    persistence = types.ModuleType("hour_window_persistence")
    persistence.inject = ("sessions",)  # type: ignore[attr-defined]

    async def apply(ctx: Context, config: None) -> None:
        await mount_persistence(ctx, backend_class(tmp_path), window=3600.0)

    persistence.apply = apply  # type: ignore[attr-defined]
    async with Runtime() as runtime:
        await runtime.ctx.plugin(store_plugin)
        await runtime.ctx.plugin(persistence)
        written: asyncio.Queue[int] = asyncio.Queue()
        runtime.ctx.on(SESSION_WRITTEN, lambda session, durable: written.put_nowait(durable))
        session = live(runtime.ctx.get(SESSIONS), "prompt")
        prompt(session, "hello")
        complete(session, "hi")
        assert await asyncio.wait_for(written.get(), timeout=30) == len(session.events)
        assert session.events[-1].type == "turn/end"
        prompt(session, "and then")
        assert written.empty()
    # Unloading drains what is pending without waiting out the window.
    assert backend_class(tmp_path).next_seq("prompt") == len(session.events)


class ThreadNotingBackend(JsonlBackend):
    """Notes where each write runs (``loop`` or ``thread``); ``delay`` makes writes slow."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.writes: list[str] = []
        self.delay = 0.0

    def _note(self) -> None:
        on_loop = threading.current_thread() is threading.main_thread()
        self.writes.append("loop" if on_loop else "thread")
        time.sleep(self.delay)  # a slow disk (this is the backend's synchronous code)

    def write(self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]) -> None:
        self._note()
        super().write(header, events)

    def create(self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]) -> None:
        self._note()
        super().create(header, events)

    def try_write(
        self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]
    ) -> bool:
        written = super().try_write(header, events)
        if written:
            self._note()
        return written


async def test_an_awaited_write_runs_on_the_loop_only_while_writes_are_quick(
    tmp_path: Path,
) -> None:
    backend = ThreadNotingBackend(tmp_path)
    # A limit no healthy disk reaches, and a delay past it for the slow write.
    limit = 0.25
    writer = WriteBehind(
        backend, leases=LeaseBook(backend.acquire_lease), window=3600.0, inline_limit=limit
    )
    task = asyncio.get_running_loop().create_task(writer.run())
    session = Session(SessionHeader(id="quick", created_at=1.0, cwd="/"))

    async def turn(delay: float = 0.0) -> None:
        backend.delay = delay
        prompt(session, "hello")
        complete(session, "hi")
        await writer.flush(session)

    try:
        await turn()  # the first write creates the file: in a thread
        await turn()  # quick so far: on the loop
        await turn(delay=limit * 1.2)  # on the loop, and slow
        await turn()  # so this one goes to a thread, and is quick again
        await turn()
        prompt(session, "unawaited")
    finally:
        await writer.close()
        await task
    assert backend.writes == ["thread", "loop", "loop", "thread", "loop", "thread"]
    stored = backend.load("quick")
    assert [e.to_record() for e in stored.events] == [e.to_record() for e in session.events]


async def test_a_batch_nobody_waits_for_is_stored_unsynced_and_the_flush_syncs_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = JsonlBackend(tmp_path)
    written: asyncio.Queue[int] = asyncio.Queue()
    writer = WriteBehind(
        backend,
        leases=LeaseBook(backend.acquire_lease),
        window=0.0,
        on_written=lambda session, durable: written.put_nowait(durable),
        on_stored=lambda session, stored: written.put_nowait(stored),
    )
    task = asyncio.get_running_loop().create_task(writer.run())
    session = Session(SessionHeader(id="once", created_at=1.0, cwd="/"))
    syncs: list[int] = []
    real_fsync = os.fsync
    try:
        prompt(session, "hello")
        await writer.flush(session)  # created, durable
        await written.get()
        monkeypatch.setattr(os, "fsync", lambda fd: (syncs.append(fd), real_fsync(fd)))
        session.append(
            AssistantMessageEvent(content=(TextBlock("hi"),), finish="stop", interrupted=False)
        )
        writer.notice(session)  # as the persistence service does for every append
        assert await asyncio.wait_for(written.get(), timeout=10) == len(session.events)
        assert backend.next_seq("once") == len(session.events)  # stored, readable
        assert syncs == []  # and nobody waited: no fsync
        session.append(StepEnd(turn=1, step=1))
        session.append(TurnEnd(turn=1, reason=Completed()))
        await writer.flush(session)
        assert len(syncs) == 1  # the acknowledgement's one fsync covers both batches
    finally:
        await writer.close()
        await task
    stored = backend.load("once")
    assert [e.to_record() for e in stored.events] == [e.to_record() for e in session.events]


async def test_a_failed_sync_is_retried_by_the_next_flush_without_loss_or_duplicates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = JsonlBackend(tmp_path)
    written: asyncio.Queue[int] = asyncio.Queue()
    writer = WriteBehind(
        backend,
        leases=LeaseBook(backend.acquire_lease),
        window=0.0,
        on_written=lambda session, durable: written.put_nowait(durable),
        on_stored=lambda session, stored: written.put_nowait(stored),
    )
    task = asyncio.get_running_loop().create_task(writer.run())
    session = Session(SessionHeader(id="retry", created_at=1.0, cwd="/"))
    real_fsync = os.fsync
    try:
        prompt(session, "hello")
        await writer.flush(session)
        await written.get()
        session.append(
            AssistantMessageEvent(content=(TextBlock("hi"),), finish="stop", interrupted=False)
        )
        writer.notice(session)  # as the persistence service does for every append
        await asyncio.wait_for(written.get(), timeout=10)  # stored unsynced

        def failing(fd: int) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "fsync", failing)
        complete_turn = len(session.events)
        session.append(StepEnd(turn=1, step=1))
        session.append(TurnEnd(turn=1, reason=Completed()))
        with pytest.raises(OSError, match="Input/output"):
            await writer.flush(session)
        assert backend.next_seq("retry") < complete_turn  # taken back to the last sync
        monkeypatch.setattr(os, "fsync", real_fsync)
        await writer.flush(session)
    finally:
        await writer.close()
        await task
    stored = backend.load("retry")
    assert [e.to_record() for e in stored.events] == [e.to_record() for e in session.events]


async def test_a_session_without_events_leaves_no_artifact(world: World) -> None:
    session = live(world.store, "empty")
    await world.store.flush(session)
    assert await world.persistence.list() == []
    with pytest.raises(SessionNotFoundError):
        await world.persistence.load("empty")


async def test_losing_transaction_leaves_nothing_behind(world: World) -> None:
    winner = world.store.prepare("race", cwd="/winner")
    loser = world.store.prepare("race", cwd="/loser")
    prompt(loser, "the loser's private work")
    world.store.enter(winner)
    with pytest.raises(SessionConflictError):
        world.store.enter(loser)
    prompt(winner, "the winner's work")
    await world.store.flush(winner)
    stored = await world.persistence.load("race")
    assert stored.header.cwd == "/winner"
    assert len(stored.events) == len(winner.events)


async def test_resume_continues_seq_and_turn_numbering(world: World) -> None:
    session = live(world.store, "resumable")
    prompt(session, "one")
    complete(session, "first answer")
    await world.store.flush(session)
    world.store.detach(session)

    resumed = await world.persistence.prepare_resume("resumable")
    world.store.enter(resumed)
    prompt(resumed, "two")
    complete(resumed, "second answer")
    await world.store.flush(resumed)
    assert [e.seq for e in resumed.events] == list(range(len(resumed.events)))
    assert resumed.last_turn == 2
    await world.remount()
    stored = await world.persistence.load("resumable")
    assert len(stored.events) == len(resumed.events)


async def test_resuming_a_live_session_is_rejected(world: World) -> None:
    session = live(world.store, "busy")
    prompt(session, "x")
    await world.store.flush(session)
    with pytest.raises(SessionConflictError, match="already live"):
        await world.persistence.prepare_resume("busy")
    with pytest.raises(SessionConflictError, match="cannot be deleted"):
        await world.persistence.delete("busy")


async def test_resuming_an_open_turn_repairs_it_durably(world: World) -> None:
    session = live(world.store, "crashed")
    prompt(session, "run two tools")
    calls = (
        ToolCallBlock(id="c1", name="bash", arguments={"command": "sleep 100"}),
        ToolCallBlock(id="c2", name="bash", arguments={"command": "true"}),
    )
    session.append(AssistantMessageEvent(content=calls, finish="tool-calls", interrupted=False))
    session.append(ToolCallEvent(id="c1", name="bash", arguments={"command": "sleep 100"}))
    await world.store.flush(session)
    # The process "dies": the session is never closed, only forgotten.
    world.store.detach(session)

    before = [e.to_record() for e in (await world.persistence.load("crashed")).events]
    repaired = await world.persistence.prepare_resume("crashed")
    tail = [e.type for e in repaired.events[len(session.events) :]]
    assert tail == ["tool/result", "tool/result", "step/end", "turn/end"]
    results = [e.data for e in repaired.events if e.type == "tool/result"]
    assert "started" in str(results[0]["content"]) and results[0]["is_error"] is True
    assert "never started" in str(results[1]["content"])
    last = repaired.events[-1].payload
    assert isinstance(last, TurnEnd) and isinstance(last.reason, Interrupted)
    # A plain load repaired in memory only; resuming wrote the repair, so a
    # second load finds it on disk and adds nothing.
    assert before[: len(session.events)] == [e.to_record() for e in session.events]
    again = await world.persistence.load("crashed")
    assert len(again.events) == len(repaired.events)


async def test_a_plain_load_repairs_in_memory_and_writes_nothing(world: World) -> None:
    session = live(world.store, "elsewhere")
    prompt(session, "still running in another process")
    await world.store.flush(session)
    world.store.detach(session)  # from here on, as if another process owned it
    path = world.data_dir / "sessions" / "elsewhere.jsonl"
    stored = path.read_bytes() if path.exists() else None
    loaded = await world.persistence.load("elsewhere")
    assert loaded.open_turn is None and loaded.events[-1].type == "turn/end"
    assert (path.read_bytes() if path.exists() else None) == stored
    summary = next(s for s in await world.persistence.list() if s.id == "elsewhere")
    assert summary.turn_count == 1


async def test_a_live_session_is_never_repaired(world: World) -> None:
    session = live(world.store, "running")
    prompt(session, "still working")
    await world.store.flush(session)
    snapshot = await world.persistence.load("running")
    assert snapshot.open_turn == 1
    assert len(snapshot.events) == len(session.events)


async def test_unloading_persistence_drains_pending_events(world: World) -> None:
    session = live(world.store, "drained")
    prompt(session, "written on unload")
    await world.remount()
    stored = await world.persistence.load("drained")
    assert len(stored.events) == len(session.events)


async def test_delete_removes_a_stored_session(world: World) -> None:
    session = live(world.store, "doomed")
    prompt(session, "bye")
    complete(session, "ok")
    await world.store.flush(session)
    world.store.detach(session)
    await world.persistence.delete("doomed")
    assert await world.persistence.list() == []


@pytest.mark.parametrize(
    ("second", "message"),
    [
        ({"type": "assistant/chunk", "data": {"kind": "text", "delta": "x"}}, "open step"),
        ({"type": "turn/start", "data": {"turn": 2}}, "still open"),
    ],
    ids=["a chunk outside a step", "a turn inside a turn"],
)
async def test_a_stored_log_that_breaks_an_invariant_fails_to_load_naming_its_seq(
    world: World, second: dict[str, object], message: str
) -> None:
    backend = world.other_backend()
    header = {"id": "broken", "created_at": 1.0, "cwd": "/", "lineage": None, "meta": {}}
    first = {"type": "turn/start", "seq": 0, "time": 1.0, "data": {"turn": 1}}
    backend.write(header, [first, {**second, "seq": 1, "time": 2.0}])
    backend.close()
    with pytest.raises(SessionInvariantError, match=message) as caught:
        await world.persistence.load("broken")
    assert str(caught.value).startswith("session 'broken': seq 1: ")


async def test_follow_gives_the_events_after_a_seq_then_each_new_one_in_order(
    world: World,
) -> None:
    session = live(world.store, "followed")
    prompt(session, "one")
    await world.store.flush(session)
    seen: list[int] = []

    async def read() -> None:
        async for batch in world.persistence.follow("followed", 0):
            seen.extend(event.seq for event in batch)
            if batch[-1].type == "turn/end":
                return

    async with asyncio.timeout(10), asyncio.TaskGroup() as group:
        group.create_task(read())
        await asyncio.sleep(0)
        complete(session, "done")
        await world.store.flush(session)
    assert seen == list(range(1, len(session.events)))


async def test_following_a_session_that_is_not_stored_fails(world: World) -> None:
    with pytest.raises(SessionNotFoundError):
        async for _batch in world.persistence.follow("absent"):
            pass


class TakenOverBackend(JsonlBackend):
    """Refuses writes as taken over by another host while ``taken``; counts leases taken."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.taken = False
        self.leases_taken = 0

    def acquire_lease(self, session_id: str) -> Lease:
        self.leases_taken += 1
        return super().acquire_lease(session_id)

    def write(self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]) -> None:
        if self.taken:
            raise SessionTakenOverError(str(header["id"]), "hostB")
        super().write(header, events)

    def try_write(
        self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]
    ) -> bool:
        if self.taken:
            raise SessionTakenOverError(str(header["id"]), "hostB")
        return super().try_write(header, events)

    def write_unsynced(
        self,
        header: Mapping[str, object],
        events: Sequence[Mapping[str, object]],
        *,
        wait: bool = True,
    ) -> bool:
        if self.taken:
            raise SessionTakenOverError(str(header["id"]), "hostB")
        return super().write_unsynced(header, events, wait=wait)


async def test_a_taken_over_session_is_never_written_again_and_its_lease_is_forgotten(
    tmp_path: Path,
) -> None:
    backend = TakenOverBackend(tmp_path)
    leases = LeaseBook(backend.acquire_lease)
    writer = WriteBehind(backend, leases=leases, window=3600.0)
    task = asyncio.get_running_loop().create_task(writer.run())
    fenced = Session(SessionHeader(id="fenced", created_at=1.0, cwd="/"))
    try:
        prompt(fenced, "stored")
        complete(fenced, "yes")
        await writer.flush(fenced)
        stored = [e.to_record() for e in fenced.events]
        backend.taken = True
        prompt(fenced, "refused")
        with pytest.raises(SessionTakenOverError):
            await writer.flush(fenced)
        assert not leases.holds("fenced")  # forgotten at once, not when released
        backend.taken = False  # the new owner let it go: the lease is free again
        complete(fenced, "the fenced agent's answer, in this process's memory only")
        with pytest.raises(SessionTakenOverError):
            await writer.flush(fenced)
        writer.notice(fenced, now=True)
        writer.release(fenced)
        prompt(fenced, "appended after its release")  # never written either
        with pytest.raises(SessionTakenOverError):
            await writer.flush(fenced)
        loaded = backend.load_events("fenced", DEFAULT_REGISTRY)
        header = SessionHeader.from_record(loaded.header)
        again = Session.restore(header, loaded.events, decoded=True)
        writer.continues(again)  # resumed: it continues the stored log
        prompt(again, "taken back")
        await writer.flush(again)
        writer.release(again)
    finally:
        await writer.close()
        await task
    records = [e.to_record() for e in backend.load("fenced").events]
    assert records[: len(stored)] == stored
    assert records[len(stored) :] == [e.to_record() for e in again.events][len(stored) :]
    assert backend.leases_taken == 2
    assert not leases.holds("fenced")


async def test_events_a_follower_saw_before_a_failed_sync_are_stored_again_as_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A follower reads what is stored, synced or not; a failed sync takes that back
    # and the retry must store the very same events under the same seqs.
    backend = JsonlBackend(tmp_path)
    bell = Doorbell()
    stored: asyncio.Queue[int] = asyncio.Queue()

    def rang(session: Session, count: int) -> None:
        bell.ring(session.id)
        stored.put_nowait(count)

    writer = WriteBehind(
        backend,
        leases=LeaseBook(backend.acquire_lease),
        window=0.0,
        on_written=rang,
        on_stored=rang,
    )
    task = asyncio.get_running_loop().create_task(writer.run())
    session = Session(SessionHeader(id="seen", created_at=1.0, cwd="/"))
    seen: dict[int, dict[str, object]] = {}
    delivered: list[int] = []
    got: asyncio.Queue[int] = asyncio.Queue()

    async def read() -> None:
        async for batch in follow(backend, bell, "seen", 0, poll=0.05):
            for event in batch:
                delivered.append(event.seq)
                seen[event.seq] = event.to_record()
                got.put_nowait(event.seq)
            if batch[-1].type == "turn/end":
                return

    real_fsync = os.fsync
    try:
        prompt(session, "hello")
        await writer.flush(session)
        await stored.get()
        async with asyncio.timeout(10), asyncio.TaskGroup() as group:
            group.create_task(read())
            while await got.get() < len(session.events) - 1:
                pass
            session.append(
                AssistantMessageEvent(content=(TextBlock("hi"),), finish="stop", interrupted=False)
            )
            writer.notice(session)
            while await got.get() < len(session.events) - 1:
                pass  # the follower delivered the unsynced event

            def failing(fd: int) -> None:
                raise OSError(5, "Input/output error")

            monkeypatch.setattr(os, "fsync", failing)
            session.append(StepEnd(turn=1, step=1))
            with pytest.raises(OSError, match="Input/output"):
                await writer.flush(session)
            monkeypatch.setattr(os, "fsync", real_fsync)
            session.append(TurnEnd(turn=1, reason=Completed()))
            await writer.flush(session)
    finally:
        await writer.close()
        await task
    assert delivered == sorted(set(delivered))  # no seq twice
    log = backend.load("seen")
    assert {e.seq: e.to_record() for e in log.events if e.seq in seen} == seen
    assert delivered[-1] == log.events[-1].seq
