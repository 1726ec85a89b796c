"""A run submitted to the PostgreSQL queue, as a value a program holds.

:meth:`Cluster.submit <tether.persist.cluster.Cluster.submit>` stores the run
request and returns a :class:`SubmittedRun`: the session id the run has (its
events can be followed with ``tether.persistence.follow(run.session_id)``
once a worker stored the session), its state as stored (:meth:`SubmittedRun.status`),
its settlement (:meth:`SubmittedRun.settled`) and its stop
(:meth:`SubmittedRun.cancel`). A worker on any host runs it
(``tether worker``, see ``docs/deploy.md``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from tether.persist.backends.postgres_runs import SETTLED, RunRequest

if TYPE_CHECKING:
    from tether.persist.cluster import Cluster

LOOK_AGAIN = 0.25
"""How often :meth:`SubmittedRun.settled` reads the run's state, in seconds (a run's
settlement rings no doorbell)."""


class SubmittedRun:
    """A run stored in the queue; every method reads or writes the database."""

    __slots__ = ("_cluster", "session_id")

    def __init__(self, cluster: Cluster, session_id: str) -> None:
        self._cluster = cluster
        self.session_id = session_id
        """The id of the session the run is (or will be, once a worker takes it)."""

    def __repr__(self) -> str:
        return f"<SubmittedRun {self.session_id}>"

    async def status(self) -> RunRequest:
        """The run as stored now: ``state`` (``queued``, ``running``, ``done``,
        ``failed``, ``cancelled``, ``parked``), ``attempts``, ``worker``, ``outcome``.

        Raises:
            LookupError: the run is no longer stored.
        """
        run = await asyncio.to_thread(self._cluster.runs.get, self.session_id)
        if run is None:
            raise LookupError(f"run {self.session_id} is not stored")
        return run

    async def settled(self) -> RunRequest:
        """Wait until the run is settled (``done``, ``failed``, ``cancelled`` or
        ``parked``) and return it as stored; bound the wait with
        ``asyncio.timeout`` (the run goes on).

        Raises:
            LookupError: the run is no longer stored.
        """
        while True:
            run = await self.status()
            if run.state in SETTLED:
                return run
            await asyncio.sleep(LOOK_AGAIN)

    async def cancel(self) -> None:
        """Stop the run: a queued one is cancelled at once (no worker will take it),
        a running one is cancelled on the host that has its session live (cause
        ``user``; its worker records it ``cancelled``). A settled run is left as it is.

        Raises:
            SessionNotLiveError: it is running, but no host has its session live
                (its worker died: it is taken over and goes on).
        """
        runs = self._cluster.runs
        if await asyncio.to_thread(runs.cancel_queued, self.session_id):
            return
        if (await self.status()).state == "running":
            await self._cluster.cancel(self.session_id)
