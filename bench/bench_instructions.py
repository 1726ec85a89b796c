"""Instructions a command executes, counted by valgrind: start-up figures noise cannot move.

Usage: python bench/bench_instructions.py [--vs SRC] [--acp] [--tty]

Wall-clock start-up on a shared machine drifts by tens of percent between
runs; the number of instructions a process executes does not (it repeats to
within 0.1%). This counts them with ``valgrind --tool=cachegrind
--cache-sim=no`` for:

* an offline ``tether run hello`` from spawn to exit;
* with ``--tty``, the same with its stdin, stdout and stderr on a
  pseudo-terminal (100 columns, ``TERM=xterm-256color``), as a person runs it:
  the answer rendered as Markdown, with colours and a spinner;
* with ``--acp``, the imports ``tether acp`` makes before it answers
  ``initialize`` (``tether.cli.main`` and the ``acp`` command's module:
  ``tether.cli.acp``, ``tether.acp.command`` in older trees), and the ACP
  SDK's own import, for scale.

``--vs SRC`` (the ``src`` directory of another checkout) counts the same
for that tree and prints the ratio. Instructions are not time (they ignore
cache misses and waits), but start-up is CPU-bound imports and class
definitions, which they track closely. Each count takes 20-40 s.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


ACP_IMPORTS = """
import importlib, importlib.util, tether.cli.main
found = importlib.util.find_spec("tether.cli.acp")
importlib.import_module("tether.cli.acp" if found else "tether.acp.command")
"""


def instructions(pythonpath: Path, argv: list[str], home: str, *, tty: bool = False) -> int:
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "TETHER_HOME": home}
    # Bytecode cached, as after any first run: a run without it compiles
    # every module, which no user's second run does.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if tty:
        env.pop("NO_COLOR", None)
        env["TERM"] = "xterm-256color"
    run = on_terminal if tty else on_pipes
    run([sys.executable, *argv], env)
    with tempfile.NamedTemporaryFile("r") as log:
        run(
            [
                "valgrind",
                "--tool=cachegrind",
                "--cache-sim=no",
                "--cachegrind-out-file=/dev/null",
                f"--log-file={log.name}",
                sys.executable,
                *argv,
            ],
            env,
        )
        report = log.read()
    found = re.search(r"I\s+refs:\s+([\d,]+)", report)
    if found is None:
        raise SystemExit(f"valgrind gave no count:\n{report[-2000:]}")
    return int(found.group(1).replace(",", ""))


def on_pipes(argv: list[str], env: dict[str, str]) -> None:
    subprocess.run(argv, env=env, capture_output=True, check=False)


def on_terminal(argv: list[str], env: dict[str, str]) -> None:
    """Run ``argv`` with a pseudo-terminal as its stdin, stdout and stderr; its output
    is read (and dropped) as it comes, so it never blocks on a full terminal."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    process = subprocess.Popen(
        argv, env=env, stdin=follower, stdout=follower, stderr=follower, start_new_session=True
    )
    os.close(follower)
    while True:
        try:
            if not os.read(leader, 65536):
                break
        except OSError:  # EIO: every writer has closed the terminal
            break
    process.wait()
    os.close(leader)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vs", type=Path, default=None, help="another checkout's src")
    parser.add_argument("--acp", action="store_true", help="also count the ACP handshake path")
    parser.add_argument("--tty", action="store_true", help="also count run on a pseudo-terminal")
    options = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on PATH")
    cases = {"tether run hello (offline)": ["-m", "tether.cli.main", "run", "hello"]}
    if options.acp:
        cases["imports before ACP initialize"] = ["-c", ACP_IMPORTS]
        cases["the ACP SDK's import"] = ["-c", "import acp.agent.connection"]
    trees = {"this tree": SRC}
    if options.vs is not None:
        trees[str(options.vs)] = options.vs
    with tempfile.TemporaryDirectory() as home:
        for name, argv in cases.items():
            counts = {tree: instructions(path, argv, home) for tree, path in trees.items()}
            report(name, counts, options.vs)
        if options.tty:
            argv = cases["tether run hello (offline)"]
            counts = {tree: instructions(p, argv, home, tty=True) for tree, p in trees.items()}
            report("tether run hello (offline, on a terminal)", counts, options.vs)


def report(name: str, counts: dict[str, int], vs: Path | None) -> None:
    line = ", ".join(f"{tree} {count / 1e6:,.1f}M" for tree, count in counts.items())
    if vs is not None:
        ratio = counts["this tree"] / counts[str(vs)]
        line += f" (ratio {ratio:.3f})"
    print(f"{name}: {line}")


if __name__ == "__main__":
    main()
