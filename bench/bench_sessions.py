"""Session log and persistence benchmarks; prints its figures.

Usage: python bench/bench_sessions.py [--events N]

Figures (targets from the sessions contract):
- in-memory append rate, one observer attached (target >= 100,000 events/s);
- durable JSONL and SQLite throughput with the default batching, end to end
  from the first append to the flush (target >= 150,000 events/s);
- the write path alone (events -> records -> backend, one fsync per batch of
  256) next to a bare loop turning the same events into JSON lines and
  writing them with one fsync per batch (target: within 1.2x of it);
- load + derive_messages of a 100,000-event session (target <= 150 ms);
- bytes on disk per 1,000 events.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tether.content import TextBlock
from tether.persist import jsonl, sqlite
from tether.persist.backends.jsonl import JsonlBackend
from tether.persist.backends.sqlite import SqliteBackend
from tether.persist.service import PERSISTENCE, SESSION_WRITTEN
from tether.runtime import Runtime
from tether.session import (
    AssistantChunk,
    AssistantMessageEvent,
    Completed,
    EventPayload,
    StepEnd,
    StepStart,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
    derive_messages,
)
from tether.session.log import Session, SessionHeader
from tether.session.store import SESSIONS
from tether.session.store import apply as store_plugin

CHUNKS_PER_TURN = 40
WRITE_BATCH = 256


def payloads(count: int) -> Iterator[EventPayload]:
    """A realistic mix: each turn is a prompt, streamed chunks, an answer."""
    produced = 0
    turn = 0
    while True:
        turn += 1
        batch: list[EventPayload] = [
            TurnStart(turn=turn),
            StepStart(turn=turn, step=1),
            UserMessageEvent(
                id=f"u{turn}", source="user", content=(TextBlock(f"question {turn}"),)
            ),
        ]
        batch += [AssistantChunk(kind="text", delta=f"word{i} ") for i in range(CHUNKS_PER_TURN)]
        batch += [
            AssistantMessageEvent(
                content=(TextBlock("answer " * 10),), finish="stop", interrupted=False
            ),
            StepEnd(turn=turn, step=1),
            TurnEnd(turn=turn, reason=Completed()),
        ]
        for payload in batch:
            if produced == count:
                return
            produced += 1
            yield payload


def bench_memory(count: int) -> float:
    items = list(payloads(count))
    session = Session(SessionHeader(id="mem", created_at=time.time(), cwd="/"))
    seen = 0

    def observer(_session: Session, _event: object) -> None:
        nonlocal seen
        seen += 1

    session.observe(observer)
    start = time.perf_counter()
    for payload in items:
        session.append(payload)
    elapsed = time.perf_counter() - start
    assert seen == count
    return count / elapsed


async def bench_durable(plugin: object, data_dir: Path, count: int) -> tuple[float, int, float]:
    """Append ``count`` events through the store, yielding to the loop every 64, then flush.

    Returns events/s from the first append to the end of the flush, the
    number of batches the writer made, and the load + derive time.
    """
    items = list(payloads(count))
    batches = 0
    async with Runtime() as runtime:
        await runtime.ctx.plugin(store_plugin)
        await runtime.ctx.plugin(plugin, {"data_dir": str(data_dir)})

        def on_written(_session: object, _durable: int) -> None:
            nonlocal batches
            batches += 1

        runtime.ctx.on(SESSION_WRITTEN, on_written)
        store = runtime.ctx.get(SESSIONS)
        session = store.prepare("bench", cwd="/")
        store.enter(session)
        start = time.perf_counter()
        for index, payload in enumerate(items):
            session.append(payload)
            if index % 64 == 63:
                await asyncio.sleep(0)
        await store.flush(session)
        elapsed = time.perf_counter() - start
        store.detach(session)

        persistence = runtime.ctx.get(PERSISTENCE)
        start = time.perf_counter()
        loaded = await persistence.load("bench")
        derive_messages(loaded)
        load_seconds = time.perf_counter() - start
        assert len(loaded.events) >= count  # the open last turn gets repaired
    return count / elapsed, batches, load_seconds


def bench_write_path(backend_class: type, data_dir: Path, session: Session, batch: int) -> float:
    """tether's write path alone: events -> records -> backend.write, one fsync per batch."""
    backend = backend_class(data_dir)
    header = session.header.to_record()
    events = list(session.events)
    start = time.perf_counter()
    for offset in range(0, len(events), batch):
        backend.write(
            header, [event.to_stored_record() for event in events[offset : offset + batch]]
        )
    elapsed = time.perf_counter() - start
    backend.close()
    return len(events) / elapsed


def bench_bare(path: Path, session: Session, batch: int) -> float:
    """A bare loop: the same events to JSON lines, one write + fsync per batch."""
    events = list(session.events)
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for offset in range(0, len(events), batch):
            lines = b"".join(
                json.dumps(event.to_record(), separators=(",", ":")).encode() + b"\n"
                for event in events[offset : offset + batch]
            )
            os.write(fd, lines)
            os.fsync(fd)
    finally:
        os.close(fd)
    return len(events) / (time.perf_counter() - start)


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    count = args.events

    rates = [bench_memory(count) for _ in range(args.repeat)]
    print(f"in-memory append: {statistics.median(rates):,.0f} events/s (target >= 100,000)")

    session = Session(SessionHeader(id="bare", created_at=time.time(), cwd="/"))
    for payload in payloads(count):
        session.append(payload)
    backends = {"jsonl": (jsonl, JsonlBackend), "sqlite": (sqlite, SqliteBackend)}
    for name, (plugin, backend_class) in backends.items():
        results = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                rate, batches, load_s = asyncio.run(bench_durable(plugin, Path(tmp), count))
                size = disk_bytes(Path(tmp))
            with tempfile.TemporaryDirectory() as tmp:
                ours = bench_write_path(backend_class, Path(tmp), session, WRITE_BATCH)
                bare = bench_bare(Path(tmp) / "bare.jsonl", session, WRITE_BATCH)
            results.append((rate, batches, load_s, size, ours, bare))
        rate, batches, load_s, size, ours, bare = (
            statistics.median(r[i] for r in results) for i in range(6)
        )
        print(
            f"{name}: durable {rate:,.0f} events/s end to end, appends included, "
            f"in {batches:.0f} batches (target >= 150,000)"
        )
        print(
            f"{name}: write path {ours:,.0f} events/s vs a bare JSON-lines loop "
            f"{bare:,.0f} events/s, batches of {WRITE_BATCH} with one fsync each: "
            f"{bare / ours:.2f}x (target <= 1.2x)"
        )
        print(
            f"{name}: load + derive of {count:,} events {load_s * 1000:.0f} ms "
            "(target <= 150 ms); "
            f"{size / count * 1000 / 1024:.1f} KiB on disk per 1,000 events"
        )


if __name__ == "__main__":
    main()
