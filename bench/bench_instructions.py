"""Instructions a command executes, counted by valgrind: start-up figures noise cannot move.

Usage: python bench/bench_instructions.py [--vs SRC] [--acp]

Wall-clock start-up on a shared machine drifts by tens of percent between
runs; the number of instructions a process executes does not (it repeats to
within 0.1%). This counts them with ``valgrind --tool=cachegrind
--cache-sim=no`` for:

* an offline ``tether run hello`` from spawn to exit;
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
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


ACP_IMPORTS = """
import importlib, importlib.util, tether.cli.main
found = importlib.util.find_spec("tether.cli.acp")
importlib.import_module("tether.cli.acp" if found else "tether.acp.command")
"""


def instructions(pythonpath: Path, argv: list[str], home: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "TETHER_HOME": home}
    # Bytecode cached, as after any first run: a run without it compiles
    # every module, which no user's second run does.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, *argv], env=env, capture_output=True, check=False)
    result = subprocess.run(
        [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            sys.executable,
            *argv,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"I\s+refs:\s+([\d,]+)", result.stderr)
    if found is None:
        raise SystemExit(f"valgrind gave no count:\n{result.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vs", type=Path, default=None, help="another checkout's src")
    parser.add_argument("--acp", action="store_true", help="also count the ACP handshake path")
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
            line = ", ".join(f"{tree} {count / 1e6:,.1f}M" for tree, count in counts.items())
            if options.vs is not None:
                ratio = counts["this tree"] / counts[str(options.vs)]
                line += f" (ratio {ratio:.3f})"
            print(f"{name}: {line}")


if __name__ == "__main__":
    main()
