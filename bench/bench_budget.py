"""What a spend budget costs a model request: the reservation, flushed before it is sent.

Usage: python bench/bench_budget.py [--turns N] [--runs N]

Each run composes tether in process (JSONL sessions on disk, a scripted model
that answers at once with usage figures) and times ``--turns`` one-request
turns of a session, from the prompt to the turn's end: once without a budget,
once with a token budget that never runs out (and, with ``--day``, a per-day
limit too, whose ledger file is locked and synced for each request). Runs
alternate (without, with, without, …) so the machine's drift falls on both;
the figures are the per-request difference of each pair, as a range over the
runs. What it measures is mostly one extra durable write (an fsync of the
session's log, and of the day's ledger) before each request.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.agent.world import build_world

from tether.agent import AgentOptions, UserMessage
from tether.llm.chunks import Finish, StreamChunk, TextDelta, Usage
from tether.llm.request import ModelRequest
from tether.runtime import CancelSignal
from tether.session.budget import Budget


async def answer(request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamChunk]:
    yield TextDelta("done")
    yield Usage(input_tokens=100, output_tokens=5)
    yield Finish("stop")


async def per_request(turns: int, budget: Budget | None) -> float:
    """Seconds a one-request turn takes, on average over ``turns``."""
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        config = {"budget_dir": str(root / "budget")}
        world = await build_world(root, loop_config=config)
        try:
            options = AgentOptions(model="scripted", system=".", tools=(), budget=budget)
            agent = (await world.get("agents").create(cwd=directory, options=options)).agent
            world.model.queue(*[answer] * (turns + 1))
            agent.followup(UserMessage.text("warm up"))
            await agent.when_idle()
            start = time.perf_counter()
            for n in range(turns):
                agent.followup(UserMessage.text(f"prompt {n}"))
                await agent.when_idle()
            return (time.perf_counter() - start) / turns
        finally:
            await world.runtime.dispose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--day", action="store_true", help="add a per-day limit")
    args = parser.parse_args()
    budget = Budget(tokens=10**12, day_tokens=10**12 if args.day else None)
    without: list[float] = []
    with_budget: list[float] = []
    for _ in range(args.runs):
        without.append(await per_request(args.turns, None))
        with_budget.append(await per_request(args.turns, budget))
    extra = [(b - a) * 1000 for a, b in zip(without, with_budget, strict=True)]
    ms = [value * 1000 for value in without]
    print(f"{args.runs} runs of {args.turns} one-request turns (interleaved)")
    print(f"  without a budget: {min(ms):.2f}-{max(ms):.2f} ms a request")
    print(
        f"  the budget adds:  {min(extra):.2f}-{max(extra):.2f} ms a request "
        f"(median {statistics.median(extra):.2f})"
    )


if __name__ == "__main__":
    asyncio.run(main())
