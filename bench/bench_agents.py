"""Agent loop benchmarks on the offline model with JSONL persistence; prints its figures.

Usage: python bench/bench_agents.py [--turns N] [--agents N]

Targets (from the agents contract): turns per second on one agent >= 300
(harness overhead <= 3 ms a turn); cancel() to when_idle() with a stream in
flight <= 5 ms; dispose() of an idle agent <= 10 ms, durable flush included;
memory per idle agent with 1,000 agents <= 50 KB; 100 agents running turns at
once.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from tether.agent import UserMessage
from tether.host import Tether


async def turns_per_second(tether: Tether, turns: int, window: int = 100) -> list[float]:
    """Turns/s of one agent, per window of ``window`` turns, as its conversation grows.

    Every request carries the whole history, so later windows pay for a
    longer conversation (in the request and in the offline model itself).
    """
    handle = await tether.agents.create(cwd="/")
    agent = handle.agent
    agent.followup(UserMessage.text("warm up"))
    await agent.when_idle()
    rates = []
    for first in range(0, turns, window):
        start = time.perf_counter()
        for index in range(first, first + window):
            agent.followup(UserMessage.text(f"prompt {index}"))
            await agent.when_idle()
        rates.append(window / (time.perf_counter() - start))
    await handle.dispose()
    return rates


async def cancel_latency(tether: Tether, samples: int) -> list[float]:
    handle = await tether.agents.create(cwd="/")
    agent = handle.agent
    streaming = asyncio.Event()
    tether.runtime.ctx.on(
        "session/event",
        lambda session, event: (
            streaming.set()
            if session is agent.session and event.type == "assistant/chunk"
            else None
        ),
    )
    latencies = []
    for index in range(samples):
        streaming.clear()
        agent.followup(UserMessage.text(f"long prompt {index} " * 20))
        await streaming.wait()
        start = time.perf_counter()
        agent.cancel()
        await agent.when_idle()
        latencies.append(time.perf_counter() - start)
    await handle.dispose()
    return latencies


async def dispose_latency(tether: Tether, samples: int) -> list[float]:
    latencies = []
    for index in range(samples):
        handle = await tether.agents.create(cwd="/")
        handle.agent.followup(UserMessage.text(f"something to flush {index}"))
        await handle.agent.when_idle()
        start = time.perf_counter()
        await handle.dispose()
        latencies.append(time.perf_counter() - start)
    return latencies


async def memory_per_agent(tether: Tether, count: int) -> float:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    handles = [await tether.agents.create(cwd="/") for _ in range(count)]
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    await asyncio.gather(*(h.dispose() for h in handles))
    return (after - before) / count


async def concurrent_turns(tether: Tether, agents: int, turns: int) -> float:
    handles = [await tether.agents.create(cwd="/") for _ in range(agents)]

    async def drive(index: int) -> None:
        agent = handles[index].agent
        for turn in range(turns):
            agent.followup(UserMessage.text(f"agent {index} turn {turn}"))
            await agent.when_idle()

    start = time.perf_counter()
    await asyncio.gather(*(drive(i) for i in range(agents)))
    elapsed = time.perf_counter() - start
    await asyncio.gather(*(h.dispose() for h in handles))
    return agents * turns / elapsed


def ms(values: list[float]) -> str:
    return (
        f"median {statistics.median(values) * 1000:.2f} ms, "
        f"p90 {sorted(values)[int(len(values) * 0.9)] * 1000:.2f} ms"
    )


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with Tether(data_dir=Path(tmp)) as tether:
            rates = await turns_per_second(tether, args.turns)
            for window, rate in enumerate(rates):
                print(
                    f"one agent, turns {window * 100 + 1}-{window * 100 + 100}: "
                    f"{rate:,.0f} turns/s, {1000 / rate:.2f} ms a turn (target >= 300/s)"
                )
            print(
                f"cancel -> when_idle, stream in flight: {ms(await cancel_latency(tether, 100))}"
                " (target <= 5 ms)"
            )
            disposal = ms(await dispose_latency(tether, 100))
            print(f"dispose of an idle agent, flush included: {disposal} (target <= 10 ms)")
            per_agent = await memory_per_agent(tether, args.agents)
            print(
                f"memory per idle agent ({args.agents:,} agents): {per_agent / 1024:.1f} KiB"
                " (target <= 50 KB)"
            )
            concurrent = await concurrent_turns(tether, 100, 10)
            print(f"100 agents x 10 turns concurrently: {concurrent:,.0f} turns/s in total")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--agents", type=int, default=1000)
    asyncio.run(main(parser.parse_args()))
