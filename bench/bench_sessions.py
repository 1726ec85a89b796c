"""Session log and persistence benchmarks; prints its figures.

Usage: python bench/bench_sessions.py [--events N] [--repeat N] [--loads N]
                                      [--only memory,durable,write,load,follow]
                                      [--backend jsonl|sqlite]

Each figure is printed as the median of its runs with their range. The
machine's noise is best seen by running this script alternately against two
checkouts (``PYTHONPATH=<checkout>/src``): the API it uses is the same.

Figures (targets from the sessions contract):
- in-memory append rate, one observer attached (target >= 100,000 events/s);
- durable JSONL and SQLite throughput with the default batching, end to end
  from the first append to the flush (target >= 150,000 events/s);
- the write path alone (events -> records -> backend, one fsync per batch of
  256) next to a bare loop turning the same events into JSON lines and
  writing them with one fsync per batch (target: within 1.2x of it);
- load + derive_messages of a 100,000-event session (target <= 150 ms),
  through the persistence service, ``--loads`` times per durable run;
- bytes on disk per 1,000 events;
- following a stored session as another process does (``events_after``, what
  ``tether sessions tail`` and the web app read at each poll): a read of an
  idle session, and of one new batch of 10 events, next to a whole load.
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


async def bench_durable(
    plugin: object, data_dir: Path, count: int, loads: int = 1
) -> tuple[float, float, int, list[float], list[float]]:
    """Append ``count`` events through the store, yielding to the loop every 64, then flush.

    Returns events/s from the first append to the end of the flush (by the
    wall clock, then per second of the process's CPU time), the number of
    batches the writer made, and the wall and CPU times of each of
    ``loads`` loads + derives of the session written. On a loaded machine
    the CPU figures are the ones that still compare across runs.
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
        start, cpu_start = time.perf_counter(), time.process_time()
        for index, payload in enumerate(items):
            session.append(payload)
            if index % 64 == 63:
                await asyncio.sleep(0)
        await store.flush(session)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        store.detach(session)

        persistence = runtime.ctx.get(PERSISTENCE)
        load_seconds, load_cpu = [], []
        for _ in range(loads):
            start, cpu_start = time.perf_counter(), time.process_time()
            loaded = await persistence.load("bench")
            derive_messages(loaded)
            load_seconds.append(time.perf_counter() - start)
            load_cpu.append(time.process_time() - cpu_start)
            assert len(loaded.events) >= count  # the open last turn gets repaired
            del loaded
    return count / elapsed, count / cpu, batches, load_seconds, load_cpu


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


def bench_follow(
    backend_class: type, data_dir: Path, session: Session, polls: int = 50
) -> tuple[list[float], list[float], list[float]]:
    """Seconds per ``events_after`` of a follower (its own backend object, as another
    process has): on an idle session, after a batch of 10 new events; and per whole load."""
    writer, follower = backend_class(data_dir), backend_class(data_dir)
    header = session.header.to_record()
    stored = list(session.events)
    for offset in range(0, len(stored), WRITE_BATCH):
        writer.write(header, [e.to_stored_record() for e in stored[offset : offset + WRITE_BATCH]])
    last = len(follower.events_after(header["id"], -1)) - 1
    more = Session.restore(session.header, stored)
    idle, grown, whole = [], [], []
    for _ in range(polls):
        start = time.perf_counter()
        assert follower.events_after(header["id"], last) == []
        idle.append(time.perf_counter() - start)
        batch = [more.append(AssistantChunk(kind="text", delta="x")) for _ in range(10)]
        writer.write(header, [event.to_stored_record() for event in batch])
        start = time.perf_counter()
        found = follower.events_after(header["id"], last)
        grown.append(time.perf_counter() - start)
        assert len(found) == 10
        last = found[-1].seq
    for _ in range(3):
        start = time.perf_counter()
        follower.load(header["id"])
        whole.append(time.perf_counter() - start)
    writer.close()
    follower.close()
    return idle, grown, whole


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


def spread(values: list[float], scale: float = 1.0, digits: int = 0) -> str:
    """``median (min to max)`` of ``values`` times ``scale``."""
    low, mid, high = (v * scale for v in (min(values), statistics.median(values), max(values)))
    return f"{mid:,.{digits}f} ({low:,.{digits}f} to {high:,.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--loads", type=int, default=3, help="loads timed per durable run")
    parser.add_argument(
        "--only",
        default="memory,durable,write,load,follow",
        help="comma-separated figures to measure (durable and load share their runs)",
    )
    parser.add_argument("--backend", choices=("jsonl", "sqlite"), action="append")
    args = parser.parse_args()
    count = args.events
    only = set(args.only.split(","))
    unknown = only - {"memory", "durable", "write", "load", "follow"}
    if unknown:
        parser.error(f"unknown figures in --only: {', '.join(sorted(unknown))}")

    if "memory" in only:
        rates = [bench_memory(count) for _ in range(args.repeat)]
        print(f"in-memory append: {spread(rates)} events/s (target >= 100,000)")

    session = Session(SessionHeader(id="bare", created_at=time.time(), cwd="/"))
    for payload in payloads(count):
        session.append(payload)
    backends = {"jsonl": (jsonl, JsonlBackend), "sqlite": (sqlite, SqliteBackend)}
    for name in args.backend or sorted(backends):
        plugin, backend_class = backends[name]
        if only & {"durable", "load"}:
            rates, cpu_rates, batches, loads, loads_cpu, sizes = [], [], [], [], [], []
            for _ in range(args.repeat):
                with tempfile.TemporaryDirectory() as tmp:
                    rate, cpu_rate, made, wall, cpu = asyncio.run(
                        bench_durable(plugin, Path(tmp), count, args.loads if "load" in only else 0)
                    )
                    sizes.append(disk_bytes(Path(tmp)))
                rates.append(rate)
                cpu_rates.append(cpu_rate)
                batches.append(made)
                loads += wall
                loads_cpu += cpu
            if "durable" in only:
                print(
                    f"{name}: durable {spread(rates)} events/s end to end, appends included, "
                    f"in {statistics.median(batches):.0f} batches (target >= 150,000); "
                    f"per CPU second {spread(cpu_rates)}"
                )
            if "load" in only:
                print(
                    f"{name}: load + derive of {count:,} events {spread(loads, 1000)} ms "
                    f"over {len(loads)} loads (target <= 150 ms), CPU time "
                    f"{spread(loads_cpu, 1000)} ms; "
                    f"{statistics.median(sizes) / count * 1000 / 1024:.1f} KiB on disk "
                    "per 1,000 events"
                )
        if "follow" in only:
            with tempfile.TemporaryDirectory() as tmp:
                idle, grown, whole = bench_follow(backend_class, Path(tmp), session)
            print(
                f"{name}: following {count:,} stored events: an idle poll {spread(idle, 1e6)} µs, "
                f"a poll finding 10 new events {spread(grown, 1e6)} µs; "
                f"a whole load {spread(whole, 1000, 1)} ms"
            )
        if "write" in only:
            ratios = []
            for _ in range(args.repeat):
                with tempfile.TemporaryDirectory() as tmp:
                    ours = bench_write_path(backend_class, Path(tmp), session, WRITE_BATCH)
                    bare = bench_bare(Path(tmp) / "bare.jsonl", session, WRITE_BATCH)
                # Rates: bare / ours is our time over the bare loop's.
                ratios.append(bare / ours)
            print(
                f"{name}: the write path takes {spread(ratios, digits=2)}x the time of a bare "
                f"JSON-lines loop, batches of {WRITE_BATCH} with one fsync each (target <= 1.2x)"
            )


if __name__ == "__main__":
    main()
