"""``!command`` in chat: a shell command the person runs, its output for the next prompt.

The command runs in the session's directory, in a process group of its own,
with the person's environment (it is theirs, not the agent's: no sandbox, no
question). Its output (stdout and stderr together) is shown as it ends,
folded like a tool's, and kept, cut at :data:`KEPT_OUTPUT_CHARS`, to go with
the next prompt the person sends, so the model reads what they saw. Ctrl-C,
SIGTERM or SIGHUP stop it: SIGTERM to its group, then SIGKILL after
:data:`GRACE_SECONDS`; the chat waits until the group is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import NamedTuple

__all__ = ["GRACE_SECONDS", "KEPT_OUTPUT_CHARS", "OwnCommand", "OwnResult", "for_the_model"]

KEPT_OUTPUT_CHARS = 30_000
"""The most characters of a command's output kept for the model (the head and the tail)."""

GRACE_SECONDS = 2.0
"""How long a stopped command's group has after SIGTERM before SIGKILL."""


class OwnResult(NamedTuple):
    """How a command ended: its output (whole), and its exit code, or the signal
    that ended it as a negative number (``None``: stopped by the person)."""

    command: str
    output: str
    code: int | None


class OwnCommand:
    """One ``!command``: :meth:`run` it, :meth:`stop` it from a signal handler."""

    def __init__(self, command: str, cwd: str) -> None:
        self.command = command
        self._cwd = cwd
        self._process: asyncio.subprocess.Process | None = None
        self._stopped = False
        self._kill: asyncio.TimerHandle | None = None

    async def run(self) -> OwnResult:
        """Run the command to its end (or its stop); its :class:`OwnResult`.

        Raises:
            OSError: the shell could not be started (the message says why).
        """
        self._process = process = await asyncio.create_subprocess_shell(
            self.command,
            cwd=self._cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        if self._stopped:  # stopped while the shell was starting
            self._terminate(process)
        try:
            assert process.stdout is not None
            output = await process.stdout.read()
            code = await process.wait()
        finally:
            if process.returncode is None:  # cancelled: the group goes with it
                self.stop()
            await asyncio.shield(self._reaped(process))
        text = output.decode(errors="replace")
        return OwnResult(self.command, text, None if self._stopped else code)

    def stop(self) -> None:
        """Stop the command's process group: SIGTERM now, SIGKILL after the grace.
        Asked before the shell has started, it is stopped as it starts."""
        if self._stopped:
            return
        self._stopped = True
        if self._process is not None:
            self._terminate(self._process)

    def _terminate(self, process: asyncio.subprocess.Process) -> None:
        _signal_group(process.pid, signal.SIGTERM)
        loop = asyncio.get_running_loop()
        self._kill = loop.call_later(GRACE_SECONDS, _signal_group, process.pid, signal.SIGKILL)

    async def _reaped(self, process: asyncio.subprocess.Process) -> None:
        """Once the shell has ended, what it left running in its group is killed."""
        await process.wait()
        if self._kill is not None:
            self._kill.cancel()
        _signal_group(process.pid, signal.SIGKILL)


def _signal_group(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def for_the_model(result: OwnResult) -> str:
    """The text that goes with the next prompt: the command, how it ended, its output
    (the head and the tail of one longer than :data:`KEPT_OUTPUT_CHARS`)."""
    output = result.output
    if len(output) > KEPT_OUTPUT_CHARS:
        half = KEPT_OUTPUT_CHARS // 2
        cut = len(output) - 2 * half
        output = f"{output[:half]}\n[… {cut:,} characters left out …]\n{output[-half:]}"
    ended = "it was stopped" if result.code is None else f"exit code {result.code}"
    return (
        f"I ran this shell command myself in the session's directory ({ended}):\n"
        f"$ {result.command}\n{output.rstrip()}"
    )
