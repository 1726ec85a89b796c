"""``!command`` in chat: a shell command the person runs, its output for the next prompt.

The command runs through the shell executor (:mod:`tether.shell`), as the
agent's foreground commands do, so it has their guarantees: a process group
of its own, a parent-death signal (it dies with tether, even a SIGKILLed
one), the record that sweeps it at the next start if it outlived tether
anyway, and a stop of the whole group. It is the person's, not the agent's:
no owner token, no sandbox, no question, and the person's own environment
(the executor adds only its non-interactive defaults, such as ``PAGER=cat``,
where the person sets none). It runs in the session's directory; its
output (stdout and stderr together) is shown as it ends, folded like a
tool's, and kept, cut at :data:`KEPT_OUTPUT_CHARS`, to go with the next
prompt the person sends, so the model reads what they saw. Ctrl-C, SIGTERM
or SIGHUP stop it: SIGTERM to its group, then SIGKILL after the executor's
kill grace (2 s by default); the chat waits until the group is gone. The
executor's longest timeout (``max_timeout_ms``, 10 minutes by default)
stops one that runs longer.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import TYPE_CHECKING, NamedTuple

from tether.runtime.signal import CancelSignal

if TYPE_CHECKING:
    from tether.shell import ShellExecutor, ShellResult

__all__ = ["KEPT_OUTPUT_CHARS", "OwnCommand", "OwnResult", "for_the_model"]

KEPT_OUTPUT_CHARS = 30_000
"""The most characters of a command's output kept for the model (the head and the tail)."""

log = logging.getLogger(__name__)

_LONGEST_MS = 1 << 40
"""The timeout asked for: the executor cuts it to its longest."""


class OwnResult(NamedTuple):
    """How a command ended: its output (whole), and its exit code, or the signal
    that ended it as a negative number (``None``: stopped by the person)."""

    command: str
    output: str
    code: int | None


class OwnCommand:
    """One ``!command`` run by ``shell``: :meth:`run` it, :meth:`stop` it from a
    signal handler."""

    def __init__(self, command: str, cwd: str, shell: ShellExecutor) -> None:
        self.command = command
        self._cwd = cwd
        self._shell = shell
        self._stop = CancelSignal()

    async def run(self) -> OwnResult:
        """Run the command to its end (or its stop); its :class:`OwnResult`.

        Raises:
            ShellError: the shell could not be started (the message says why).
        """
        from tether.shell import ShellExecRequest

        spec = self._shell.resolve(
            ShellExecRequest(
                # One stream, as a terminal shows it: stderr joins stdout in order.
                command=f"exec 2>&1\n{self.command}",
                cwd=self._cwd,
                env=dict(os.environ),
                timeout_ms=_LONGEST_MS,
                owner=None,
            )
        )
        result = await self._shell.run(spec, self._stop)
        return OwnResult(self.command, _whole_output(result), _code(result))

    def stop(self) -> None:
        """Stop the command's process group: SIGTERM now, SIGKILL after the grace.
        Asked before the shell has started, it never starts."""
        self._stop.cancel("stopped by the person")


def _code(result: ShellResult) -> int | None:
    if result.aborted:
        return None
    if result.signal is not None:
        return -signal.Signals[result.signal].value
    return result.exit_code


def _whole_output(result: ShellResult) -> str:
    """The command's whole output: what memory kept, or the file it spilled to."""
    if result.stdout_truncated and result.stdout_spill is not None:
        try:
            with open(result.stdout_spill, "rb") as spilled:
                return spilled.read().decode(errors="replace")
        except OSError:
            log.warning("could not read %s back; only its tail is kept", result.stdout_spill)
    return result.stdout


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
