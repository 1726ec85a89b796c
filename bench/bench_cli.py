"""``tether run`` from spawn to answer, and its peak memory; prints its figures.

Usage: python bench/bench_cli.py [--runs N]

Targets (from the command-line contract): spawn -> answer printed <= 300 ms,
peak RSS <= 90 MB, for the offline model; the same against a local
OpenAI-compatible server is measured by ``bench/bench_adapters.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def child_env(home: str) -> dict[str, str]:
    env = {**os.environ, "TETHER_HOME": home}
    # Measure an installed tether: its bytecode cached, as after any first run.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def one_run(task: str, home: str) -> float:
    """Seconds from spawn to exit."""
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "run", task],
        env=child_env(home),
        capture_output=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"tether run failed: {result.stderr.decode()}")
    return elapsed


async def against_fake_server(runs: int) -> list[float]:
    """``tether run`` with the OpenAI-compatible adapter against a local fake server."""
    from tests.adapters.fake_server import FakeServer, stream
    from tests.adapters.support import text_answer

    times = []
    with tempfile.TemporaryDirectory() as home:
        async with FakeServer() as server:
            argv = [
                sys.executable,
                "-m",
                "tether.cli.main",
                "run",
                "--model",
                "openai-compatible:fake",
                "--base-url",
                f"{server.url}/v1",
                "hello",
            ]
            env = {**child_env(home), "TETHER_API_KEY": "sk-bench-key"}
            for index in range(runs + 1):
                server.queue(stream(text_answer("hello from the fake model")))
                start = time.perf_counter()
                process = await asyncio.create_subprocess_exec(
                    *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
                )
                out, err = await process.communicate()
                if process.returncode != 0 or b"fake model" not in out:
                    raise SystemExit(f"tether run against the fake server failed: {err.decode()}")
                if index:  # the first run warms the bytecode cache
                    times.append(time.perf_counter() - start)
    return times


def measure(task: str, runs: int) -> tuple[list[float], float]:
    times = []
    with tempfile.TemporaryDirectory() as home:
        one_run(task, home)  # warm-up: writes the bytecode cache
        for _ in range(runs):
            times.append(one_run(task, home))
    # ru_maxrss of RUSAGE_CHILDREN is the largest RSS of any child so far, in KiB.
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return times, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    for task in ("hello", "$ uname -a"):
        times, peak = measure(task, args.runs)
        print(
            f"tether run {task!r}: median {statistics.median(times) * 1000:.0f} ms, "
            f"min {min(times) * 1000:.0f} ms over {args.runs} runs (target <= 300 ms); "
            f"peak RSS so far {peak:.0f} MB (target <= 90 MB)"
        )
    times = asyncio.run(against_fake_server(args.runs))
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        f"tether run against a local OpenAI-compatible server: median "
        f"{statistics.median(times) * 1000:.0f} ms, min {min(times) * 1000:.0f} ms; "
        f"peak RSS so far {peak:.0f} MB"
    )


if __name__ == "__main__":
    main()
