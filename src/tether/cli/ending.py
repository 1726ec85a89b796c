"""How a command's agent work ends: termination signals and the durable acknowledgement.

**Signals.** SIGTERM and SIGHUP are handled like Ctrl-C: the running turn is
cancelled (cause ``user``), its closing events are written, and the command
exits with ``128 + signal`` (143, 129).

**Acknowledgement.** A command acknowledges a turn (prints its outcome,
exits with its status, shows the next ``you>`` prompt) only once
:func:`acknowledge` has returned ``None``: everything the turn appended is
on disk.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

from tether.cli.failures import describe

if TYPE_CHECKING:
    from tether.agent import Agent

TERMINATING = (signal.SIGTERM, signal.SIGHUP)


class Terminations:
    """While entered, SIGTERM and SIGHUP cancel ``agent``'s work and call ``then``.

    :attr:`exit_status` is ``128 + signal`` once one arrived, else ``None``.
    """

    def __init__(self, agent: Agent, then: Callable[[], None] | None = None) -> None:
        self._agent = agent
        self._then = then
        self.signum: int | None = None

    @property
    def exit_status(self) -> int | None:
        return None if self.signum is None else 128 + self.signum

    def __enter__(self) -> Terminations:
        loop = asyncio.get_running_loop()
        for signum in TERMINATING:
            loop.add_signal_handler(signum, self._on_signal, signum)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        for signum in TERMINATING:
            loop.remove_signal_handler(signum)

    def _on_signal(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum
        self._agent.cancel()
        if self._then is not None:
            self._then()


async def acknowledge(agent: Agent) -> str | None:
    """Flush the agent's session: ``None`` once it is durable, else why it is not (one line)."""
    from tether.session.store import SessionStore

    try:
        await agent.ctx.service("sessions", SessionStore).flush(agent.session)
    except Exception as exc:
        cause = exc.exceptions[0] if isinstance(exc, ExceptionGroup) and exc.exceptions else exc
        reason = describe(cause) or str(cause)
        return f"session {agent.id} could not be stored: {reason}"
    return None
