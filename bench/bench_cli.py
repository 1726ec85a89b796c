"""``tether run`` from spawn to answer, and its peak memory; prints its figures.

Usage: python bench/bench_cli.py [--runs N]

Targets (from the command-line contract): spawn -> answer printed <= 300 ms,
peak RSS <= 90 MB, for the offline model; the same against a local
OpenAI-compatible server is measured by ``bench/bench_adapters.py``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def one_run(task: str, home: str) -> tuple[float, float]:
    """Seconds from spawn to exit, and the child's peak RSS in MB."""
    env = {**os.environ, "TETHER_HOME": home}
    # Measure an installed tether: its bytecode cached, as after any first run.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "run", task],
        env=env,
        capture_output=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"tether run failed: {result.stderr.decode()}")
    return elapsed, 0.0


def measure(task: str, runs: int) -> tuple[list[float], float]:
    times = []
    with tempfile.TemporaryDirectory() as home:
        one_run(task, home)  # warm-up: writes the bytecode cache
        for _ in range(runs):
            elapsed, _ = one_run(task, home)
            times.append(elapsed)
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


if __name__ == "__main__":
    main()
