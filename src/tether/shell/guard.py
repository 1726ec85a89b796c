"""The executor's side of :mod:`tether.shell.orphans`: its groups, its watchdog, its record.

:class:`OrphanGuard` is what a shell executor holds. :meth:`~OrphanGuard.track`
is called the moment a command starts: the group is told to this process's
watchdog at once (started with the first command; one line on a pipe) and
written to the state file soon after — writes are batched, so a command that
ends within :data:`WRITE_DELAY` never costs a write. :meth:`~OrphanGuard.untrack`
forgets a group when its command ends; :meth:`~OrphanGuard.close` writes the
final record and lets the watchdog go once every command has ended.

The record is a safety net, never a condition for running a command: a state
file that cannot be written, or a watchdog that cannot be started or has
gone, is logged once, and commands run on (the parent-death signal still
reaches every leader).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
from pathlib import Path

from tether.shell.orphans import (
    FAREWELL,
    GroupLedger,
    GroupRecord,
    Swept,
    ended_line,
    started_line,
    watchdog_command,
)

log = logging.getLogger(__name__)

WRITE_DELAY = 0.1
"""Seconds a change to the running groups waits before the state file is rewritten."""


class OrphanGuard:
    """The running process groups of one executor, in the state file at ``path``."""

    def __init__(self, path: Path) -> None:
        self._ledger = GroupLedger(path)
        self._running: dict[int, GroupRecord] = {}
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._lifeline: int | None = None
        """The write end of the watchdog's pipe; our death closes it."""
        self._write: asyncio.TimerHandle | None = None
        self._written: set[int] = set()
        """The groups the state file holds for this guard, as it last wrote it."""
        self._warned: set[str] = set()

    @property
    def path(self) -> Path:
        return self._ledger.path

    @property
    def watchdog_pid(self) -> int | None:
        return self._watchdog.pid if self._watchdog is not None else None

    def sweep(self) -> list[Swept]:
        """Kill the groups that tethers no longer alive left behind (see ``GroupLedger.sweep``).

        Without a record on disk there is nothing to sweep, and nothing is
        created (a read-only home stays untouched).
        """
        if not self._ledger.path.exists():
            return []
        try:
            swept = self._ledger.sweep()
        except OSError as exc:
            self._warn("file", exc)
            return []
        for item in swept:
            if item.killed:
                log.warning(
                    "killed %d orphaned process(es) of group %d (%s), left by tether pid %d",
                    len(item.killed),
                    item.record.pgid,
                    item.record.label,
                    item.record.owner_pid,
                )
        return swept

    def track(self, pgid: int, label: str) -> None:
        """A command leading group ``pgid`` has just started."""
        record = self._ledger.record(pgid, label)
        if record is None:
            return
        self._running[pgid] = record
        self._tell(started_line(record))
        self._write_soon()

    def untrack(self, pgid: int) -> None:
        """The command of group ``pgid`` has ended."""
        if self._running.pop(pgid, None) is not None:
            self._tell(ended_line(pgid))
            self._write_soon()

    async def close(self) -> None:
        """Write the final record, let the watchdog go and wait until it has exited."""
        self.flush()
        self._ledger.close()
        lifeline, self._lifeline = self._lifeline, None
        watchdog, self._watchdog = self._watchdog, None
        if lifeline is not None:
            # Say goodbye, so the watchdog leaves the other executors of this
            # process alone; if it cannot be said, the watchdog reaps them all.
            with contextlib.suppress(OSError):
                os.write(lifeline, FAREWELL)
            os.close(lifeline)
        if watchdog is not None:
            await asyncio.to_thread(watchdog.wait)

    # -- internals -------------------------------------------------------------------

    def _tell(self, line: bytes) -> None:
        try:
            if self._lifeline is None:
                self._start_watchdog()
            assert self._lifeline is not None
            os.write(self._lifeline, line)
        except OSError as exc:
            self._warn("watchdog", exc)

    def _start_watchdog(self) -> None:
        self._ledger.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        read_end, write_end = os.pipe()
        try:
            self._watchdog = subprocess.Popen(
                watchdog_command(self._ledger.path, self._ledger.owner),
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        # Never block the event loop: a watchdog that stopped reading is logged instead.
        os.set_blocking(write_end, False)
        self._lifeline = write_end

    def _write_soon(self) -> None:
        if self._write is None:
            self._write = asyncio.get_running_loop().call_later(WRITE_DELAY, self.flush)

    def flush(self) -> None:
        """Write the record of the running groups now (it is written soon after each change)."""
        if self._write is not None:
            self._write.cancel()
            self._write = None
        if not self._running and not self._written:
            return  # nothing ever recorded, nothing to write
        try:
            self._ledger.replace(self._written | set(self._running), list(self._running.values()))
            self._written = set(self._running)
        except OSError as exc:
            self._warn("file", exc)

    def _warn(self, what: str, exc: OSError) -> None:
        if what in self._warned:
            return
        self._warned.add(what)
        if what == "file":
            log.warning(
                "cannot keep the record of running commands in %s (%s): "
                "commands a crash leaves behind will not be swept",
                self._ledger.path,
                exc,
            )
        else:
            log.warning(
                "the shell's watchdog is not available (%s): "
                "commands a crash leaves behind wait for the next sweep",
                exc,
            )
