"""Model adapter benchmarks against the local fake server; prints its figures.

Usage: python bench/bench_adapters.py [--requests N] [--chunks N] [--cancels N]

Targets (from the adapters issue): import of the adapter modules under 80 ms
together; cancel to closed connection under 10 ms. Also reported: adapter
overhead per request and per streamed chunk, over a bare httpx client reading
the same stream from the same server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.adapters.fake_server import FakeServer, Recorded, Reply, stream

from tether.content import TextBlock, UserRoleMessage
from tether.llm import service as llm_plugin
from tether.llm.adapters import openai as openai_plugin
from tether.llm.chunks import Finish, TextDelta
from tether.llm.request import ModelRequest
from tether.llm.service import LLM, LlmView
from tether.runtime import CancelSignal, Runtime

MODEL = "openai-compatible:bench"
REQUEST = ModelRequest(model=MODEL, messages=(UserRoleMessage((TextBlock("hi"),)),))

# The baseline is what every running tether imports anyway: the runtime, the
# seam, sessions, the agent loop and the offline model.
_IMPORTS = """
import time
t0 = time.perf_counter()
import tether.llm.service, tether.session, tether.loop.plugin, tether.llm.offline
t1 = time.perf_counter()
import tether.llm.adapters.openai, tether.llm.adapters.anthropic, tether.loop.retry
t2 = time.perf_counter()
import httpx, httpx_sse
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2)
"""


def ms(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p95 = ordered[int(len(ordered) * 0.95) - 1] if len(ordered) >= 20 else ordered[-1]
    return (
        f"median {statistics.median(ordered) * 1000:.2f} ms, "
        f"p95 {p95 * 1000:.2f} ms, max {ordered[-1] * 1000:.2f} ms"
    )


def import_times(runs: int = 11) -> tuple[float, float, float]:
    """Median (tether's core, adapter modules, httpx + httpx_sse) import seconds, each run
    in a fresh interpreter."""
    samples = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", _IMPORTS], capture_output=True, text=True, check=True
        ).stdout
        samples.append(tuple(float(part) for part in out.split()))
    return (
        statistics.median(s[0] for s in samples),
        statistics.median(s[1] for s in samples),
        statistics.median(s[2] for s in samples),
    )


def answer(deltas: int) -> bytes:
    """A whole Chat Completions stream of ``deltas`` text deltas, as one body."""
    frames = [
        {"choices": [{"index": 0, "delta": {"content": f"w{i} "}, "finish_reason": None}]}
        for i in range(deltas)
    ]
    frames.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    frames.append({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": deltas}})
    body = "".join(f"data: {json.dumps(frame)}\n\n" for frame in frames) + "data: [DONE]\n\n"
    return body.encode()


def burst(body: bytes):  # type: ignore[no-untyped-def]
    """A script that sends the whole answer in one write: the server costs next to nothing."""

    async def script(request: Recorded, reply: Reply) -> None:
        await reply.start()
        await reply.raw(body)
        await reply.end()

    return script


async def through_adapter(llm: LlmView, *, guarded: bool = True) -> int:
    """Read one answer through the ``llm`` service (or the adapter alone, unguarded)."""
    chunks = 0
    if guarded:
        source = llm.stream(REQUEST, CancelSignal())
    else:
        source = llm.adapter("openai-compatible").stream(REQUEST, CancelSignal())  # type: ignore[assignment]
    async with contextlib.aclosing(source) as answer_:
        async for chunk in answer_:
            chunks += 1
            last = chunk
    assert last == Finish("stop"), last
    return chunks


async def through_httpx(client: object, url: str) -> int:
    """What a bare client does: POST, read the lines, decode each event's JSON."""
    lines = 0
    async with client.stream(  # type: ignore[attr-defined]
        "POST", url, json={"model": "bench", "stream": True}
    ) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                json.loads(line[6:])
                lines += 1
    return lines


async def per_request(llm: LlmView, server: FakeServer, requests: int) -> tuple[float, float]:
    """Median seconds of a small streamed answer: through the adapter, and bare httpx."""
    import httpx

    small = answer(3)
    adapter, bare = [], []
    async with httpx.AsyncClient() as client:
        for _ in range(requests):
            server.queue(burst(small))
            start = time.perf_counter()
            await through_adapter(llm)
            adapter.append(time.perf_counter() - start)
            server.queue(burst(small))
            start = time.perf_counter()
            await through_httpx(client, f"{server.url}/v1/chat/completions")
            bare.append(time.perf_counter() - start)
    return statistics.median(adapter), statistics.median(bare)


async def per_chunk(llm: LlmView, server: FakeServer, deltas: int) -> tuple[float, float, float]:
    """Seconds per streamed delta of a long answer: through the ``llm`` service, through
    the adapter alone, and bare httpx."""
    import httpx

    body = answer(deltas)
    adapter, alone, bare = [], [], []
    async with httpx.AsyncClient() as client:
        for _ in range(5):
            server.queue(burst(body))
            start = time.perf_counter()
            await through_adapter(llm)
            adapter.append((time.perf_counter() - start) / deltas)
            server.queue(burst(body))
            start = time.perf_counter()
            await through_adapter(llm, guarded=False)
            alone.append((time.perf_counter() - start) / deltas)
            server.queue(burst(body))
            start = time.perf_counter()
            await through_httpx(client, f"{server.url}/v1/chat/completions")
            bare.append((time.perf_counter() - start) / deltas)
    return statistics.median(adapter), statistics.median(alone), statistics.median(bare)


async def cancel_latency(
    llm: LlmView, server: FakeServer, samples: int
) -> tuple[list[float], list[float]]:
    """Seconds from ``signal.cancel()`` to the server seeing the connection closed,
    and to the caller holding ``Finish("aborted")``."""
    to_closed, to_finish = [], []
    first = {"choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]}
    for index in range(samples):
        server.queue(stream([first], hold=asyncio.Event()))
        signal = CancelSignal()
        async with contextlib.aclosing(llm.stream(REQUEST, signal)) as answer_:
            async for chunk in answer_:
                if isinstance(chunk, TextDelta):
                    start = time.perf_counter()
                    signal.cancel("user")
                elif isinstance(chunk, Finish):
                    to_finish.append(time.perf_counter() - start)
        await server.wait_for(lambda s, n=index + 1: len(s.gone_times) >= n)
        to_closed.append(server.gone_times[index] - start)
    return to_closed, to_finish


async def main(args: argparse.Namespace) -> None:
    core, adapters, http = import_times()
    print(
        f"import of the adapter modules (openai, anthropic, retry): {adapters * 1000:.1f} ms; "
        f"httpx + httpx_sse (imported on the first request): {http * 1000:.1f} ms; "
        f"together {(adapters + http) * 1000:.1f} ms (target < 80 ms) "
        f"[over tether's core: {core * 1000:.1f} ms]"
    )
    async with FakeServer() as server, Runtime() as runtime:
        await runtime.ctx.plugin(llm_plugin)
        await runtime.ctx.plugin(
            openai_plugin,
            {"providers": {"openai-compatible": {"base_url": f"{server.url}/v1"}}},
        )
        llm: LlmView = runtime.ctx.get(LLM)
        server.queue(burst(answer(3)))
        await through_adapter(llm)  # warm up: client, connection, imports

        adapter, bare = await per_request(llm, server, args.requests)
        print(
            f"small streamed answer, one request: adapter {adapter * 1000:.2f} ms, "
            f"bare httpx {bare * 1000:.2f} ms, overhead {(adapter - bare) * 1000:.2f} ms a request"
        )
        service, alone, bare = await per_chunk(llm, server, args.chunks)
        print(
            f"long answer ({args.chunks:,} deltas), a chunk: "
            f"through ctx.llm {service * 1e6:.1f} us, the adapter alone {alone * 1e6:.1f} us, "
            f"bare httpx + json {bare * 1e6:.1f} us; "
            f"adapter overhead {(alone - bare) * 1e6:.1f} us a chunk"
        )
        closed, finished = await cancel_latency(llm, server, args.cancels)
        print(f"cancel -> server sees the connection closed: {ms(closed)} (target < 10 ms)")
        print(f"cancel -> caller holds Finish('aborted'): {ms(finished)}")
        await server.all_closed()
        print(
            f"connections: {server.opened} opened, {server.closed} closed "
            f"after {args.cancels} cancels"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--cancels", type=int, default=200)
    asyncio.run(main(parser.parse_args()))
