"""``tether run`` from spawn to answer, and its peak memory; prints its figures.

Usage: python bench/bench_cli.py [--runs N] [--vs SRC] [--tty]

With ``--vs SRC`` (another tree's ``src``), it compares ``tether run hello``
of this tree against that tree's instead: whole processes, interleaved
(A B A B ...), the ratio taken pair by pair, both with their bytecode
cached. With ``--tty`` as well, each run has a pseudo-terminal for its
stdin, stdout and stderr (as a person runs it: Markdown, colours, a
spinner; ``NO_COLOR`` in the environment keeps it plain).
``bench/bench_instructions.py --vs SRC`` counts the instructions of the same
command, which a shared machine's load does not move.

Targets (from the command-line contract): spawn -> answer printed <= 300 ms,
peak RSS <= 90 MB, for the offline model and for the OpenAI-compatible
adapter against a local fake server (which runs in this process, so its work
is counted too).
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


def tether_command() -> list[str]:
    """The installed ``tether`` script beside this interpreter, as users run it;
    ``python -m tether.cli.main`` (which also imports ``runpy``) without one."""
    script = Path(sys.executable).with_name("tether")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tether.cli.main"]


FENCED_KEY = {"OPENAI_API_KEY": "sk-bench-0123456789abcdef"}
"""A key in the environment: ``tether`` fences it (re-executes without it)."""


def child_env(home: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "TETHER_HOME": home, **(extra or {})}
    # Measure an installed tether: its bytecode cached, as after any first run.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def tree_command(src: Path) -> list[str]:
    """``tether`` as the tree at ``src`` runs it: its console script's entry point
    (``tether.cli.launch``, or ``tether.cli.main`` in trees older than it)."""
    code = (
        "import importlib, importlib.util, sys\n"
        f"sys.path.insert(0, {str(src)!r})\n"
        "name = 'tether.cli.launch' if importlib.util.find_spec('tether.cli.launch') "
        "else 'tether.cli.main'\n"
        "sys.exit(importlib.import_module(name).entry())\n"
    )
    return [sys.executable, "-c", code]


def one_run(
    task: str,
    home: str,
    extra: dict[str, str] | None = None,
    command: list[str] | None = None,
) -> tuple[float, float]:
    """Seconds from spawn to the answer's last byte on stdout, and from spawn to exit.

    The answer is printed once the turn ends; what follows (the agent disposed,
    tether stopped, logs flushed) is counted only in the second figure.
    """
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(
            [*(command or tether_command()), "run", task],
            env=child_env(home, extra),
            stdout=subprocess.PIPE,
            stderr=err,
        )
        assert process.stdout is not None
        answered = start
        while os.read(process.stdout.fileno(), 65536):
            answered = time.perf_counter()
        status = process.wait()
        exited = time.perf_counter()
        process.stdout.close()
        if status != 0 or answered == start:
            err.seek(0)
            raise SystemExit(f"tether run failed: {err.read().decode()}")
    return answered - start, exited - start


async def against_fake_server(runs: int) -> tuple[list[float], list[float]]:
    """``tether run`` with the OpenAI-compatible adapter against a local fake server:
    seconds to the answer printed, and to exit, per run."""
    from tests.adapters.fake_server import FakeServer, stream
    from tests.adapters.support import text_answer

    answered, exited = [], []
    with tempfile.TemporaryDirectory() as home:
        async with FakeServer() as server:
            argv = [
                *tether_command(),
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
                assert process.stdout is not None and process.stderr is not None
                out, answer_at = b"", start
                while chunk := await process.stdout.read(65536):
                    out, answer_at = out + chunk, time.perf_counter()
                err = await process.stderr.read()
                await process.wait()
                if process.returncode != 0 or b"fake model" not in out:
                    raise SystemExit(f"tether run against the fake server failed: {err.decode()}")
                if index:  # the first run warms the bytecode cache
                    answered.append(answer_at - start)
                    exited.append(time.perf_counter() - start)
    return answered, exited


def baseline(runs: int) -> float:
    """Median seconds to spawn ``python -c "import asyncio"``: how fast the machine is now."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import asyncio"], check=True, env=child_env(""))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


HTTP_IMPORTS = """
import asyncio, time
start = time.perf_counter()
import anyio._backends._asyncio, httpcore, httpx, httpx_sse
print(time.perf_counter() - start)
"""


def http_imports(runs: int) -> float:
    """Median seconds a fresh interpreter takes to import what a first request to a
    model imports (httpx, httpx-sse, httpcore, anyio's asyncio backend)."""
    times = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", HTTP_IMPORTS],
            check=True,
            capture_output=True,
            text=True,
            env=child_env(""),
        ).stdout
        times.append(float(out))
    return statistics.median(times)


def measure(task: str, runs: int) -> tuple[list[float], list[float], float]:
    answered, exited = [], []
    with tempfile.TemporaryDirectory() as home:
        one_run(task, home)  # warm-up: writes the bytecode cache
        for _ in range(runs):
            to_answer, to_exit = one_run(task, home)
            answered.append(to_answer)
            exited.append(to_exit)
    # ru_maxrss of RUSAGE_CHILDREN is the largest RSS of any child so far, in KiB.
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return answered, exited, peak


def fence_cost(runs: int) -> tuple[list[float], list[float]]:
    """Spawn -> answer of ``tether run hello`` without and with a key to fence, interleaved."""
    plain, fenced = [], []
    with tempfile.TemporaryDirectory() as home:
        one_run("hello", home)
        one_run("hello", home, FENCED_KEY)
        for _ in range(runs):
            plain.append(one_run("hello", home)[0])
            fenced.append(one_run("hello", home, FENCED_KEY)[0])
    return plain, fenced


def on_terminal_run(command: list[str], home: str) -> float:
    """Seconds from spawn to exit of ``command run hello`` on a pseudo-terminal."""
    from bench_instructions import on_terminal

    env = {**child_env(home), "TERM": "xterm-256color"}
    start = time.perf_counter()
    on_terminal([*command, "run", "hello"], env)
    return time.perf_counter() - start


def compare(src: Path, runs: int, *, tty: bool = False) -> None:
    """``tether run hello`` of this tree against the tree at ``src``; prints the figures."""
    ours, theirs = tree_command(Path(__file__).resolve().parent.parent / "src"), tree_command(src)
    ratios, exits = [], {"this tree": [], str(src): []}

    def timed(command: list[str], home: str) -> float:
        return on_terminal_run(command, home) if tty else one_run("hello", home, command=command)[1]

    with tempfile.TemporaryDirectory() as home:
        for command in (ours, theirs):
            timed(command, home)  # writes the bytecode cache
        for _ in range(runs):
            mine = timed(ours, home)
            other = timed(theirs, home)
            exits["this tree"].append(mine)
            exits[str(src)].append(other)
            ratios.append(mine / other)
        where = " on a terminal" if tty else ""
        for name, values in exits.items():
            print(
                f"tether run 'hello'{where}, {name}: spawn -> exit median "
                f"{ms(statistics.median(values))} "
                f"(range {ms(min(values))}-{ms(max(values))})"
            )
        print(
            f"this tree over {src}, {runs} interleaved pairs: median "
            f"{statistics.median(ratios):.2f}x (range {min(ratios):.2f}-{max(ratios):.2f}x)"
        )


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--vs", type=Path, help="compare with the tree whose src this is")
    parser.add_argument("--tty", action="store_true", help="with --vs: run on a pseudo-terminal")
    args = parser.parse_args()
    if args.vs is not None:
        compare(args.vs, args.runs, tty=args.tty)
        return
    print(
        f"reference: python -c 'import asyncio', spawn -> exit median {ms(baseline(args.runs))} "
        "(the machine's speed right now; runs vary with it)"
    )
    for task in ("hello", "$ uname -a"):
        answered, exited, peak = measure(task, args.runs)
        print(
            f"tether run {task!r} over {args.runs} runs: spawn -> answer printed median "
            f"{ms(statistics.median(answered))}, p90 {ms(percentile(answered, 0.9))} "
            f"(target <= 300 ms); spawn -> exit median {ms(statistics.median(exited))}; "
            f"peak RSS so far {peak:.0f} MB (target <= 90 MB)"
        )
    answered, exited = asyncio.run(against_fake_server(args.runs))
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        f"tether run against a local OpenAI-compatible server over {args.runs} runs: "
        f"spawn -> answer printed median {ms(statistics.median(answered))}, "
        f"p90 {ms(percentile(answered, 0.9))} (target <= 300 ms); spawn -> exit median "
        f"{ms(statistics.median(exited))}; peak RSS so far {peak:.0f} MB (target <= 90 MB)"
    )
    print(
        f"    for scale: importing httpx, httpx-sse, httpcore and anyio, which the first "
        f"request does, takes median {ms(http_imports(args.runs))}"
    )
    plain, fenced = fence_cost(args.runs)
    print(
        f"the secret fence (a key in the environment: one re-exec), {args.runs} runs "
        f"interleaved: spawn -> answer printed without a key median {ms(statistics.median(plain))} "
        f"(range {ms(min(plain))}-{ms(max(plain))}), with one median "
        f"{ms(statistics.median(fenced))} (range {ms(min(fenced))}-{ms(max(fenced))}); "
        f"cost {ms(statistics.median(fenced) - statistics.median(plain))}"
    )


if __name__ == "__main__":
    main()
