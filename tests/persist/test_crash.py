"""A real writer process killed with SIGKILL mid-stream loses nothing it flushed."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tether.content import TextBlock
from tether.persist import jsonl, sqlite
from tether.persist.service import PERSISTENCE
from tether.runtime import Runtime
from tether.session import (
    AssistantChunk,
    Interrupted,
    StepStart,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)
from tether.session.store import SESSIONS
from tether.session.store import apply as store_plugin

WRITER = Path(__file__).with_name("crash_writer.py")


def run_and_kill(kind: str, data_dir: Path, flushes: int) -> int:
    """Start the writer, let it report ``flushes`` flushes, SIGKILL it; return the last count."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
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


@pytest.mark.parametrize("plugin", [jsonl, sqlite], ids=["jsonl", "sqlite"])
async def test_sigkill_mid_stream_keeps_flushed_events_and_repairs(
    plugin: object, tmp_path: Path
) -> None:
    durable = run_and_kill(plugin.__name__.rsplit(".", 1)[-1], tmp_path, flushes=17)

    async with Runtime() as runtime:
        await runtime.ctx.plugin(store_plugin)
        await runtime.ctx.plugin(plugin, {"data_dir": str(tmp_path)})
        persistence = runtime.ctx.get(PERSISTENCE)
        store = runtime.ctx.get(SESSIONS)

        session = await persistence.prepare_resume("crashy")
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
