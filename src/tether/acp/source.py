"""Where an ACP server's bridge comes from: brought up once, on first demand.

:class:`LaunchedBridge` is the part of a :class:`~tether.acp.server.BridgeSource`
that every way of serving shares: one task launches the bridge together with
its owner (``tether acp``: the whole tether it boots; a network connection:
the bridge plugin's fiber, :mod:`tether.acp.remote`), and :meth:`shutdown`
runs the bridge's one teardown, then stops that owner. A subclass says how to
launch and how to stop (:meth:`_launch`, :meth:`_stop`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from tether.acp.bridge import Bridge

Owner = TypeVar("Owner")


class LaunchedBridge(Generic[Owner]):
    """A bridge and its owner (``Owner``), launched once by :meth:`start` (see the module docs)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._task: asyncio.Task[tuple[Owner, Bridge]] | None = None
        self._started = asyncio.Event()

    def start(self) -> None:
        """Begin the launch (idempotent)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._launch(), name=self._name)
            self._started.set()

    @property
    def failed(self) -> bool:
        """True when a launch was attempted and did not bring the bridge up."""
        task = self._task
        return task is not None and task.done() and self.ready() is None

    def ready(self) -> Bridge | None:
        """The bridge, if it is up."""
        task = self._task
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return None
        return task.result()[1]

    async def get(self) -> Bridge:
        """The bridge, once it is up (launching it if needed).

        Raises:
            Exception: what the launch raised.
        """
        self.start()
        assert self._task is not None
        return (await asyncio.shield(self._task))[1]

    async def bridge_closed(self) -> None:
        """Return when the bridge has been torn down (never, if it never comes up)."""
        await self._started.wait()
        assert self._task is not None
        await asyncio.wait({self._task})
        bridge = self.ready()
        if bridge is None:
            await asyncio.get_running_loop().create_future()
        else:
            await bridge.closed.wait()

    async def shutdown(self) -> None:
        """Close the bridge (its one teardown), then stop its owner; waits for a launch in
        progress, and does nothing for one that failed or never began."""
        task = self._task
        if task is None:
            return
        await asyncio.wait({task})
        if task.cancelled() or task.exception() is not None:
            return
        owner, bridge = task.result()
        try:
            await bridge.close()
        finally:
            await self._stop(owner)

    async def _launch(self) -> tuple[Owner, Bridge]:
        """Bring the bridge up with its owner (a failure leaves nothing running)."""
        raise NotImplementedError

    async def _stop(self, owner: Owner) -> None:
        """Stop ``owner`` once the bridge has closed."""
        raise NotImplementedError
