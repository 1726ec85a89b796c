"""No orphans after SIGKILL of ``tether acp``: the watchdog kills at once, a restart sweeps."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

from tests.acp.harness import LEDGER, AcpProcess, serving
from tests.shell.support import Gate, alive, ended

REAL_BASH = (
    """\
plugins:
  - id: scripted
    plugin: tests.acp.scripted
"""
    + LEDGER
)
"""The scripted model with the real ``bash`` tools (and so the real shell executor)."""

WITHIN = 1.0
"""Seconds every process of a killed tether may take to go."""


def state_file(server: AcpProcess) -> Path:
    return server.home / "run" / f"groups-{socket.gethostname()}.json"


async def start_sleepers(server: AcpProcess, tmp_path: Path) -> tuple[int, int]:
    """A background and a foreground command, each with a ``sleep`` bash forked (not
    exec'd, so only the watchdog reaches it); their sleeps' pids."""
    background, foreground = Gate(tmp_path / "bg"), Gate(tmp_path / "fg")
    # Sessions working where the gates are: the sandbox lets them write there.
    worker = await server.new_session(tmp_path)
    holder = await server.new_session(tmp_path)
    bg_line = asyncio.ensure_future(background.line())
    started = await server.prompt(worker, f"bg sleep 301 & echo $! > {background}; wait")
    assert started == "end_turn"
    fg_line = asyncio.ensure_future(foreground.line())
    server.start_prompt(holder, f"bash sleep 302 & echo $! > {foreground}; wait")
    return int(await bg_line), int(await fg_line)


async def test_sigkill_of_tether_acp_leaves_no_process_behind(tmp_path: Path) -> None:
    async with serving(tmp_path, overlay=REAL_BASH) as server:
        sleepers = await start_sleepers(server, tmp_path)
        assert all(alive(pid) for pid in sleepers)
        # The watchdog knows the groups at once; the state file a moment later.
        assert await _until(state_file(server), lambda groups: len(groups) == 2)
        recorded = _recorded(state_file(server))
        assert {record["owner_pid"] for record in recorded} == {server.process.pid}  # type: ignore[index]
        server.process.kill()
        await server.process.wait()
        for pid in sleepers:
            assert await ended(pid, within=WITHIN)
        # The watchdog forgot what it killed.
        assert await _until(state_file(server), lambda groups: not groups)


async def test_a_restart_sweeps_what_a_crashed_tether_left(tmp_path: Path) -> None:
    async with serving(tmp_path, overlay=REAL_BASH) as server:
        sleepers = await start_sleepers(server, tmp_path)
        # A crash the watchdog does not see: it is killed first.
        assert await _until(state_file(server), lambda groups: len(groups) == 2)
        watchdog = _watchdog_of(server.process.pid)
        os.kill(watchdog, signal.SIGKILL)
        server.process.kill()
        await server.process.wait()
        assert all(alive(pid) for pid in sleepers)
    async with serving(tmp_path, overlay=REAL_BASH) as restarted:
        await restarted.new_session()  # the shell executor has started: the sweep is done
        for pid in sleepers:
            assert await ended(pid, within=WITHIN)
        assert json.loads(state_file(restarted).read_text())["groups"] == []


def _watchdog_of(owner: int) -> int:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            command = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"watch" in command and str(owner).encode() in command:
            return int(entry)
    raise AssertionError(f"no watchdog for {owner}")


async def _until(path: Path, holds: Callable[[list[object]], bool]) -> bool:
    """Whether the recorded groups come to satisfy ``holds`` within :data:`WITHIN` seconds
    (the file is rewritten by another process; nothing announces it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WITHIN
    while not holds(_recorded(path)):
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def _recorded(path: Path) -> list[object]:
    """The groups in the state file (none while it does not exist)."""
    if not path.exists():
        return []
    groups: list[object] = json.loads(path.read_text())["groups"]
    return groups
