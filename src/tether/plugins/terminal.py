"""Running a foreground ``bash`` command in a terminal the client shows: the seam.

A frontend that can show commands live (the ACP bridge, when the client
advertises ``terminal`` and ``tether acp --terminal client`` chose it) answers
:data:`CLIENT_TERMINAL` for its own agents with a :class:`Terminals`; the
``bash`` tool then runs foreground commands through it instead of the local
executor. Background tasks always run in the local executor: they outlive
the call, and ``bash_output``/``bash_kill`` reach them through its owner
fence.

The contract of :meth:`Terminals.run` mirrors the executor's foreground run:
the command runs in ``cwd`` under ``bash -c``; the call's cancel signal and
the timeout stop it (the terminal is killed, its exit awaited, and the stop
reported with how long it took); the terminal is released before ``run``
returns, whatever happened.
"""

from __future__ import annotations

from typing import Protocol

import msgspec

from tether.agent.types import Agent
from tether.runtime.keys import Serial
from tether.runtime.signal import CancelSignal
from tether.shell.definition import StopReport

__all__ = ["CLIENT_TERMINAL", "TERMINAL_PGID", "TerminalResult", "Terminals"]


TERMINAL_PGID = 0
"""The ``pgid`` of a stop of a client's terminal: its processes are the client's, not tether's."""


class TerminalResult(msgspec.Struct, frozen=True, kw_only=True):
    """How a command in a client's terminal ended, and its output (stdout and stderr, merged)."""

    terminal_id: str
    output: str
    truncated: bool
    exit_code: int | None
    signal: str | None
    timed_out: bool = False
    aborted: bool = False
    stop: StopReport | None = None
    """How the stop went: ``pgid`` :data:`TERMINAL_PGID`, ``signals`` the methods sent
    (``terminal/kill``), ``seconds`` from the kill to the reported exit (``None`` when
    no exit was reported in time)."""


class Terminals(Protocol):
    """Foreground commands of one session, run in its client's terminals."""

    async def run(
        self, command: str, *, cwd: str, timeout_ms: int, call_id: str, signal: CancelSignal
    ) -> TerminalResult:
        """Run ``command`` to its end, a timeout or a cancel (see the module docs).

        Raises:
            Exception: the client failed a request (the terminal is released if
                it was created).
        """
        ...


CLIENT_TERMINAL = Serial[Terminals | None, Agent]("shell/client-terminal")
"""Serial ``(agent) -> Terminals | None``: who runs ``agent``'s foreground commands
in a terminal of its client; with no answer, the local executor."""
