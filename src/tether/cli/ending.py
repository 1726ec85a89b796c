"""How a command's agent work ends: termination signals and the durable acknowledgement.

**Signals.** SIGTERM and SIGHUP are handled like Ctrl-C: the running turn is
cancelled (cause ``user``), its closing events are written, and the command
exits with ``128 + signal`` (143, 129).

**Acknowledgement.** A command acknowledges a turn (prints its outcome,
exits with its status, shows the next ``you>`` prompt) only once
:func:`acknowledge_turn` (the turn handle's ``durable``) or :func:`acknowledge`
has returned ``None``: everything the turn appended is on disk. Likewise it
shows the id of a session it created only once the session is stored.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

from tether.cli.failures import describe

if TYPE_CHECKING:
    from tether.agent import Agent, AgentHandle, TurnHandle

TERMINATING = (signal.SIGTERM, signal.SIGHUP)


class Terminations:
    """While entered, SIGTERM and SIGHUP cancel ``agent``'s work and call ``then``
    with the signal's name.

    :attr:`exit_status` is ``128 + signal`` once one arrived, else ``None``.
    """

    def __init__(self, agent: Agent, then: Callable[[str], None] | None = None) -> None:
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

    @property
    def stopped_by(self) -> str | None:
        """The name of the signal that stopped the work (``SIGTERM``), if one did."""
        return None if self.signum is None else signal.Signals(self.signum).name

    def _on_signal(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum
        self._agent.cancel()
        if self._then is not None:
            self._then(signal.Signals(signum).name)


async def acknowledge(agent: Agent, *, created: bool = False) -> str | None:
    """Flush the agent's session: ``None`` once it is durable, else why it is not (one line).

    With ``created`` (a session just made, whose id is about to be shown), a
    session without events is stored too, as its header: an id a command
    prints names a session that exists on disk.
    """
    from tether.agent.errors import storage_cause
    from tether.persist.service import store_created
    from tether.session.store import SESSIONS

    try:
        if created:
            await store_created(agent.ctx, agent.session)
        else:
            await agent.ctx.service(SESSIONS).flush(agent.session)
    except Exception as exc:
        return _not_stored(agent.id, storage_cause(exc))
    return None


async def acknowledge_turn(agent: Agent, turn: TurnHandle) -> str | None:
    """Wait until ``turn`` is settled (its turn ended, or it never ran) and on disk:
    ``None`` then, else why it is not stored (one line). Its outcome is ``turn.outcome``."""
    from tether.agent import NotStoredError

    try:
        await turn.durable()
    except NotStoredError as exc:
        return _not_stored(agent.id, exc.cause or exc)
    return None


def _not_stored(session_id: str, cause: BaseException) -> str:
    return f"session {session_id} could not be stored: {describe(cause) or str(cause)}"


def hold_back_repeats(*, verbose: bool) -> Callable[[], None]:
    """After a command said its work could not be stored: hold back the teardown's repeats.

    The teardown's own flushes fail the same way and would log it again;
    without ``verbose`` those error logs are held back until the returned
    function is called, so the failure is said once.
    """
    if verbose:
        return lambda: None
    logging.disable(logging.ERROR)
    return lambda: logging.disable(logging.NOTSET)


async def dispose_reporting(
    handle: AgentHandle, unstored: str | None, *, verbose: bool
) -> tuple[bool, Callable[[], None]]:
    """Say ``unstored`` (why the work is not on disk), if anything, then dispose the agent.

    Returns whether storing failed (before or in the teardown) and the
    function that releases the logs :func:`hold_back_repeats` held back;
    call it once tether has stopped.
    """
    from tether.agent.errors import AgentError

    release: Callable[[], None] = lambda: None  # noqa: E731
    if unstored is not None:
        print(f"tether: {unstored}", file=sys.stderr)
        release = hold_back_repeats(verbose=verbose)
    try:
        await handle.dispose()
    except AgentError as exc:
        if unstored is None:
            print(f"tether: {exc}", file=sys.stderr)
        return True, release
    return unstored is not None, release
