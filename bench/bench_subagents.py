"""Delegation benchmarks, in process with a scripted model and JSONL persistence; prints figures.

Usage: python bench/bench_subagents.py [--samples N] [--rounds N] [--children N]

Targets (from the delegation contract):

* **spawn**: a child's spawn — from the parent's model finishing the ``task``
  call to the child's first model request reaching the model — costs at
  most 5 ms more than a bare ``agents.create`` + ``followup`` to its first
  request (medians);
* **cancel**: ``cancel()`` of a parent whose turn waits on 8 running
  children, each holding a model stream, to ``when_idle()`` of the parent
  (every child at rest, flushed and disposed by then): at most 10 ms —
  measured *at once* (the cancel right after the last child's stream holds:
  the cascade also creates the children's log files) and with the *logs on
  disk* (children that have run a while). Each child's closing ``turn/end``
  is made durable before the parent's, so this figure is mostly fsyncs:
  ``--data-dir /dev/shm`` shows what tether itself costs;
* **memory**: 100 background children of one parent, each holding a model
  stream, take at most 5 MB (tracemalloc, and the RSS delta beside it),
  against 100 bare agents doing the same.

The model answers by the last message of each request: ``delegate N`` (or
``delegate N bg``) makes N ``task`` calls at once, ``hold`` streams a word
and waits for the turn's cancel, ``quick`` answers at once, a tool result
gets ``done``. No network is used.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.agent.world import World, build_world

from tether.agent import Agent, UserMessage
from tether.content import TextBlock, ToolMessage, UserRoleMessage
from tether.llm.chunks import Finish, StreamChunk, TextDelta, ToolCallDelta
from tether.llm.request import ModelRequest
from tether.runtime import CancelSignal, Context
from tether.runtime.compose import PluginRow


@dataclass
class BenchModel:
    """The ``bench`` provider: answers by the last message (see the module docs)."""

    delegated_at: list[float] = field(default_factory=list)
    """When the parent's answer making ``task`` calls was complete (perf_counter)."""
    arrived: list[float] = field(default_factory=list)
    """When each ``quick`` or ``hold`` request reached the model (perf_counter)."""
    holding: int = 0
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    want: int = 0
    """``reached`` is set once this many requests are holding."""

    @property
    def name(self) -> str:
        return "bench"

    async def stream(
        self, request: ModelRequest, signal: CancelSignal
    ) -> AsyncIterator[StreamChunk]:
        last = request.messages[-1]
        if isinstance(last, ToolMessage):
            yield TextDelta("done")
            yield Finish("stop")
            return
        text = (
            "".join(b.text for b in last.content if isinstance(b, TextBlock))
            if isinstance(last, UserRoleMessage)
            else ""
        )
        if text.startswith("delegate"):
            words = text.split()
            count, background = int(words[1]), "bg" in words
            prompt = "hold" if words[-1] in ("hold", "bg") else "quick"
            for index in range(count):
                arguments = {"description": f"job {index}", "prompt": prompt}
                if background:
                    arguments["run_in_background"] = True  # type: ignore[assignment]
                yield ToolCallDelta(
                    index=index, id=f"t{index}", name="task", args_delta=json.dumps(arguments)
                )
            self.delegated_at.append(time.perf_counter())
            yield Finish("tool-calls")
            return
        self.arrived.append(time.perf_counter())
        if text == "hold":
            yield TextDelta("working")
            self.holding += 1
            if self.holding >= self.want:
                self.reached.set()
            try:
                await signal.wait()
            finally:
                self.holding -= 1
            return
        yield TextDelta("ok")
        yield Finish("stop")


async def bench_world(data_dir: Path, model: BenchModel, **limits: int) -> World:
    world = await build_world(data_dir, loop_config={"model": "bench"})

    async def provider(ctx: Context, config: None) -> None:
        await ctx.llm.register("bench", model)

    provider.inject = ("llm",)  # type: ignore[attr-defined]
    await world.ctx.plugin(provider)
    row = PluginRow(id="tool_subagent", plugin="tether.plugins.tool_subagent", config=limits)
    report = await world.composer.apply([row])
    assert report.ok, report.problems
    return world


async def spawn(world: World, model: BenchModel, samples: int) -> tuple[list[float], list[float]]:
    """Seconds per bare create-to-first-request, and per child spawn, interleaved."""
    agents = world.get("agents")
    bare: list[float] = []
    child: list[float] = []
    parent = await agents.create(cwd="/")
    for _sample in range(samples):
        start = time.perf_counter()
        handle = await agents.create(cwd="/")
        handle.agent.followup(UserMessage.text("quick"))
        await handle.agent.when_idle()
        bare.append(model.arrived[-1] - start)
        await handle.dispose()

        parent.agent.followup(UserMessage.text("delegate 1"))
        await parent.agent.when_idle()
        child.append(model.arrived[-1] - model.delegated_at[-1])
    await parent.dispose()
    return bare, child


async def cancel(
    world: World, model: BenchModel, children: int, rounds: int, *, stored: bool
) -> list[float]:
    """Seconds from ``cancel()`` of a parent whose ``children`` hold streams to its idle.

    With ``stored``, the cancel waits until every log is on disk, as for
    children that have run a while; without, it comes as soon as the last
    child's stream holds, so the cascade also creates the children's files.
    """
    agents = world.get("agents")
    latencies = []
    for _round in range(rounds):
        handle = await agents.create(cwd="/")
        model.holding, model.want = 0, children
        model.reached.clear()
        handle.agent.followup(UserMessage.text(f"delegate {children} hold"))
        await asyncio.wait_for(model.reached.wait(), 30)
        if stored:
            for agent in agents.list():
                await world.get("sessions").flush(agent.session)
        start = time.perf_counter()
        handle.agent.cancel()
        await handle.agent.when_idle()
        latencies.append(time.perf_counter() - start)
        left = [a for a in agents.list() if a.session.header.meta.get("parent") == handle.agent.id]
        assert not left, f"{len(left)} children still registered after the cancel"
        await handle.dispose()
    return latencies


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


async def holding(
    world: World, model: BenchModel, count: int, *, children: bool
) -> tuple[int, int]:
    """Bytes (tracemalloc, RSS) taken by ``count`` agents holding a stream: background
    children of one parent, or bare agents."""
    agents = world.get("agents")
    parent = await agents.create(cwd="/")
    model.holding, model.want = 0, count
    model.reached.clear()
    gc.collect()
    tracemalloc.start()
    before, rss_before = tracemalloc.get_traced_memory()[0], rss()
    handles = []
    if children:
        parent.agent.followup(UserMessage.text(f"delegate {count} bg"))
    else:
        for _index in range(count):
            handle = await agents.create(cwd="/")
            handle.agent.followup(UserMessage.text("hold"))
            handles.append(handle)
    await asyncio.wait_for(model.reached.wait(), 60)
    await parent.agent.when_idle()
    gc.collect()
    after, rss_after = tracemalloc.get_traced_memory()[0], rss()
    tracemalloc.stop()
    live: list[Agent] = agents.list()
    expected = count + 1
    assert len(live) == expected, f"{len(live)} agents live, expected {expected}"
    for handle in handles:
        await handle.dispose()
    await parent.dispose()
    return after - before, rss_after - rss_before


def ms(values: list[float]) -> str:
    ordered = sorted(values)
    return (
        f"median {statistics.median(ordered) * 1000:.2f} ms "
        f"(p10 {ordered[len(ordered) // 10] * 1000:.2f}, "
        f"p90 {ordered[len(ordered) * 9 // 10] * 1000:.2f}, n={len(ordered)})"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100, help="spawns of each kind")
    parser.add_argument("--rounds", type=int, default=30, help="cancels of an 8-child parent")
    parser.add_argument("--children", type=int, default=100, help="children held in memory")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="where the logs go (default: a temp dir)"
    )
    args = parser.parse_args()
    model = BenchModel()
    limits = {"max_children": args.children + 8, "max_agents": 2 * args.children + 16}
    with tempfile.TemporaryDirectory(dir=args.data_dir) as tmp:
        world = await bench_world(Path(tmp), model, **limits)
        try:
            await spawn(world, model, 5)  # warm up
            bare, child = await spawn(world, model, args.samples)
            overhead = statistics.median(child) - statistics.median(bare)
            print(f"bare create + first request:  {ms(bare)}")
            print(f"child spawn + first request:  {ms(child)}")
            print(f"spawn overhead (medians):     {overhead * 1000:.2f} ms (target <= 5 ms)")
            for stored, when in ((False, "at once"), (True, "logs on disk")):
                latencies = await cancel(world, model, 8, args.rounds, stored=stored)
                print(
                    f"cancel of a parent with 8 running children -> all idle ({when}): "
                    f"{ms(latencies)} (target <= 10 ms)"
                )
            # Bare agents first: the arenas they leave behind are reused by the
            # children, so the RSS figure does not favour the children.
            bare_mem, bare_rss = await holding(world, model, args.children, children=False)
            kids, kids_rss = await holding(world, model, args.children, children=True)
            n = args.children
            print(
                f"{n} background children holding a stream: {kids / 1e6:.2f} MB traced "
                f"({kids / n / 1e3:.1f} KB each), RSS +{kids_rss / 1e6:.2f} MB (target <= 5 MB)"
            )
            print(
                f"{n} bare agents holding a stream:         {bare_mem / 1e6:.2f} MB traced "
                f"({bare_mem / n / 1e3:.1f} KB each), RSS +{bare_rss / 1e6:.2f} MB"
            )
        finally:
            await world.runtime.dispose()


if __name__ == "__main__":
    asyncio.run(main())
