"""Foreground ``bash`` commands in the client's terminals (``terminal/create`` … ``release``).

When the client advertises ``terminal`` and ``tether acp --terminal client``
chose it, the bridge answers :data:`~tether.front.seams.CLIENT_TERMINAL`
for its own sessions with an :class:`EditorTerminals`. Each command:

1. ``terminal/create`` runs ``bash -c COMMAND`` in the session's ``cwd``
   (output kept up to :data:`OUTPUT_BYTE_LIMIT`), and the tool call shows the
   terminal (``terminal`` content), so the person watches it live;
2. ``terminal/wait_for_exit`` is awaited together with the call's cancel
   signal and its timeout;
3. on a cancel or a timeout, ``terminal/kill``, then the exit is awaited for
   up to :data:`KILL_GRACE` seconds; the stop (method, exit, seconds) goes on
   the turn's stop receipt;
4. ``terminal/output`` gives the output and exit status;
5. ``terminal/release`` — always, whatever happened before, so no terminal of
   the session outlives its call.

Terminals are created under the session's id, so they belong to it: no other
session can reach them, and a turn's cancel reaches only its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from tether.front.seams import TERMINAL_PGID, TerminalResult
from tether.runtime.signal import CancelSignal
from tether.shell.definition import StopReport

if TYPE_CHECKING:
    from tether.acp.record import ClientLink, SessionRecord

log = logging.getLogger(__name__)

OUTPUT_BYTE_LIMIT = 1_000_000
"""How much of a command's output the client is asked to keep (its end)."""

KILL_GRACE = 5.0
"""Seconds to wait for a killed terminal's command to exit."""

KILL = "terminal/kill"


class EditorTerminals:
    """The foreground commands of one session, run in its client's terminals."""

    def __init__(self, link: ClientLink, record: SessionRecord) -> None:
        self._link = link
        self._record = record

    async def run(
        self, command: str, *, cwd: str, timeout_ms: int, call_id: str, signal: CancelSignal
    ) -> TerminalResult:
        link, session_id = self._link, self._record.id
        terminal_id = await link.create_terminal(
            session_id, "bash", ["-c", command], cwd, OUTPUT_BYTE_LIMIT
        )
        exited: asyncio.Future[tuple[int | None, str | None]] = asyncio.ensure_future(
            link.wait_for_terminal_exit(session_id, terminal_id)
        )
        stopping = asyncio.ensure_future(signal.wait())
        try:
            self._record.show_terminal(call_id, terminal_id)
            waiting: set[asyncio.Future[object]] = {exited, stopping}  # type: ignore[arg-type]
            await asyncio.wait(
                waiting, timeout=timeout_ms / 1000, return_when=asyncio.FIRST_COMPLETED
            )
            stop = None
            timed_out = aborted = False
            if exited.done():
                exit_code, exit_signal = exited.result()
            else:
                aborted, timed_out = stopping.done(), not stopping.done()
                stop = await self._kill(session_id, terminal_id, exited)
                exit_code, exit_signal = stop.exit_code, stop.exit_signal
            output, truncated = await link.terminal_output(session_id, terminal_id)
        except BaseException:
            if not exited.done():
                with contextlib.suppress(Exception):
                    await link.kill_terminal(session_id, terminal_id)
            raise
        finally:
            stopping.cancel()
            exited.cancel()
            await asyncio.gather(stopping, exited, return_exceptions=True)
            try:
                await link.release_terminal(session_id, terminal_id)
            except Exception:
                log.warning("session %s: releasing terminal %s failed", session_id, terminal_id)
        return TerminalResult(
            terminal_id=terminal_id,
            output=output,
            truncated=truncated,
            exit_code=exit_code,
            signal=exit_signal,
            timed_out=timed_out,
            aborted=aborted,
            stop=stop,
        )

    async def _kill(
        self,
        session_id: str,
        terminal_id: str,
        exited: asyncio.Future[tuple[int | None, str | None]],
    ) -> StopReport:
        """``terminal/kill``, then the exit (or ``None`` seconds if it does not come in time)."""
        start = time.monotonic()
        await self._link.kill_terminal(session_id, terminal_id)
        exit_code = exit_signal = seconds = None
        try:
            async with asyncio.timeout(KILL_GRACE):
                exit_code, exit_signal = await asyncio.shield(exited)
            seconds = time.monotonic() - start
        except TimeoutError:
            pass  # no exit reported in time: the receipt says so (seconds None)
        return StopReport(
            pgid=TERMINAL_PGID,
            signals=(KILL,),
            exit_code=exit_code,
            exit_signal=exit_signal,
            seconds=seconds,
        )
