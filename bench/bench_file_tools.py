"""File tool benchmarks: grep over a big tree, edit of a big file, read of a huge file's head.

Usage: python bench/bench_file_tools.py [--runs N] [--files N] [--file-kb N] [--only grep|edit|read]

Each tool is called as a model's call runs it (the tool function, with its
argument model, from an event loop; the disk work in a worker thread). The
trees and files are generated in a temporary directory, deleted afterwards.

Targets: ``grep`` over a 20,000-file, 200 MB tree within 2x of ``rg`` when
``rg`` is installed (both are printed), else <= 1 s; ``edit`` of a 10 MB file
<= 50 ms; ``read`` of the first 2,000 lines of a 100 MB file <= 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tether.plugins.fs.tools import FileTools  # noqa: E402
from tether.plugins.tool_fs import Config, EditArgs, GrepArgs, ReadArgs  # noqa: E402
from tether.runtime import CancelSignal  # noqa: E402
from tether.tools import ToolExec  # noqa: E402

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
]


def text_block(rng: random.Random, size: int) -> str:
    lines = []
    total = 0
    while total < size:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14)))
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines) + "\n"


def make_tree(root: Path, files: int, file_kb: int) -> int:
    """``files`` files of about ``file_kb`` KiB in nested directories; returns their bytes."""
    rng = random.Random(7)
    chunk = text_block(rng, file_kb * 1024)
    total = 0
    for n in range(files):
        directory = root / f"d{n % 50:02d}" / f"e{n % 400:03d}"
        directory.mkdir(parents=True, exist_ok=True)
        body = chunk if n % 97 else chunk + "the needle_1234 is here\n"
        (directory / f"f{n}.txt").write_text(body)
        total += len(body)
    (root / ".gitignore").write_text("*.log\n")
    return total


def tools(cwd: str, engine: str = "auto") -> tuple[FileTools, ToolExec]:
    # No runtime: the calls below are made as a program's (no agent), on the disk.
    config = Config(max_file_bytes=64 * 1024 * 1024, grep_engine=engine)  # type: ignore[arg-type]
    files = FileTools(cast(Any, None), config)
    return files, ToolExec(agent=None, call_id="bench", signal=CancelSignal(), cwd=cwd)


def timed(runs: int, body: Any) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        body()
        times.append((time.perf_counter() - start) * 1000)
    return times


LOOP = asyncio.new_event_loop()


def call(coroutine: Any) -> Any:
    """Run one tool call on the bench's one event loop (its worker threads stay warm)."""
    return LOOP.run_until_complete(coroutine)


def show(label: str, times: list[float], target: str) -> None:
    print(
        f"{label}: median {statistics.median(times):.1f} ms, "
        f"min {min(times):.1f}, max {max(times):.1f} (n={len(times)}; target {target})"
    )


def bench_grep(runs: int, files: int, file_kb: int) -> None:
    with tempfile.TemporaryDirectory(prefix="tether-bench-grep-") as scratch:
        root = Path(scratch)
        total = make_tree(root, files, file_kb)
        print(f"grep: tree of {files:,} files, {total / 1e6:.0f} MB")
        expected = len(range(0, files, 97))
        rg = shutil.which("rg")
        engines = ["python", *(["rg"] if rg else [])]

        def grep_with(engine: str, mode: str = "files_with_matches") -> Any:
            fs, exec = tools(scratch, engine)
            args = GrepArgs(pattern=r"needle_\d+", output_mode=mode, head_limit=1_000_000)  # type: ignore[arg-type]

            def body() -> None:
                out = call(fs.grep(args, exec))
                assert not out.is_error and len(out.content.splitlines()) == expected, out

            return body

        def raw_rg() -> None:
            assert rg is not None
            subprocess.run([rg, "-l", r"needle_\d+", scratch], capture_output=True, check=True)

        bodies = {f"grep tool, {e} engine": grep_with(e) for e in engines}
        bodies.update({f"grep tool content, {e} engine": grep_with(e, "content") for e in engines})
        if rg is not None:
            bodies["rg -l (reference)"] = raw_rg
        for body in bodies.values():
            body()  # warm the page cache
        times: dict[str, list[float]] = {label: [] for label in bodies}
        for _ in range(runs):  # interleaved: the machine is noisy
            for label, body in bodies.items():
                times[label] += timed(1, body)
        target = "<= 2x rg" if rg else "<= 1000 ms (rg not installed)"
        for label, measured in times.items():
            show(label, measured, "reference" if label.startswith("rg") else target)


def bench_edit(runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="tether-bench-edit-") as scratch:
        path = Path(scratch) / "big.txt"
        rng = random.Random(3)
        body = text_block(rng, 10 * 1024 * 1024)
        middle = len(body) // 2
        path.write_text(body[:middle] + "\nMARKER-0\n" + body[middle:])
        print(f"edit: a {path.stat().st_size / 1e6:.1f} MB file")
        fs, exec = tools(scratch)
        call(fs.read(ReadArgs(path="big.txt", limit=1), exec))
        state = {"n": 0}

        def edit() -> None:
            n = state["n"]
            args = EditArgs(path="big.txt", old_string=f"MARKER-{n}", new_string=f"MARKER-{n + 1}")
            out = call(fs.edit(args, exec))
            assert not out.is_error, out.content
            state["n"] = n + 1

        def floor() -> None:
            # What any edit of this file costs at least: read, decode, find, encode,
            # digest, write beside it, rename.
            data = path.read_bytes()
            text = data.decode()
            at = text.find("MARKER-")
            new = (text[:at] + "MARKER-X" + text[at + 8 :]).encode()
            hashlib.sha1(new, usedforsecurity=False).hexdigest()
            beside = path.with_suffix(".floor")
            beside.write_bytes(new)
            os.replace(beside, path.with_suffix(".floor2"))

        edit()
        edits: list[float] = []
        floors: list[float] = []
        for _ in range(runs):  # interleaved: the machine is noisy
            edits += timed(1, edit)
            floors += timed(1, floor)
        show("edit (10 MB)", edits, "<= 50 ms")
        show("  floor: read+decode+find+encode+sha1+write+rename", floors, "reference")


def bench_read(runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="tether-bench-read-") as scratch:
        path = Path(scratch) / "huge.txt"
        rng = random.Random(5)
        block = text_block(rng, 1024 * 1024)
        with path.open("w") as out:
            for _ in range(100):
                out.write(block)
        print(f"read: a {path.stat().st_size / 1e6:.0f} MB file, first 2,000 lines")
        fs, exec = tools(scratch)

        def read() -> None:
            out = call(fs.read(ReadArgs(path="huge.txt", limit=2000), exec))
            assert not out.is_error and out.content.count("\n") == 2000, out.content[-200:]

        read()
        show("read (first 2,000 lines of 100 MB)", timed(runs, read), "<= 20 ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--file-kb", type=int, default=10)
    parser.add_argument("--only", choices=("grep", "edit", "read"))
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    if args.only in (None, "read"):
        bench_read(args.runs)
    if args.only in (None, "edit"):
        bench_edit(args.runs)
    if args.only in (None, "grep"):
        bench_grep(args.runs, args.files, args.file_kb)


if __name__ == "__main__":
    main()
