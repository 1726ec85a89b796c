"""Workspace snapshot and rewind benchmarks: a 10,000-file git repository, a few files changed.

Usage: python bench/bench_rewind.py [--files N] [--runs N] [--changed N] [--scan]

A snapshot per turn is measured as the ``rewind`` plugin takes it (the
store's ``snapshot()``, which a turn awaits in a worker thread): ``--changed``
files are rewritten (and one created) before each run, then the snapshot is
timed. Also timed: a snapshot of the unchanged tree, the first snapshot of
the tree (every file read once), and a rewind (plan and restore) of those
changes. The repository (its own ``.git`` with every file committed) and the
store are made in a temporary directory, deleted afterwards. The store
watches the workspace (inotify) as the plugin's does; ``--scan`` measures it
without the watcher, every snapshot a scan of the whole tree.

Goal: snapshot <= 20 ms median per turn. The figures printed are the median
and the range over the runs; the machine's load shows in the range. The
CPU time of a snapshot per turn (tether's and its git processes', which the
load of a shared machine changes less than the wall time) is printed too.
"""

from __future__ import annotations

import argparse
import functools
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tether.rewind.store import WorkspaceStore  # noqa: E402


def make_repository(root: Path, files: int) -> None:
    per_dir = 100
    for index in range(files):
        directory = root / f"pkg{index // per_dir:03d}"
        directory.mkdir(exist_ok=True)
        (directory / f"mod{index % per_dir:03d}.py").write_text(
            f"# module {index}\nVALUE = {index}\n" + "x = 1\n" * 20
        )
    (root / ".gitignore").write_text("*.log\n__pycache__/\n")
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "tree"], cwd=root, check=True)


def change(root: Path, run: int, count: int) -> None:
    for index in range(count):
        path = root / f"pkg{(run * 7 + index) % 100:03d}" / f"mod{index:03d}.py"
        path.write_text(path.read_text() + f"# run {run}\n")
    (root / f"new{run}.txt").write_text(f"run {run}\n")


def timed(action: object, cpu: list[float] | None = None) -> float:
    """The wall time of ``action()`` (ms); its CPU time, with its children's, goes to ``cpu``."""
    before = cpu_time()
    start = time.perf_counter()
    action()  # type: ignore[operator]
    wall = (time.perf_counter() - start) * 1000
    if cpu is not None:
        cpu.append((cpu_time() - before) * 1000)
    return wall


def cpu_time() -> float:
    """Seconds of CPU used by this process and its children waited for."""
    return sum(
        usage.ru_utime + usage.ru_stime
        for usage in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    )


def describe(name: str, samples: list[float]) -> str:
    return (
        f"{name:<28} median {statistics.median(samples):7.1f} ms   "
        f"range {min(samples):6.1f} to {max(samples):6.1f} ms   ({len(samples)} runs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--changed", type=int, default=3)
    parser.add_argument("--scan", action="store_true", help="no watcher: scan every time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-rewind-") as temporary:
        root = Path(temporary) / "repo"
        root.mkdir()
        make_repository(root, args.files)
        store = WorkspaceStore(root, Path(temporary) / "home", watch=not args.scan)
        first = timed(store.snapshot)
        how = "scanned" if args.scan else "watched"
        print(f"{args.files} files ({how}), {args.changed} changed (and 1 created) per turn")
        print(f"{'first snapshot (every file)':<28} {first:7.1f} ms")
        unchanged = [timed(store.snapshot) for _ in range(args.runs)]
        per_turn: list[float] = []
        cpu: list[float] = []
        for run in range(args.runs):
            change(root, run, args.changed)
            per_turn.append(timed(store.snapshot, cpu))
        rewinds: list[float] = []
        for run in range(args.runs):
            turn_start = store.snapshot().tree
            change(root, 1000 + run, args.changed)
            store.snapshot()
            rewinds.append(timed(functools.partial(store.restore, turn_start)))
        print(describe("snapshot, unchanged tree", unchanged))
        print(describe("snapshot per turn", per_turn))
        print(describe("  its CPU time (with git's)", cpu))
        print(describe("rewind (restore)", rewinds))
        store.close()


if __name__ == "__main__":
    main()
