"""ACP ``session/load`` of a long stored session; prints its figures.

Usage: python bench/bench_acp_load.py [--events N] [--runs R] [--backend jsonl|sqlite]

A session of N events (default 100,000: prompts, streamed chunks, answers)
is written to a private TETHER_HOME; then, R times, a fresh ``tether acp`` is
spawned, initialized and booted (a ``session/list`` answered), and the time
from sending ``session/load`` to its answer is measured (spawn and boot
excluded), with every replayed ``session/update`` read off the pipe.
Target: <= 1.0 s for 100,000 events.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sessions import payloads
from tether.persist import jsonl, sqlite
from tether.runtime import Runtime
from tether.session.store import SESSIONS
from tether.session.store import apply as store_plugin

ROOT = Path(__file__).resolve().parents[1]
SESSION_ID = "bench-load"
SQLITE_OVERLAY = "plugins:\n  - id: persistence\n    plugin: tether.persist.sqlite\n"


async def write_session(home: Path, events: int, backend: str) -> None:
    """Store a session of ``events`` events (whole turns) under ``home``."""
    plugin = sqlite if backend == "sqlite" else jsonl
    async with Runtime() as runtime:
        await runtime.ctx.plugin(store_plugin)
        await runtime.ctx.plugin(plugin, {"data_dir": str(home)})
        store = runtime.ctx.get(SESSIONS)
        assert store is not None
        session = store.prepare(SESSION_ID, cwd=str(home))
        store.enter(session)
        items = list(payloads(events))
        while items and items[-1].type != "turn/end":
            items.pop()  # end on a closed turn: a load then writes no repair
        for index, payload in enumerate(items):
            session.append(payload)
            if index % 1024 == 1023:
                await asyncio.sleep(0)
        await store.flush(session)
        store.detach(session)


async def read_until_answer(stdout: asyncio.StreamReader, request_id: int) -> int:
    """Read frames until the answer to ``request_id``; return how many updates came first.

    Updates are counted, not parsed, so the figure is the server's time, not
    this reader's.
    """
    updates = 0
    pending = b""
    while True:
        data = await stdout.read(1 << 20)
        if not data:
            raise RuntimeError("tether acp closed its output before answering")
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            if b'"method":"session/update"' in line:
                updates += 1
                continue
            frame = json.loads(line)
            if frame.get("id") == request_id:
                if "error" in frame:
                    raise RuntimeError(f"the request failed: {frame['error']}")
                return updates


async def one_load(home: Path, config: Path | None) -> tuple[float, int]:
    env = {**os.environ, "TETHER_HOME": str(home)}
    args = [sys.executable, "-m", "tether.cli.main"]
    if config is not None:
        args += ["--config", str(config)]
    process = await asyncio.create_subprocess_exec(
        *args,
        "acp",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env,
        cwd=str(ROOT),
        limit=1 << 24,
    )
    assert process.stdin is not None and process.stdout is not None

    def send(frame: dict[str, object]) -> None:
        assert process.stdin is not None
        process.stdin.write(json.dumps(frame).encode() + b"\n")

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
        # tether boots its plugins after the handshake: session/list waits for that.
        send({"jsonrpc": "2.0", "id": 2, "method": "session/list", "params": {}})
        await process.stdin.drain()
        await read_until_answer(process.stdout, 2)
        params = {"sessionId": SESSION_ID, "cwd": str(home), "mcpServers": []}
        start = time.perf_counter()
        send({"jsonrpc": "2.0", "id": 3, "method": "session/load", "params": params})
        await process.stdin.drain()
        updates = await read_until_answer(process.stdout, 3)
        return time.perf_counter() - start, updates
    finally:
        process.stdin.close()
        await process.wait()


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        config = None
        if args.backend == "sqlite":
            config = home / "sqlite.yml"
            config.write_text(SQLITE_OVERLAY)
        start = time.perf_counter()
        await write_session(home, args.events, args.backend)
        print(
            f"wrote a {args.events}-event session ({args.backend}) in "
            f"{time.perf_counter() - start:.2f} s"
        )
        times: list[float] = []
        for _ in range(args.runs):
            seconds, updates = await one_load(home, config)
            times.append(seconds)
        print(
            f"session/load → answered, spawn and boot excluded ({updates} updates replayed): "
            f"median {statistics.median(times) * 1000:.0f} ms, "
            f"min {min(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms "
            f"over {args.runs} runs (target <= 1000 ms)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--backend", choices=("jsonl", "sqlite"), default="jsonl")
    asyncio.run(main(parser.parse_args()))
