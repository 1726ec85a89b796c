"""The executor's side of :mod:`tether.shell.orphans`: record each group, keep a watchdog.

:class:`OrphanGuard` is what a shell executor holds: :meth:`~OrphanGuard.track`
records a command's process group the moment it starts (and starts this
process's watchdog with the first one), :meth:`~OrphanGuard.untrack` forgets
it when it ends, :meth:`~OrphanGuard.close` lets the watchdog go once every
command has ended. The record is a safety net, never a condition for running
a command: a state file that cannot be written is logged once and commands
run on unrecorded (the parent-death signal still reaches every leader).
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
from pathlib import Path

from tether.shell.orphans import GroupLedger, Swept, watchdog_command

log = logging.getLogger(__name__)


class OrphanGuard:
    """Records the process groups of one executor in the state file at ``path``."""

    def __init__(self, path: Path) -> None:
        self._ledger = GroupLedger(path)
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._lifeline: int | None = None
        """The write end of the watchdog's pipe: held, never written, closed by our death."""
        self._failed = False

    @property
    def path(self) -> Path:
        return self._ledger.path

    @property
    def watchdog_pid(self) -> int | None:
        return self._watchdog.pid if self._watchdog is not None else None

    def sweep(self) -> list[Swept]:
        """Kill the groups that tethers no longer alive left behind (see ``GroupLedger.sweep``)."""
        try:
            swept = self._ledger.sweep()
        except OSError as exc:
            self._warn(exc)
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
        """Record the group ``pgid`` of a command that just started."""
        if self._failed:
            return
        try:
            self._ensure_watchdog()
            self._ledger.add(pgid, label)
        except OSError as exc:
            self._warn(exc)

    def untrack(self, pgid: int) -> None:
        """Forget the group ``pgid``: its command has ended."""
        if self._failed:
            return
        try:
            self._ledger.remove(pgid)
        except OSError as exc:
            self._warn(exc)

    async def close(self) -> None:
        """Let the watchdog go (call once no command runs) and wait until it has exited."""
        lifeline, self._lifeline = self._lifeline, None
        watchdog, self._watchdog = self._watchdog, None
        if lifeline is not None:
            os.close(lifeline)
        if watchdog is not None:
            await asyncio.to_thread(watchdog.wait)

    def _ensure_watchdog(self) -> None:
        if self._watchdog is not None:
            return
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
        self._lifeline = write_end

    def _warn(self, exc: OSError) -> None:
        if not self._failed:
            self._failed = True
            log.warning(
                "cannot keep the record of running commands in %s (%s): "
                "commands a crash leaves behind will not be swept",
                self._ledger.path,
                exc,
            )
