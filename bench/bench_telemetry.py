"""Telemetry benchmark: what tracing costs a busy session, and what it costs when off.

Usage: python bench/bench_telemetry.py [--turns N] [--rounds R] [--workload provider|tools]

A real OTLP/HTTP receiver (``oteltap``, in a process of its own so its CPU is
not counted) takes what is sent. Three figures:

* **Exporter CPU in a busy session** — ``tether chat`` fed ``N`` prompts on a
  pipe, each turn a ``bash`` call then an answer: two model calls and a tool
  call. ``provider`` (the default) streams the model's answers from the
  project's fake OpenAI-compatible server (``tests/adapters/fake_server.py``,
  in this process, so its CPU is not counted) through the real adapter, the
  answer 200 tokens in 200 deltas, as a provider does; ``tools`` uses the
  offline model, whose short answers cost next to nothing (the most spans per
  CPU second tether can make: a worst case). Telemetry off and on; the CPU time (user +
  system) of the tether process, median of ``R`` rounds each. The difference
  of the two is noisy on a shared machine and holds the one-time import of
  the SDK, so the exporter's own CPU is also read from the live process (it
  counts the thread time of its folding and sending, logged with
  ``--verbose``) and set against the session's CPU with telemetry off.
  Target: at most 2%.
* **Start-up with telemetry off** — the modules ``tether run hello`` imports
  (``python -X importtime``): no ``opentelemetry`` module and none of
  ``tether.telemetry``, beside the whole; with telemetry on, for comparison.
* **Start-up wall time** of ``tether run hello``, telemetry off and on (on
  imports the SDK when its row mounts).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EXPORTER_LINE = re.compile(r"telemetry: (\d+) spans sent; exporter CPU ([\d.]+) ms")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def overlay(home: Path, endpoint: str) -> Path:
    path = home / "telemetry.yml"
    path.write_text(
        "plugins:\n  - id: telemetry\n    disabled: false\n"
        f"    config: {{endpoint: '{endpoint}', interval: 5}}\n"
    )
    return path


def tether_cpu(home: Path, args: list[str], stdin: str) -> tuple[float, str]:
    """Run ``tether ARGS`` with ``stdin``; its CPU seconds (user + system), and its stderr."""
    env = {**os.environ, "TETHER_HOME": str(home)}
    errors = home / "stderr.txt"
    with errors.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "tether.cli.main", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=sink,
            env=env,
            cwd=home,
        )
        assert process.stdin is not None
        process.stdin.write(stdin.encode())
        process.stdin.close()
        _pid, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.returncode == 0, f"tether {args} exited {process.returncode}"
    return usage.ru_utime + usage.ru_stime, errors.read_text()


WORDS = "the quick brown fox jumps over the lazy dog as the agent keeps its log".split()  # noqa: SIM905


def provider_scripts(turns: int) -> list[object]:
    """Two answers per turn: a ``bash`` call, then 200 tokens of text, streamed."""
    from tests.adapters.fake_server import stream
    from tests.adapters.support import call, delta, usage

    scripts: list[object] = []
    for turn in range(turns):
        arguments = json.dumps({"command": f"seq {turn} {turn + 40}"})
        scripts.append(
            stream(
                [
                    delta(calls=[call(0, arguments, id=f"c{turn}", name="bash")]),
                    delta(finish="tool_calls"),
                    usage(2000 + turn * 300, 30),
                    "[DONE]",
                ]
            )
        )
        words = [delta(f" {WORDS[i % len(WORDS)]}") for i in range(200)]
        scripts.append(
            stream([*words, delta(finish="stop"), usage(2100 + turn * 300, 200), "[DONE]"])
        )
    return scripts


async def provider_cpu(home: Path, args: list[str], turns: int) -> tuple[float, str]:
    """``tether chat`` on the fake provider for ``turns`` turns; its CPU seconds and stderr."""
    from tests.adapters.fake_server import FakeServer

    async with FakeServer() as server:
        server.queue(*provider_scripts(turns))  # type: ignore[arg-type]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "tether.cli.main", *args, "chat", "--model", "openai-compatible:m"),
            *("--base-url", f"{server.url}/v1"),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "TETHER_HOME": str(home), "TETHER_API_KEY": "bench"},
            cwd=home,
        )
        script = "".join(f"turn {turn}\n" for turn in range(turns)).encode()
        _out, errors = await process.communicate(script)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert process.returncode == 0, errors.decode()[-2000:]
    spent = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return spent, errors.decode()


def prompts(turns: int) -> str:
    """``turns`` prompts for the offline model, each a ``bash`` call."""
    return "".join(f"$ seq {i} {i + 40}\n" for i in range(turns))


def imports(home: Path, config: Path | None) -> dict[str, int]:
    """Module → self import time (µs) of ``tether run hello``."""
    args = ["--config", str(config)] if config is not None else []
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tether.cli.main", *args, "run", "hello"],
        capture_output=True,
        text=True,
        env={**os.environ, "TETHER_HOME": str(home)},
        cwd=home,
        check=True,
    )
    found: dict[str, int] = {}
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, _cumulative, name = line.removeprefix("import time:").split("|")
        found[name.strip()] = int(own)
    return found


def wall(home: Path, config: Path | None, rounds: int) -> float:
    args = ["--config", str(config)] if config is not None else []
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "tether.cli.main", *args, "run", "hello"],
            capture_output=True,
            env={**os.environ, "TETHER_HOME": str(home)},
            cwd=home,
            check=True,
        )
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def busy(options: argparse.Namespace, base: Path, endpoint: str) -> None:
    """The exporter's CPU in a busy session, against the session's own."""
    off_cpu, on_cpu, own = [], [], []
    script = prompts(options.turns)
    for round_ in range(options.rounds):
        off, on = base / f"off-{round_}", base / f"on-{round_}"
        off.mkdir()
        on.mkdir()
        verbose = ["--verbose", "--config", str(overlay(on, endpoint))]
        if options.workload == "provider":
            off_cpu.append(asyncio.run(provider_cpu(off, [], options.turns))[0])
            cpu, errors = asyncio.run(provider_cpu(on, verbose, options.turns))
        else:
            off_cpu.append(tether_cpu(off, ["chat"], script)[0])
            cpu, errors = tether_cpu(on, [*verbose, "chat"], script)
        on_cpu.append(cpu)
        found = EXPORTER_LINE.search(errors)
        assert found, "the exporter did not report its CPU"
        own.append((int(found.group(1)), float(found.group(2)) / 1000))
    session_cpu = statistics.median(off_cpu)
    print(f"busy session ({options.workload}): {options.turns} turns, median of {options.rounds}")
    print(f"  tether chat CPU, telemetry off: {session_cpu * 1000:8.1f} ms")
    print(
        f"  tether chat CPU, telemetry on:  {statistics.median(on_cpu) * 1000:8.1f} ms"
        " (--verbose; the SDK's import and set-up included)"
    )
    spent = statistics.median(cpu for _, cpu in own)
    print(
        f"  exporter CPU in the live process: {spent * 1000:.1f} ms for {own[0][0]} spans"
        f" = {spent / session_cpu:.2%} of the session's CPU (target <= 2%)"
    )


def startup(base: Path, endpoint: str, rounds: int) -> None:
    """What ``tether run hello`` imports, and how long it takes, telemetry off and on."""
    home = base / "startup"
    home.mkdir()
    config = overlay(home, endpoint)
    off_imports = imports(home, None)
    on_imports = imports(home, config)
    otel_off = [m for m in off_imports if m.split(".")[0] == "opentelemetry"]
    ours_off = {m: us for m, us in off_imports.items() if m.startswith("tether.telemetry")}
    otel_on = [m for m in on_imports if m.split(".")[0] == "opentelemetry"]
    print("start-up (tether run hello):")
    print(
        f"  telemetry off: {len(off_imports)} modules, {sum(off_imports.values()) / 1000:.1f} ms"
        f" importing; opentelemetry modules: {len(otel_off)}; tether.telemetry modules:"
        f" {len(ours_off)} ({sum(ours_off.values())} us)"
    )
    print(
        f"  telemetry on:  {len(on_imports)} modules, {sum(on_imports.values()) / 1000:.1f} ms"
        f" importing; opentelemetry modules: {len(otel_on)}"
    )
    print(
        f"  wall time, median of {rounds}: off {wall(home, None, rounds) * 1000:.0f} ms, "
        f"on {wall(home, config, rounds) * 1000:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workload", choices=("provider", "tools"), default="provider")
    options = parser.parse_args()

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    oteltap = Path(sys.executable).with_name("oteltap")
    receiver = subprocess.Popen(
        [str(oteltap), "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        with tempfile.TemporaryDirectory() as scratch:
            busy(options, Path(scratch), endpoint)
            startup(Path(scratch), endpoint, max(5, options.rounds))
    finally:
        receiver.terminate()
        receiver.wait()


if __name__ == "__main__":
    main()
