"""Shell executor benchmarks on real processes; prints its figures.

Usage: python bench/bench_shell.py [--rounds N] [--megabytes N] [--tasks N]

Targets (from the shell contract): a foreground ``true`` through the executor
costs at most 1.2x a bare ``asyncio.create_subprocess_exec("bash", "-c",
"true")`` (measured as a ratio in one run, interleaved); reading 100 MB of
output runs at >= 200 MB/s; 50 background tasks are started, read and killed
concurrently; a cancel ends every process of the command (its whole group
gone, its pipes closed) within 50 ms when they honour SIGTERM, and within the
TERM grace + 20 ms when they ignore it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

from tether.runtime import CancelSignal, Runtime
from tether.shell import LocalShell, ShellExecRequest
from tether.shell import local as shell_plugin
from tether.shell.definition import SHELL
from tether.shell.process import group_alive

GRACE_MS = 200
"""The TERM grace of the executor measured here."""

STOP_CASES = {
    "honours SIGTERM (bash execs sleep)": "exec sleep 60",
    "honours SIGTERM (bash forks sleep)": "sleep 60; true",
    "ignores SIGTERM (bash and sleep)": "trap '' TERM; sleep 60; true",
}


async def bare_true() -> None:
    process = await asyncio.create_subprocess_exec("bash", "-c", "true")
    await process.wait()


async def round_trip(shell: LocalShell, rounds: int) -> tuple[float, float]:
    """Median seconds of one ``true``: bare, then through the executor (interleaved)."""
    spec = shell.resolve(ShellExecRequest("true"))
    for _ in range(20):
        await bare_true()
        await shell.run(spec)
    bare, executor = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        await bare_true()
        bare.append(time.perf_counter() - start)
        start = time.perf_counter()
        await shell.run(spec)
        executor.append(time.perf_counter() - start)
    return statistics.median(bare), statistics.median(executor)


async def throughput(shell: LocalShell, megabytes: int, cap: int | None) -> float:
    """MB/s of a foreground command writing ``megabytes`` MB to stdout."""
    size = megabytes * 1_000_000
    spec = shell.resolve(ShellExecRequest(f"head -c {size} /dev/zero", max_output_bytes=cap))
    start = time.perf_counter()
    result = await shell.run(spec)
    elapsed = time.perf_counter() - start
    assert result.exit_code == 0, result
    return megabytes / elapsed


async def background(shell: LocalShell, count: int) -> tuple[float, float, float]:
    """Seconds to start ``count`` tasks concurrently, read each, and kill them all."""
    owners = [f"owner-{i % 5}" for i in range(count)]
    specs = [
        shell.resolve(ShellExecRequest(f"echo task {i}; exec sleep 60", owner=owner))
        for i, owner in enumerate(owners)
    ]
    start = time.perf_counter()
    tasks = await asyncio.gather(*(shell.start(spec) for spec in specs))
    started = time.perf_counter()
    for task in tasks:
        shell.read_output(task.id)
    read = time.perf_counter()
    killed = await asyncio.gather(*(shell.kill_owned_by(owner) for owner in sorted(set(owners))))
    done = time.perf_counter()
    assert sum(len(k) for k in killed) == count
    return started - start, read - started, done - read


async def cancel_to_gone(shell: LocalShell, command: str) -> float:
    """Seconds from the cancel of a running foreground command to its end (group gone)."""
    signal = CancelSignal()
    run = asyncio.ensure_future(shell.run(shell.resolve(ShellExecRequest(command)), signal))
    await asyncio.sleep(0.1)  # a benchmark, not a test: let bash set its trap first
    start = time.perf_counter()
    signal.cancel("user")
    result = await run
    elapsed = time.perf_counter() - start
    assert result.aborted and result.stop is not None, result
    assert not group_alive(result.stop.pgid), result.stop
    return elapsed


async def stops(shell: LocalShell, rounds: int) -> dict[str, list[float]]:
    """:func:`cancel_to_gone` of each case, interleaved, ``rounds`` times."""
    timings: dict[str, list[float]] = {case: [] for case in STOP_CASES}
    for _ in range(rounds):
        for case, command in STOP_CASES.items():
            timings[case].append(await cancel_to_gone(shell, command))
    return timings


async def main(rounds: int, megabytes: int, count: int) -> None:
    with tempfile.TemporaryDirectory() as spill:
        async with Runtime() as runtime:
            config = {
                "spill_dir": spill,
                "max_output_bytes": 256 << 20,
                "kill_grace_ms": GRACE_MS,
                "state_dir": spill,
            }
            await runtime.ctx.plugin(shell_plugin, config)
            shell = runtime.ctx.get(SHELL)

            bare, executor = await round_trip(shell, rounds)
            print(
                f"foreground `true`: bare {bare * 1e3:.2f} ms, executor {executor * 1e3:.2f} ms, "
                f"ratio {executor / bare:.2f}x (target <= 1.2x; median of {rounds})"
            )
            spilled = await throughput(shell, megabytes, None)
            print(
                f"throughput, {megabytes} MB (1 MiB in memory, the rest spilled): "
                f"{spilled:.0f} MB/s (target >= 200 MB/s)"
            )
            in_memory = await throughput(shell, megabytes, 256 << 20)
            print(f"throughput, {megabytes} MB (all kept in memory): {in_memory:.0f} MB/s")
            start, read, kill = await background(shell, count)
            print(
                f"{count} background tasks: started in {start * 1e3:.1f} ms, "
                f"read in {read * 1e3:.2f} ms, killed in {kill * 1e3:.1f} ms"
            )
            stop_rounds = max(5, rounds // 20)
            for case, timing in (await stops(shell, stop_rounds)).items():
                target = "50 ms" if "honours" in case else f"{GRACE_MS + 20} ms (grace + 20)"
                print(
                    f"cancel -> every process gone, {case}: median "
                    f"{statistics.median(timing) * 1e3:.1f} ms, max {max(timing) * 1e3:.1f} ms "
                    f"over {stop_rounds} (target <= {target})"
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.megabytes, args.tasks))
