"""A real writer process killed with SIGKILL mid-stream loses nothing it flushed."""

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import postgres as pg
from tether.content import TextBlock
from tether.persist import jsonl, postgres, sqlite
from tether.persist.backends.lease import SessionLeasedError
from tether.persist.service import PERSISTENCE, Persistence
from tether.runtime import Runtime
from tether.session import (
    AssistantChunk,
    Interrupted,
    StepStart,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)
from tether.session.log import Session
from tether.session.store import SESSIONS
from tether.session.store import apply as store_plugin

WRITER = Path(__file__).with_name("crash_writer.py")


async def resume_once_free(persistence: Persistence, session_id: str) -> Session:
    """Resume ``session_id`` once the dead writer's lease lets go (at once, but for a
    lease that expires: PostgreSQL's, whose short TTL the test set)."""
    deadline = time.monotonic() + 2.0
    while True:
        try:
            return await persistence.prepare_resume(session_id)
        except SessionLeasedError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


def run_and_kill(
    kind: str, data_dir: Path, flushes: int, extra_env: dict[str, str] | None = None
) -> int:
    """Start the writer, let it report ``flushes`` flushes, SIGKILL it; return the last count."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(extra_env or {})}
    process = subprocess.Popen(
        [sys.executable, str(WRITER), kind, str(data_dir), "crashy"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    durable = 0
    try:
        for _ in range(flushes):
            line = process.stdout.readline()
            assert line.startswith("flushed "), (line, process.stderr and process.stderr.read())
            durable = int(line.split()[1])
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    assert process.returncode == -signal.SIGKILL
    return durable


@pytest.mark.parametrize("plugin", [jsonl, sqlite, postgres], ids=["jsonl", "sqlite", "postgres"])
async def test_sigkill_mid_stream_keeps_flushed_events_and_repairs(
    plugin: object, tmp_path: Path
) -> None:
    config: dict[str, object] = {"data_dir": str(tmp_path)}
    extra_env: dict[str, str] = {}
    if plugin is postgres:
        schema = pg.new_schema()
        config.update(url=pg.URL, db_schema=schema)
        # The dead writer's lease is taken over once its TTL has passed.
        extra_env = {
            "TETHER_DATABASE_URL": pg.URL,
            "TETHER_DATABASE_SCHEMA": schema,
            "TETHER_LEASE_TTL": "0.3",
        }
    kind = plugin.__name__.rsplit(".", 1)[-1]  # type: ignore[attr-defined]
    durable = run_and_kill(kind, tmp_path, flushes=17, extra_env=extra_env)

    async with Runtime() as runtime:
        await runtime.ctx.plugin(store_plugin)
        await runtime.ctx.plugin(plugin, config)
        persistence = runtime.ctx.get(PERSISTENCE)
        store = runtime.ctx.get(SESSIONS)

        session = await resume_once_free(persistence, "crashy")
        events = list(session.events)
        assert len(events) >= durable
        # Every flushed event is there, exactly as written.
        chunks = [e.payload for e in events if isinstance(e.payload, AssistantChunk)]
        turns = [e.payload.turn for e in events if isinstance(e.payload, TurnStart)]
        assert turns == list(range(1, len(turns) + 1))
        expected = [f"t{turn}c{index} " for turn in turns for index in range(40)]
        assert [c.delta for c in chunks] == expected[: len(chunks)]
        # The open turn was closed by repair.
        last = events[-1].payload
        assert isinstance(last, TurnEnd) and isinstance(last.reason, Interrupted)
        assert session.open_turn is None

        store.enter(session)
        next_turn = session.last_turn + 1
        first_new = session.append(TurnStart(turn=next_turn))
        session.append(StepStart(turn=next_turn, step=1))
        session.append(UserMessageEvent(id="after", source="user", content=(TextBlock("resumed"),)))
        await store.flush(session)
        assert first_new.seq == len(events)
        assert next_turn == turns[-1] + 1
        store.detach(session)
        reloaded = await persistence.load("crashy")
        assert len(reloaded.events) == len(events) + 3 + 2  # + repair of the new open turn


async def test_a_follower_of_a_killed_writer_showed_only_what_its_log_holds(
    tmp_path: Path,
) -> None:
    # Most batches are stored unsynced and rung to followers at once: what a
    # follower in another process showed before the SIGKILL is what the log holds.
    from tether.persist.backends import JsonlBackend
    from tether.persist.follow import Doorbell, follow

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(WRITER),
        "jsonl",
        str(tmp_path),
        "crashy",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    assert process.stdout is not None
    reader = JsonlBackend(tmp_path)
    shown: dict[int, dict[str, object]] = {}
    counts: asyncio.Queue[int] = asyncio.Queue()

    async def tail() -> None:
        async for batch in follow(reader, Doorbell(), "crashy", -1, poll=0.002):
            for event in batch:
                assert event.seq not in shown
                shown[event.seq] = event.to_record()
            counts.put_nowait(len(shown))

    async def shown_at_least(count: int) -> None:
        while len(shown) < count:
            await counts.get()

    try:
        async with asyncio.timeout(20):
            line = await process.stdout.readline()
            assert line.startswith(b"flushed "), line  # the log exists
            following = asyncio.get_running_loop().create_task(tail())
            for _ in range(23):
                line = await process.stdout.readline()
                assert line.startswith(b"flushed "), line
            # Killed once the follower showed more than was acknowledged.
            await shown_at_least(int(line.split()[1]) + 1)
            process.send_signal(signal.SIGKILL)
            await process.wait()
            await shown_at_least(reader.next_seq("crashy"))
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    loaded = reader.load("crashy")
    held = {event.seq: event.to_record() for event in loaded.events}
    assert sorted(shown) == list(range(len(shown)))
    assert {seq: held.get(seq) for seq in shown} == shown
