"""``tether acp`` benchmarks: a real subprocess driven by the SDK's client side; prints its figures.

Usage: python bench/bench_acp.py [--spawns N] [--prompts N] [--cancels N] [--sessions N]
                                 [--backend jsonl|sqlite|postgres]
                                 [--only prompts|cancels|startup|sessions|first-session]
                                 [--prices] [--vs SRC] [--rounds N]

``--only first-session`` spawns ``tether acp`` and a bare agent on the official
SDK (``bench/acp_bare_agent.py``) in turn, ``--spawns`` times each, and prints
for each spawn → ``initialize`` answered and spawn → first ``session/new``
answered (median and range), and the ratio of the medians. ``--only sessions``
prints the time of ``session/new`` requests sent one after the other
(``--sessions`` of them) to one process.

``--only startup`` prints the spawn figures alone; with ``--vs SRC`` (the
``src`` directory of another checkout) its spawns alternate with this
tree's, one each in turn, so both see the same drift of a noisy machine.
``--only prompts --vs SRC`` does the same for the per-prompt latency: one
process of each tree in turn, ``--rounds`` times, each answering
``--prompts`` prompts; it prints each round's figures and, per tree, the
range and the median of the rounds' medians and p95s. ``--only cancels``
(with or without ``--vs``) does the same for ``session/cancel`` → ``cancelled``,
``--cancels`` cancels per process.

The model is an OpenAI-compatible adapter talking to the project's fake
server (``tests/adapters/fake_server.py``) on loopback, in this process.

Targets (from the ACP issue): spawn → ``initialize`` answered <= 400 ms;
spawn → first ``session/new`` answered <= 250 ms and <= 0.55x the bare SDK agent's;
``session/new`` in a row <= 3 ms median;
per-prompt latency in one session <= 3 ms median, <= 15 ms p95 (and, with
``usage_update`` after every answer, <= 1.1x of what it was without; the fake
model reports usage, and ``--prices`` gives it a context window and prices
so that every update carries the session's cost too);
``session/cancel`` → ``cancelled`` <= 2 ms; stdin closed → process exit
<= 150 ms with every session disposed and durable; RSS <= 90 MB with 50 idle
sessions and <= 120 MB after 50 concurrent prompts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from acp.core import connect_to_agent  # noqa: E402
from acp.helpers import text_block  # noqa: E402
from acp.schema import AgentMessageChunk  # noqa: E402
from tests.acp.harness import fake_model_overlay  # noqa: E402
from tests.adapters.fake_server import FakeServer, stream, until_client_leaves  # noqa: E402
from tests.adapters.support import delta, text_answer  # noqa: E402

ANSWER = "A short answer from the fake model, in a few pieces."


class Client:
    """A minimal ACP client: counts updates, notes when a session streams."""

    def __init__(self) -> None:
        self.updates = 0
        self.streaming: dict[str, asyncio.Event] = {}

    async def session_update(self, session_id: str, update: Any, **_meta: Any) -> None:
        self.updates += 1
        if isinstance(update, AgentMessageChunk):
            self.streaming.setdefault(session_id, asyncio.Event()).set()

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the benchmark runs in auto mode")


SQLITE_ROW = "  - id: persistence\n    plugin: tether.persist.sqlite\n"
POSTGRES_ROW = (
    "  - id: persistence\n    plugin: tether.persist.postgres\n"
    "    config: {{url: {url!r}, db_schema: {schema}}}\n"
)
DATABASE_URL = os.environ.get("TETHER_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1/test")
"""The PostgreSQL server of ``--backend postgres`` (each run uses a schema of its own)."""
BACKEND = {"name": "jsonl", "schema": f"bench_acp_{os.getpid()}"}
"""Where sessions are stored (``--backend``)."""
SOURCE: dict[str, str | None] = {"pythonpath": None}
"""The ``PYTHONPATH`` the spawned tether runs from (``None``: this interpreter's own)."""

PRICES_ROWS = """\
  - id: llm
    plugin: tether.llm.service
    config:
      models:
        "openai-compatible:bench":
          context_window: 65536
          prices: {input: 0.27, output: 1.10, cached_input: 0.07}
"""
PRICES = {"on": False}
"""Whether the model has prices in the settings (``--prices``)."""


def overlay(server: FakeServer, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "bench.yml"
    text = fake_model_overlay(server.url, "sk-bench")
    if BACKEND["name"] == "sqlite":
        text = text.rstrip("\n") + "\n" + SQLITE_ROW
    if BACKEND["name"] == "postgres":
        row = POSTGRES_ROW.format(url=DATABASE_URL, schema=BACKEND["schema"])
        text = text.rstrip("\n") + "\n" + row
    if PRICES["on"]:
        text = text.rstrip("\n") + "\n" + PRICES_ROWS
    path.write_text(text)
    return path


BYTECODE = tempfile.mkdtemp(prefix="bench-acp-pycache-")
"""Where the spawned processes keep their compiled modules (``PYTHONPYCACHEPREFIX``).

An installed tether, like the SDK in site-packages, starts from compiled bytecode; a
process started with ``PYTHONDONTWRITEBYTECODE`` from a source tree would compile every
module at every start instead. The spawned processes write their bytecode here, outside
the tree, and the first spawn of each kind (a warm-up, not counted) fills it."""

BARE_AGENT = ROOT / "bench" / "acp_bare_agent.py"
"""The reference agent of ``--only first-session``."""


@asynccontextmanager
async def spawned(
    server: FakeServer, home: Path, *, bare: bool = False
) -> AsyncIterator[tuple[asyncio.subprocess.Process, Any, Client, float]]:
    """A ``tether acp`` process (the bare SDK agent when ``bare``), initialized; yields it
    with the spawn → initialize time."""
    config = overlay(server, home)
    env = {**os.environ, "TETHER_HOME": str(home), "PYTHONPYCACHEPREFIX": BYTECODE}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if SOURCE["pythonpath"] is not None:
        env["PYTHONPATH"] = SOURCE["pythonpath"]
    tether = ["-m", "tether.cli.main", "--config", str(config), "acp"]
    command = [str(BARE_AGENT)] if bare else [*tether, "--model", "openai-compatible:bench"]
    command += [] if bare else ["--mode", "auto"]
    start = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env,
        cwd=str(ROOT),
    )
    assert process.stdin is not None and process.stdout is not None
    client = Client()
    conn = connect_to_agent(client, process.stdin, process.stdout)
    await conn.initialize(protocol_version=1)
    ready = time.perf_counter() - start
    try:
        yield process, conn, client, ready
    finally:
        if process.returncode is None:
            process.stdin.close()
            await process.wait()
        await conn.close()


async def close_and_time(process: asyncio.subprocess.Process) -> float:
    assert process.stdin is not None
    start = time.perf_counter()
    process.stdin.close()
    await process.wait()
    return time.perf_counter() - start


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def balanced(home: Path) -> bool:
    """Every stored session ends with a ``turn/end`` (or has no turn)."""
    for path in (home / "sessions").glob("*.jsonl"):
        records = [json.loads(line) for line in path.read_text().splitlines() if line]
        types = [r.get("type") for r in records[1:]]
        if types.count("turn/start") != types.count("turn/end"):
            return False
        if "turn/start" in types and types[-1] != "turn/end":
            return False
    return True


def p95(seconds: list[float]) -> float:
    ordered = sorted(seconds)
    return ordered[min(len(ordered) - 1, math.ceil(len(ordered) * 0.95) - 1)]


def ms(seconds: list[float]) -> str:
    return (
        f"median {statistics.median(seconds) * 1000:.2f} ms, "
        f"p95 {p95(seconds) * 1000:.2f} ms, min {min(seconds) * 1000:.2f} ms"
    )


async def spawn_to_initialize(server: FakeServer, spawns: int) -> tuple[list[float], list[float]]:
    """Spawn → ``initialize`` answered, and spawn → first ``session/new`` answered."""
    handshakes, sessions = [], []
    for _ in range(spawns):
        with tempfile.TemporaryDirectory() as home:
            start = time.perf_counter()
            async with spawned(server, Path(home)) as (_process, conn, _client, ready):
                handshakes.append(ready)
                await conn.new_session(cwd=home, mcp_servers=[])
                sessions.append(time.perf_counter() - start)
    return handshakes, sessions


async def first_session(server: FakeServer, bare: bool) -> tuple[float, float]:
    """One spawn: spawn → ``initialize`` answered, spawn → first ``session/new`` answered."""
    with tempfile.TemporaryDirectory() as home:
        start = time.perf_counter()
        async with spawned(server, Path(home), bare=bare) as (_process, conn, _client, ready):
            await conn.new_session(cwd=home, mcp_servers=[])
            return ready, time.perf_counter() - start


def spread(seconds: list[float]) -> str:
    return (
        f"median {statistics.median(seconds) * 1000:.1f} ms "
        f"(range {min(seconds) * 1000:.1f}-{max(seconds) * 1000:.1f})"
    )


async def compare_first_session(server: FakeServer, spawns: int) -> None:
    """``tether acp`` against the bare SDK agent, their spawns interleaved."""
    figures: dict[str, tuple[list[float], list[float]]] = {"tether": ([], []), "bare SDK": ([], [])}
    for name in figures:  # the warm-up: compiled bytecode, page cache
        await first_session(server, bare=name == "bare SDK")
    for _ in range(spawns):
        for name in figures:
            ready, session = await first_session(server, bare=name == "bare SDK")
            figures[name][0].append(ready)
            figures[name][1].append(session)
    for name, (handshakes, sessions) in figures.items():
        print(f"{name}: spawn -> initialize answered: {spread(handshakes)}")
        print(f"{name}: spawn -> first session/new answered: {spread(sessions)}")
    ours, bare = (statistics.median(figures[name][1]) for name in figures)
    print(
        f"first session, tether / bare SDK agent (medians, {spawns} spawns each): "
        f"{ours / bare:.2f}x   (targets: <= 250 ms, <= 0.55x)"
    )


async def sessions_in_a_row(server: FakeServer, count: int, home: Path) -> list[float]:
    """``session/new`` answered, one request after the other, in one process."""
    async with spawned(server, home) as (_process, conn, _client, _ready):
        await conn.new_session(cwd=str(home), mcp_servers=[])
        latencies = []
        for _ in range(count):
            start = time.perf_counter()
            await conn.new_session(cwd=str(home), mcp_servers=[])
            latencies.append(time.perf_counter() - start)
        return latencies


async def interpreter_costs(runs: int) -> tuple[list[float], list[float]]:
    """A bare interpreter's start, and the SDK's own import, in fresh processes."""
    code = "import time; t = time.perf_counter(); import acp; print(time.perf_counter() - t)"
    bare, sdk = [], []
    for _ in range(runs):
        start = time.perf_counter()
        process = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
        await process.wait()
        bare.append(time.perf_counter() - start)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await process.communicate()
        sdk.append(float(out))
    return bare, sdk


async def prompt_latency(server: FakeServer, prompts: int, home: Path) -> list[float]:
    async with spawned(server, home) as (_process, conn, _client, _ready):
        sid = (await conn.new_session(cwd=str(home), mcp_servers=[])).session_id
        for _ in range(20):
            server.queue(stream(text_answer(ANSWER)))
            await conn.prompt(session_id=sid, prompt=[text_block("warm up")])
        latencies = []
        for index in range(prompts):
            server.queue(stream(text_answer(ANSWER)))
            start = time.perf_counter()
            await conn.prompt(session_id=sid, prompt=[text_block(f"prompt {index}")])
            latencies.append(time.perf_counter() - start)
        return latencies


async def streaming_prompt(
    server: FakeServer, conn: Any, client: Any, sid: str
) -> asyncio.Future[Any]:
    """A prompt whose answer streams until the client leaves, once its first chunk
    has reached the client; the future is its answer."""
    streaming = client.streaming[sid] = asyncio.Event()
    server.queue(until_client_leaves([delta("thinking")]))
    prompt = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("think long")]))
    await streaming.wait()
    return prompt


async def cancel_latency(server: FakeServer, cancels: int, home: Path) -> list[float]:
    async with spawned(server, home) as (_process, conn, client, _ready):
        sid = (await conn.new_session(cwd=str(home), mcp_servers=[])).session_id
        latencies = []
        for _ in range(cancels):
            prompt = await streaming_prompt(server, conn, client, sid)
            start = time.perf_counter()
            await conn.cancel(session_id=sid)
            answer = await prompt
            latencies.append(time.perf_counter() - start)
            assert answer.stop_reason == "cancelled", answer
        return latencies


async def exit_latency(server: FakeServer, runs: int) -> tuple[list[float], bool]:
    times, durable = [], True
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as directory:
            home = Path(directory)
            async with spawned(server, home) as (process, conn, client, _ready):
                sids = [
                    (await conn.new_session(cwd=str(home), mcp_servers=[])).session_id
                    for _ in range(5)
                ]
                for sid in sids[1:]:
                    server.queue(stream(text_answer(ANSWER)))
                    await conn.prompt(session_id=sid, prompt=[text_block("before")])
                streaming = client.streaming[sids[0]] = asyncio.Event()
                server.queue(until_client_leaves([delta("thinking")]))
                prompt = asyncio.ensure_future(
                    conn.prompt(session_id=sids[0], prompt=[text_block("in flight")])
                )
                await streaming.wait()
                times.append(await close_and_time(process))
                prompt.cancel()
            durable = durable and process.returncode == 0 and balanced(home)
    return times, durable


async def memory(server: FakeServer, sessions: int, home: Path) -> tuple[float, float]:
    async with spawned(server, home) as (process, conn, _client, _ready):
        sids = [
            (await conn.new_session(cwd=str(home), mcp_servers=[])).session_id
            for _ in range(sessions)
        ]
        idle = rss_mb(process.pid)
        for _ in sids:
            server.queue(stream(text_answer(ANSWER)))
        await asyncio.gather(
            *(conn.prompt(session_id=sid, prompt=[text_block("all at once")]) for sid in sids)
        )
        return idle, rss_mb(process.pid)


async def compare_startup(server: FakeServer, spawns: int, other: str) -> None:
    """This tree's spawn figures and ``other``'s, their spawns interleaved."""
    figures: dict[str, tuple[list[float], list[float]]] = {"this tree": ([], []), other: ([], [])}
    for _ in range(spawns):
        for name, pythonpath in (("this tree", None), (other, other)):
            SOURCE["pythonpath"] = pythonpath
            handshakes, sessions = await spawn_to_initialize(server, 1)
            figures[name][0].extend(handshakes)
            figures[name][1].extend(sessions)
    SOURCE["pythonpath"] = None
    for name, (handshakes, sessions) in figures.items():
        print(f"{name}: spawn -> initialize answered: {ms(handshakes)}")
        print(f"{name}: spawn -> first session/new answered: {ms(sessions)}")


async def compare_prompts(server: FakeServer, args: argparse.Namespace, home: Path) -> None:
    """Per-prompt (or, with ``--only cancels``, per-cancel) latency of this tree and of
    ``args.vs``, a process of each in turn."""
    trees: dict[str, str | None] = {"this tree": None, args.vs: args.vs}
    rounds: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    cancels = args.only == "cancels"
    for index in range(args.rounds):
        for name, pythonpath in trees.items():
            SOURCE["pythonpath"] = pythonpath
            where = home / f"{index}-{len(rounds[name])}-{pythonpath is None}"
            if cancels:
                latencies = await cancel_latency(server, args.cancels, where)
            else:
                latencies = await prompt_latency(server, args.prompts, where)
            rounds[name].append((statistics.median(latencies), p95(latencies)))
            print(f"round {index + 1}, {name}: {ms(latencies)}", flush=True)
    SOURCE["pythonpath"] = None
    for name, figures in rounds.items():
        medians = [median for median, _ in figures]
        p95s = [high for _, high in figures]
        print(
            f"{name} ({args.backend}, {args.rounds} rounds of "
            f"{args.cancels if cancels else args.prompts} {args.only}): "
            f"median {min(medians) * 1000:.2f}-{max(medians) * 1000:.2f} ms "
            f"(median of medians {statistics.median(medians) * 1000:.2f}), "
            f"p95 {min(p95s) * 1000:.2f}-{max(p95s) * 1000:.2f} ms "
            f"(median {statistics.median(p95s) * 1000:.2f})"
        )
    ours, theirs = (rounds[name] for name in trees)
    ratios = [a[0] / b[0] for a, b in zip(ours, theirs, strict=True)]
    print(
        f"this tree / {args.vs}, median, round by round: "
        f"{min(ratios):.2f}-{max(ratios):.2f}x (median {statistics.median(ratios):.2f}x)"
    )


async def main(args: argparse.Namespace) -> None:
    BACKEND["name"] = args.backend
    PRICES["on"] = args.prices
    async with FakeServer() as server:
        with tempfile.TemporaryDirectory() as directory:
            home = Path(directory)
            if args.only == "first-session":
                await compare_first_session(server, args.spawns)
                return
            if args.only == "sessions":
                latencies = await sessions_in_a_row(server, args.sessions, home / "sessions")
                print(
                    f"session/new in a row ({args.sessions}, {args.backend}): {ms(latencies)}"
                    "   (target: median <= 3 ms)"
                )
                return
            if args.only == "startup":
                if args.vs is not None:
                    await compare_startup(server, args.spawns, args.vs)
                    return
                handshakes, sessions = await spawn_to_initialize(server, args.spawns)
                print(f"spawn -> initialize answered: {ms(handshakes)}")
                print(f"spawn -> first session/new answered: {ms(sessions)}")
                return
            if args.only in ("prompts", "cancels") and args.vs is not None:
                await compare_prompts(server, args, home)
                return
            if args.only == "cancels":
                cancels = await cancel_latency(server, args.cancels, home / "cancels")
                print(
                    f"session/cancel -> cancelled ({args.cancels}, {args.backend}): {ms(cancels)}"
                )
                return
            if args.only == "prompts":
                prompts = await prompt_latency(server, args.prompts, home / "prompts")
                print(
                    f"per-prompt latency, one session ({args.prompts} prompts, {args.backend}): "
                    f"{ms(prompts)}"
                )
                return
            handshakes, sessions = await spawn_to_initialize(server, args.spawns)
            bare, sdk = await interpreter_costs(args.spawns)
            print(f"spawn -> initialize answered: {ms(handshakes)}   (target <= 400 ms)")
            print(
                f"    for scale: a bare interpreter starts in {ms(bare)}; the SDK's import "
                f"(which tether does not do) takes {ms(sdk)}"
            )
            print(f"spawn -> first session/new answered (tether booted): {ms(sessions)}")
            prompts = await prompt_latency(server, args.prompts, home / "prompts")
            print(f"per-prompt latency, one session ({args.prompts} prompts): {ms(prompts)}")
            print("    (targets: median <= 3 ms, p95 <= 15 ms)")
            cancels = await cancel_latency(server, args.cancels, home / "cancels")
            print(f"session/cancel -> cancelled: {ms(cancels)}   (target <= 2 ms)")
            exits, durable = await exit_latency(server, args.exits)
            print(
                f"stdin closed -> process exit (5 sessions, one mid-prompt): {ms(exits)}; "
                f"exit 0 with every session log balanced on disk: {'yes' if durable else 'NO'}"
                "   (target <= 150 ms)"
            )
            idle, busy = await memory(server, args.sessions, home / "memory")
            print(
                f"RSS with {args.sessions} idle sessions: {idle:.0f} MB (target <= 90 MB); "
                f"after {args.sessions} concurrent prompts: {busy:.0f} MB (target <= 120 MB)"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawns", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--cancels", type=int, default=30)
    parser.add_argument("--exits", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--backend", choices=("jsonl", "sqlite", "postgres"), default="jsonl")
    parser.add_argument(
        "--only",
        choices=("prompts", "cancels", "startup", "sessions", "first-session"),
        default=None,
    )
    parser.add_argument(
        "--vs", default=None, help="with --only startup, prompts or cancels: another tree's src"
    )
    parser.add_argument("--rounds", type=int, default=5, help="with --only prompts|cancels --vs")
    parser.add_argument(
        "--prices", action="store_true", help="give the model a context window and prices"
    )
    asyncio.run(main(parser.parse_args()))
