"""A writer process for the crash test: appends forever, reporting each flush.

Usage: python crash_writer.py {jsonl|sqlite|postgres} DATA_DIR SESSION_ID

(postgres: the database, schema and lease TTL come from ``TETHER_DATABASE_*``.)

Each turn streams chunks; after every flush the process prints
``flushed N`` (N events are durable). It never closes its last turn: the test
kills it with SIGKILL somewhere in the middle.
"""

import asyncio
import sys

from tether.content import TextBlock
from tether.persist import jsonl, postgres, sqlite
from tether.runtime import Runtime
from tether.session import (
    AssistantChunk,
    AssistantMessageEvent,
    Completed,
    StepEnd,
    StepStart,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)
from tether.session.store import SESSIONS
from tether.session.store import apply as store_plugin

CHUNKS_PER_TURN = 40


async def main(kind: str, data_dir: str, session_id: str) -> None:
    plugin = {"jsonl": jsonl, "sqlite": sqlite, "postgres": postgres}[kind]
    async with Runtime() as runtime:
        await runtime.ctx.plugin(store_plugin)
        await runtime.ctx.plugin(plugin, {"data_dir": data_dir, "batch_window_ms": 1})
        store = runtime.ctx.get(SESSIONS)
        session = store.prepare(session_id, cwd="/crash")
        store.enter(session)
        turn = 0
        while True:
            turn += 1
            session.append(TurnStart(turn=turn))
            session.append(StepStart(turn=turn, step=1))
            session.append(
                UserMessageEvent(id=f"u{turn}", source="user", content=(TextBlock(f"q{turn}"),))
            )
            for index in range(CHUNKS_PER_TURN):
                session.append(AssistantChunk(kind="text", delta=f"t{turn}c{index} "))
                if index % 10 == 9:
                    await store.flush(session)
                    print(f"flushed {len(session.events)}", flush=True)
            session.append(
                AssistantMessageEvent(
                    content=(TextBlock(f"answer {turn}"),), finish="stop", interrupted=False
                )
            )
            session.append(StepEnd(turn=turn, step=1))
            session.append(TurnEnd(turn=turn, reason=Completed()))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
