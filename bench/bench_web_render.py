"""What `tether web` computes on the server for a record, beyond encoding it; prints figures.

Usage: python bench/bench_web_render.py [--rounds R]

Figures (docs/web.md):

* ``import``: importing markdown-it-py, Pygments and nh3 and rendering a first
  answer, in a fresh interpreter (what the first answer a server shows costs once;
  `tether web`'s start-up imports none of them).
* ``answer``: one answer of about 2 KB (prose, a list, a table, a Python block)
  rendered and sanitized, per answer, after the first.
* ``plain``: a one-line plain answer, per answer.
* ``diff 300`` / ``diff 10000``: the numbered hunks of one changed line in a file
  of 300 and 10,000 lines (a permission question's preview of the whole file).

Each round measures every figure once, in turn (interleaved), R rounds; each figure
is printed as the median and the range of its rounds.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tether.front.diffs import hunks
from tether.web.markdown import to_html

ANSWER = (
    "## What changed\n\n"
    "The **stop** path now waits for the process group, then sends `SIGKILL` "
    "when the grace period ends. See [the docs](https://example.org/docs).\n\n"
    "- the receipt names each signal\n- the exit code is kept\n- nothing is retried\n\n"
    "| step | signal | waits |\n|---|---|---|\n| 1 | SIGTERM | 2 s |\n| 2 | SIGKILL | 0 s |\n\n"
    "```python\n"
    + "".join(
        f"def stop_{n}(task):\n    return task.kill(signal='TERM', then='KILL')\n\n"
        for n in range(12)
    )
    + "```\n\nThat is all: the tests pass and the figures are in `docs/shell.md`.\n"
)

FIRST = (
    "import time; t = time.perf_counter(); "
    "from tether.web.markdown import to_html; to_html({answer!r}); "
    "print((time.perf_counter() - t) * 1000)"
)


def _first(answer: str) -> float:
    src = str(Path(__file__).resolve().parents[1] / "src")
    code = FIRST.format(answer=answer)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": src},
    )
    return float(done.stdout.strip())


def _each(work: Callable[[], object], times: int) -> float:
    started = time.perf_counter()
    for _ in range(times):
        work()
    return (time.perf_counter() - started) * 1000 / times


def _file(lines: int) -> tuple[str, str]:
    old = "".join(f"line {n}\n" for n in range(1, lines + 1))
    middle = f"line {lines // 2}\n"
    return old, old.replace(middle, f"line {lines // 2} changed\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    to_html(ANSWER)  # this process's imports, done once
    small, large = _file(300), _file(10_000)
    figures: dict[str, list[float]] = {}
    for _ in range(rounds):
        measured = {
            "import + first answer (fresh interpreter)": _first(ANSWER),
            f"answer of {len(ANSWER):,} characters": _each(lambda: to_html(ANSWER), 50),
            "one-line plain answer": _each(lambda: to_html("The bash call finished."), 500),
            "diff of one line in 300 lines": _each(lambda: hunks("f", *small), 50),
            "diff of one line in 10,000 lines": _each(lambda: hunks("f", *large), 5),
        }
        for name, value in measured.items():
            figures.setdefault(name, []).append(value)
    for name, values in figures.items():
        print(
            f"{name}: median {statistics.median(values):.3f} ms "
            f"({min(values):.3f} to {max(values):.3f}, {rounds} rounds)"
        )


if __name__ == "__main__":
    main()
