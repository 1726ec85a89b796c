"""Helpers of the shell tests: named pipes to synchronize with a command, the process table."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tether.shell import ShellExecRequest, ShellExecSpec, ShellExecutor
from tether.shell.confinement import landlock_abi


def spec(shell: ShellExecutor, command: str, **fields: Any) -> ShellExecSpec:
    """Resolve a request for ``command`` with ``fields``."""
    return shell.resolve(ShellExecRequest(command, **fields))


class _NamedPipe:
    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path

    def __str__(self) -> str:
        return str(self.path)


class Gate(_NamedPipe):
    """A named pipe a command writes one line to (``echo $$ > GATE``); the test awaits it.

    Awaiting the line is the event that proves the command got that far. The
    command's output written before the line has been captured by then too:
    both pipes are read by the same event loop, and the line is handed to the
    test one loop iteration after it arrived.
    """

    async def line(self) -> str:
        loop = asyncio.get_running_loop()
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        # Our own writer keeps the pipe from reporting EOF before the command opens it.
        keep_open = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
        )
        try:
            return (await reader.readline()).decode().strip()
        finally:
            transport.close()
            os.close(keep_open)


class Latch(_NamedPipe):
    """A named pipe a command blocks on (``read x < LATCH``) until the test releases it."""

    async def release(self) -> None:
        # Opening for writing blocks until the command opens the pipe to read.
        await asyncio.to_thread(self.path.write_text, "go\n")


def text_of(path: str | Path) -> str:
    return Path(path).read_text()


def entries(directory: Path) -> list[Path]:
    return list(directory.iterdir())


def mode_of(path: str | Path) -> int:
    return stat.S_IMODE(Path(path).stat().st_mode)


def _state_and_group(pid: int | str) -> tuple[bytes, int] | None:
    """A process's state letter and process group, from ``/proc``; None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()
    except OSError:
        return None
    return fields[0], int(fields[2])


_DEAD = (b"Z", b"X")
"""A zombie is dead, only not yet reaped (an init that never reaps orphans leaves them)."""


def alive(pid: int) -> bool:
    """True while ``pid`` runs."""
    found = _state_and_group(pid)
    return found is not None and found[0] not in _DEAD


def live_members(pgid: int) -> list[int]:
    """The pids of processes in group ``pgid`` that are alive."""
    members = []
    for entry in os.listdir("/proc"):
        found = _state_and_group(entry) if entry.isdigit() else None
        if found is not None and found[1] == pgid and found[0] not in _DEAD:
            members.append(int(entry))
    return members


async def gone(pgid: int, within: float = 2.0) -> bool:
    """True once group ``pgid`` has no live process, checked until ``within`` seconds pass.

    Processes sent SIGKILL die as soon as the kernel schedules them, so the
    process table is given a bounded moment to catch up.
    """
    return await _settles(lambda: not live_members(pgid), within)


async def ended(pid: int, within: float = 2.0) -> bool:
    """True once process ``pid`` is dead, checked until ``within`` seconds pass.

    See :func:`gone`."""
    return await _settles(lambda: not alive(pid), within)


async def _settles(done: Callable[[], bool], within: float) -> bool:
    deadline = time.monotonic() + within
    while not done():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def require_landlock() -> None:
    """Skip the calling test, in one line, where the kernel has no Landlock; fail under CI."""
    if landlock_abi() == 0:
        if os.environ.get("CI") == "true":
            pytest.fail("the sandbox needs Landlock, and CI must have it")
        pytest.skip("no Landlock on this kernel: the sandbox cannot be tested here")
