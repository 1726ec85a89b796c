"""The sessions the bridge is loading or resuming, until each load has ended.

From the moment a ``session/load`` or ``session/resume`` begins until its
load has ended (published or failed), :class:`Openings` holds the session:
a ``session/close`` waits for the load and closes the session, a
``session/cancel`` is applied as soon as it is open, another load or resume
joins it (:meth:`Opening.joined`). The load's failure is its request's and
every joiner's.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from tether.acp.errors import CwdMismatchError

if TYPE_CHECKING:
    from tether.acp.record import SessionRecord
    from tether.agent import Agent
    from tether.front.host import SessionHost


class Opening:
    """A session being loaded or resumed: its entry until the load ends."""

    __slots__ = ("cancelled", "replays", "task")

    def __init__(self, replays: bool) -> None:
        self.replays = replays
        """Whether the load in progress replays the history to the client."""
        self.cancelled = False
        """A ``session/cancel`` arrived meanwhile: applied once the session is open."""
        self.task: asyncio.Task[SessionRecord] | None = None

    async def ended(self) -> bool:
        """Wait for the load to end; whether it opened the session."""
        assert self.task is not None
        await asyncio.wait({self.task})
        return not self.task.cancelled() and self.task.exception() is None

    async def joined(self, cwd: str) -> SessionRecord:
        """The session, once the load in progress has opened it.

        Raises:
            CwdMismatchError: the session belongs to another directory than ``cwd``.
            Exception: what the load in progress raised.
        """
        assert self.task is not None
        record = await asyncio.shield(self.task)
        check_cwd(record.agent, cwd)
        return record


class Openings:
    """The loads in progress, by session id (see the module docs)."""

    def __init__(self, host: SessionHost[SessionRecord]) -> None:
        self._host = host
        self._loads: dict[str, Opening] = {}

    def get(self, session_id: str) -> Opening | None:
        """The load of ``session_id`` in progress, if any."""
        return self._loads.get(session_id)

    async def open(
        self,
        session_id: str,
        work: Coroutine[Any, Any, SessionRecord],
        *,
        replays: bool,
        check: Callable[[], object],
    ) -> SessionRecord:
        """Load or resume session ``session_id`` by ``work`` (which replays, or not) in a
        task the host owns, the session known as opening until ``work`` has ended.

        Raises:
            What ``check`` raises (``work`` is closed, never run), what ``work`` raises.
        """
        opening = Opening(replays)

        async def open_it() -> SessionRecord:
            record = await work
            if opening.cancelled:
                record.cancel()
            return record

        try:
            check()
        except Exception:
            work.close()
            raise
        opening.task = self._host.spawn(open_it())
        self._loads[session_id] = opening

        def ended(_: object) -> None:
            if self._loads.get(session_id) is opening:
                del self._loads[session_id]

        opening.task.add_done_callback(ended)
        return await asyncio.shield(opening.task)


def check_cwd(agent: Agent, cwd: str) -> None:
    """Raises: CwdMismatchError: ``agent``'s session belongs to another directory."""
    stored = agent.session.header.cwd
    if not same_dir(stored, cwd):
        raise CwdMismatchError(agent.id, stored, cwd)


def same_dir(a: str, b: str) -> bool:
    return os.path.normpath(a) == os.path.normpath(b)
