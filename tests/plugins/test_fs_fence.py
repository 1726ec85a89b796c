"""The workspace fence holds under races, and concurrent edits never lose an update.

A second process swaps a directory of the workspace for a symlink to a
directory outside it, as fast as it can, while the file tools read, write,
glob and grep through that directory: nothing outside may be read, created
or changed. Each race runs with ``openat2`` and with the walk used where the
kernel lacks it. Two edits of one file at once never both succeed unless both
landed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.plugins.fs_support import Files, file_tools
from tether.agent import Agent
from tether.plugins.fs import access

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


def changed(path: str) -> str:
    """The refusal of a change to ``path`` made since the model read it."""
    return (
        f"{path} changed on disk since it was last read: call the read tool with "
        f'{{"path": "{path}"}} again, then make this change again against what it shows'
    )


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
    with subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(ws), str(outside)], stdout=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline() == "swapping\n"
            yield outside
            assert process.poll() is None, "the swapping stopped before the race ended"
        finally:
            process.kill()


async def race(body: Callable[[int], Awaitable[None]], budget: float = RACE_SECONDS) -> int:
    """Call the coroutine function ``body(n)`` for ``budget`` seconds; how many calls ran."""
    deadline = time.monotonic() + budget
    n = 0
    while time.monotonic() < deadline:
        await body(n)
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


@pytest.mark.parametrize("engine", ["python", "rg"])
async def test_a_directory_swapped_for_a_symlink_never_lets_a_search_out(
    tmp_path: Path, resolution: str, swapped: Path, engine: str
) -> None:
    if engine == "rg" and shutil.which("rg") is None:
        pytest.skip("ripgrep is not installed")
    async with file_tools(tmp_path, outside_workspace="deny", grep_engine=engine) as fs:
        leaks: list[str] = []

        async def search(n: int) -> None:
            calls: tuple[tuple[str, dict[str, Any]], ...] = (
                ("grep", {"pattern": "SEC(RET)", "path": "d", "output_mode": "content"}),
                ("grep", {"pattern": "SEC(RET)", "path": "d/f.txt", "output_mode": "content"}),
                ("glob", {"pattern": "*", "path": "d"}),
            )
            for tool, arguments in calls:
                content, _ = await fs.call(tool, **arguments)
                if "SECRET" in content or "only-outside" in content:
                    leaks.append(content)

        await race(search)
        assert leaks == []


# -- concurrent edits ------------------------------------------------------------------


async def two_agents(fs: Files) -> tuple[Agent, Agent]:
    agents = fs.world.get("agents")
    first = (await agents.create(cwd=str(fs.root))).agent
    second = (await agents.create(cwd=str(fs.root))).agent
    return first, second


async def test_two_agents_editing_one_file_at_once_never_lose_an_edit(tmp_path: Path) -> None:
    async with file_tools(tmp_path) as fs:
        first, second = await two_agents(fs)
        outcomes = []
        for attempt in range(20):
            path = f"r{attempt}.txt"
            (fs.root / path).write_text("alpha\nbeta\n" + "filler\n" * 20_000)
            for agent in (first, second):
                await fs.call("read", path=path, agent=agent)
            (one, one_failed), (two, two_failed) = await asyncio.gather(
                fs.call("edit", path=path, old_string="alpha", new_string="ALPHA", agent=first),
                fs.call("edit", path=path, old_string="beta", new_string="BETA", agent=second),
            )
            text = (fs.root / path).read_text()
            assert ("ALPHA" in text) != one_failed, (one, text[:20])
            assert ("BETA" in text) != two_failed, (two, text[:20])
            for content, failed in ((one, one_failed), (two, two_failed)):
                if failed:
                    assert content == changed(str(path))
            outcomes.append((one_failed, two_failed))
        assert all(not (a and b) for a, b in outcomes), "one of two edits must land"


def overwrite_in_place(path: Path, head: str) -> None:
    with open(path, "r+") as stream:
        stream.write(head)


async def test_a_change_that_keeps_size_and_mtime_is_seen_before_an_edit(tmp_path: Path) -> None:
    async with file_tools(tmp_path) as fs:
        path = fs.root / "a.txt"
        path.write_text("one two\n")
        before = path.stat()
        await fs.ok("read", path="a.txt")
        overwrite_in_place(path, "ONE")  # the same inode, the same size
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert path.stat().st_size == before.st_size
        assert path.stat().st_mtime_ns == before.st_mtime_ns
        reason = await fs.refused("edit", path="a.txt", old_string="two", new_string="2")
        assert reason == changed("a.txt")
        assert "overwrote" not in await fs.refused("write", path="a.txt", content="new\n")
        assert path.read_text() == "ONE two\n"


async def test_a_change_is_seen_by_content_even_when_the_version_repeats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file system whose times are too coarse to tell two writes apart.
    monkeypatch.setattr(access, "disk_version", lambda info: "always the same")
    async with file_tools(tmp_path) as fs:
        path = fs.root / "a.txt"
        path.write_text("one two\n")
        await fs.ok("read", path="a.txt")
        path.write_text("ONE TWO\n")
        reason = await fs.refused("edit", path="a.txt", old_string="TWO", new_string="2")
        assert reason == changed("a.txt")
        assert path.read_text() == "ONE TWO\n"
