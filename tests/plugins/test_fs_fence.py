"""The workspace fence holds under races.

A second process swaps a directory of the workspace for a symlink to a
directory outside it, as fast as it can, while the file tools read, write,
edit, glob and grep through that directory: nothing outside may be read,
created or changed. Each race runs with ``openat2`` and with the walk used
where the kernel lacks it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.plugins.fs_support import file_tools
from tether.plugins.fs import beneath

RACE_SECONDS = 1.5
"""How long each race runs (thousands of calls)."""

SWAPPER = """
import os, shutil, sys
ws, outside = sys.argv[1], sys.argv[2]
d, away = os.path.join(ws, "d"), os.path.join(ws, "d-away")

def step(call, *args):
    try:
        call(*args)
    except OSError:
        pass  # a tool call made ``d`` in between: the next round puts things back

print("swapping", flush=True)
while True:
    if os.path.lexists(away):
        if os.path.islink(d):
            step(os.unlink, d)
        else:
            shutil.rmtree(d, ignore_errors=True)
        step(os.rename, away, d)
    step(os.rename, d, away)
    step(os.symlink, outside, d)
    step(os.unlink, d)
    step(os.rename, away, d)
"""
"""Swaps ``ws/d`` (a directory) for a symlink to ``outside`` and back, forever."""


@pytest.fixture(params=["openat2", "walk"])
def resolution(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each race with ``openat2`` and with the ``O_NOFOLLOW`` walk (forced)."""
    if request.param == "openat2":
        if not beneath.has_openat2():
            pytest.skip("this kernel has no openat2")
    else:
        monkeypatch.setattr(beneath, "has_openat2", lambda: False)
    return str(request.param)


@pytest.fixture
def swapped(tmp_path: Path) -> Iterator[Path]:
    """``ws/d`` swapped for a symlink to ``outside`` by another process; yields ``outside``."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("SECRET\n")
    (outside / "only-outside.txt").write_text("SECRET\n")
    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    (ws / "d" / "f.txt").write_text("inside\n")
    process = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(ws), str(outside)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "swapping\n"
        yield outside
        assert process.poll() is None, "the swapping stopped before the race ended"
    finally:
        process.kill()
        process.wait()


async def race(body: object, budget: float = RACE_SECONDS) -> int:
    """Call the coroutine function ``body(n)`` for ``budget`` seconds; how many calls ran."""
    deadline = time.monotonic() + budget
    n = 0
    while time.monotonic() < deadline:
        await body(n)  # type: ignore[operator]
        n += 1
    return n


async def test_a_directory_swapped_for_a_symlink_never_lets_read_out(
    tmp_path: Path, resolution: str, swapped: Path
) -> None:
    async with file_tools(tmp_path, outside_workspace="deny") as fs:
        leaks: list[str] = []

        async def read(n: int) -> None:
            content, _ = await fs.call("read", path="d/f.txt")
            if "SECRET" in content:
                leaks.append(content)

        calls = await race(read)
        assert calls > 200
        assert leaks == [], f"{len(leaks)} of {calls} reads returned a file outside"


async def test_a_directory_swapped_for_a_symlink_never_lets_write_out(
    tmp_path: Path, resolution: str, swapped: Path
) -> None:
    async with file_tools(tmp_path, outside_workspace="deny") as fs:

        async def write(n: int) -> None:
            await fs.call("write", path=f"d/new-{n}.txt", content="x")

        calls = await race(write)
        assert calls > 200
        escaped = sorted(set(os.listdir(swapped)) - {"f.txt", "only-outside.txt"})
        assert escaped == [], f"{len(escaped)} of {calls} writes created files outside"
        assert (swapped / "f.txt").read_text() == "SECRET\n"


async def test_a_directory_swapped_for_a_symlink_never_lets_a_search_out(
    tmp_path: Path, resolution: str, swapped: Path
) -> None:
    async with file_tools(tmp_path, outside_workspace="deny", grep_engine="python") as fs:
        leaks: list[str] = []

        async def search(n: int) -> None:
            for tool, arguments in (
                ("grep", {"pattern": "SEC(RET)", "path": "d", "output_mode": "content"}),
                ("grep", {"pattern": "SEC(RET)", "path": "d/f.txt", "output_mode": "content"}),
                ("glob", {"pattern": "*", "path": "d"}),
            ):
                content, _ = await fs.call(tool, **arguments)
                if "SECRET" in content or "only-outside" in content:
                    leaks.append(content)

        await race(search)
        assert leaks == []
