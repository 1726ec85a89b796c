"""Control of sessions across tether hosts that share one PostgreSQL database.

The database is the system of record; ``LISTEN``/``NOTIFY`` is only a
doorbell, delivered at commit, never replayed, never carrying data. Each
host listens on two channels of its schema (see
:func:`~tether.persist.backends.channels.channel`):

* ``events``: after its writes commit, each host notifies a line
  ``"<session id> <last seq>"`` per session written, coalesced (see
  :mod:`~tether.persist.backends.postgres_doorbell`); the host rings its
  follow :class:`~tether.persist.follow.Doorbell` for each, and followers
  read the events table by seq.
* ``runs``: a run was submitted to the queue (see
  :mod:`~tether.persist.backends.postgres_runs`); workers waiting for work
  wake (:attr:`Cluster.submitted`) and take it.
* ``control``: ``"cancel <session id>"`` asks the host that holds the session
  to cancel its work. Each host emits :data:`CANCEL_REQUESTED` for it; the
  host where the session is live cancels its agent with cause ``user`` (the
  ``cluster`` plugin does, one layer up). Any host can send it:
  :meth:`Cluster.cancel`. ``"drain <host> <grace>"`` asks the host ``host``
  (a host id, or ``HOST:PID`` for one process) to hand its live sessions
  to other hosts, letting running turns end within ``grace`` seconds: the
  hosts it names emit :data:`DRAIN_REQUESTED` (``tether worker`` drains on
  it). Any host can send it: :meth:`Cluster.drain`.

A lease this host lost to another host (its heartbeat or a write found the
fencing token changed) is announced as :data:`TAKEN_OVER`; the agent of that
session is stopped, and what it appends is never stored.

The listening connection is the :class:`Cluster`'s own task, reconnecting
after a loss (and ringing every follower then, since notifications sent
meanwhile are gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import TYPE_CHECKING, Any

from tether.persist.backends.channels import (
    CONTROL_CHANNEL,
    EVENTS_CHANNEL,
    RUNS_CHANNEL,
    channel,
    sessions_rung,
)
from tether.persist.backends.errors import LogStoreError
from tether.persist.backends.postgres_doorbell import CommitBell
from tether.persist.backends.records import validate_session_id
from tether.runtime.keys import Notice, ServiceKey

if TYPE_CHECKING:
    import psycopg

    from tether.persist.backends.postgres import PostgresBackend
    from tether.persist.backends.postgres_budget import ClusterOutcome, DayTotals
    from tether.persist.backends.postgres_runs import RunQueue
    from tether.persist.follow import Doorbell
    from tether.persist.submitted import SubmittedRun
    from tether.runtime import Context

log = logging.getLogger(__name__)

CLUSTER = ServiceKey["Cluster"]("cluster")
"""``ctx.cluster``: cross-host control of sessions (present with the PostgreSQL backend)."""

CANCEL_REQUESTED = Notice[str]("session/cancel-requested")
"""``(session_id)``: some host asked the holder of this session to cancel its work."""

TAKEN_OVER = Notice[str, str]("session/taken-over")
"""``(session_id, message)``: another host took this session over; ``message`` says which."""

DRAIN_REQUESTED = Notice[float]("host/drain-requested")
"""``(grace)``: some host asked this one to hand its live sessions to other hosts,
letting running turns end within ``grace`` seconds (see ``tether drain``)."""

RECONNECT_DELAY = 1.0
"""How long the listener waits before connecting again after losing its connection."""


class SessionNotLiveError(LogStoreError):
    """No host has the session live: there is nothing to cancel.

    ``last_host`` names the host that held it last (its lease expired or was
    given up), ``None`` when no host ever did.
    """

    def __init__(self, session_id: str, last_host: str | None = None) -> None:
        super().__init__(f"session {session_id} is not live on any host")
        self.session_id = session_id
        self.last_host = last_host


class Cluster:
    """Cross-host control over one PostgreSQL schema: cancel anywhere, hear appends."""

    def __init__(
        self, ctx: Context, backend: PostgresBackend, url: str, doorbell: Doorbell
    ) -> None:
        self._ctx = ctx
        self._backend = backend
        self._url = url
        self._doorbell = doorbell
        self._control = channel(backend.schema, CONTROL_CHANNEL)
        self._events = channel(backend.schema, EVENTS_CHANNEL)
        self._runs = channel(backend.schema, RUNS_CHANNEL)
        self._listening = asyncio.Event()
        self.bell = CommitBell(self._bell_connection, self._events)
        """Rings the events channel after this host's writes (see ``session/written``)."""
        self.submitted = asyncio.Event()
        """Set when a run is submitted on any host (and when the listener reconnects,
        since submissions meanwhile went unheard); a worker clears it before it looks
        at the queue, then waits on it."""

    @property
    def host_id(self) -> str:
        """This host's id."""
        return self._backend.host_id

    @property
    def schema(self) -> str:
        """The schema the hosts share."""
        return self._backend.schema

    @property
    def runs(self) -> RunQueue:
        """The run queue (blocking calls: run them in a worker thread)."""
        return self._backend.runs

    @property
    def lease_ttl(self) -> float:
        """How long a lease outlives its holder's last renewal, in seconds."""
        return self._backend.lease_ttl

    async def submit(
        self,
        task: str,
        *,
        cwd: str | os.PathLike[str] | None = None,
        model: str | None = None,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int = 3,
        session_id: str | None = None,
    ) -> SubmittedRun:
        """Store a run request and ring the queue's doorbell (a waiting worker on any
        host takes it at once); return the run, whose session id is known now.

        ``cwd`` (an absolute path; default: this process's directory) is where
        the run works on the worker's host, ``model`` its model (default: the
        worker's); higher ``priority`` runs first; ``queue`` names a queue
        workers may be limited to; a run taken ``max_attempts`` times without
        settling is parked. ``session_id`` defaults to a new id.

        Raises:
            ValueError: ``task`` is empty, ``cwd`` is relative or ``max_attempts``
                is below 1.
            InvalidSessionIdError: ``session_id`` is not a valid id.
            psycopg.errors.UniqueViolation: a run of ``session_id`` exists.
        """
        from tether.persist.submitted import SubmittedRun
        from tether.session.store import new_session_id

        where = os.getcwd() if cwd is None else os.fspath(cwd)
        if not os.path.isabs(where):
            raise ValueError(f"a run's cwd must be an absolute path, got {where!r}")
        session_id = session_id or new_session_id()
        await asyncio.to_thread(
            self._backend.runs.submit,
            session_id,
            task,
            cwd=where,
            model=model,
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
        )
        await self.ring_runs(session_id)
        return SubmittedRun(self, session_id)

    async def listening(self) -> None:
        """Return once the control and events channels are listened to."""
        await self._listening.wait()

    async def cancel(self, session_id: str) -> str:
        """Ask the host that has ``session_id`` live to cancel its work (cause ``user``).

        Returns the holder's host id once the request is sent (delivered at
        commit; the holder cancels when it hears it).

        Raises:
            InvalidSessionIdError: ``session_id`` is not a valid id.
            SessionNotLiveError: no host has the session live (it names the
                host that held it last).
        """
        validate_session_id(session_id)
        info = await asyncio.to_thread(self._backend.lease_info, session_id)
        if info is None or not info.live:
            raise SessionNotLiveError(session_id, None if info is None else info.host)
        await asyncio.to_thread(self._backend.notify, self._control, f"cancel {session_id}")
        return info.host

    async def drain(self, host: str, grace: float) -> None:
        """Ask ``host`` (a host id, or ``HOST:PID`` for one process) to hand its live
        sessions to other hosts, letting running turns end within ``grace`` seconds.

        Returns once the request is sent (delivered at commit; a host that is
        not listening then never hears it).

        Raises:
            ValueError: ``host`` is empty or holds white space, or ``grace`` is
                negative or not finite.
        """
        if not host or host != "".join(host.split()):
            raise ValueError(f"not a host id: {host!r}")
        if not 0 <= grace < float("inf"):
            raise ValueError(
                f"the grace period must be a finite number of seconds >= 0, got {grace}"
            )
        await asyncio.to_thread(self._backend.notify, self._control, f"drain {host} {grace!r}")

    def stored(self, session_id: str) -> bool:
        """Whether ``session_id`` is stored (blocking: run it in a worker thread).

        Raises:
            InvalidSessionIdError: ``session_id`` is not a valid id.
        """
        return self._backend.exists(session_id)

    def held_by(self, host: str) -> int | None:
        """How many sessions ``host`` (a host id, or ``HOST:PID``) has live; ``None``
        when no lease or run ever named it (blocking: run it in a worker thread)."""
        return self._backend.held_by(host)

    async def budget_outcome(self, session_id: str, reservation_id: str) -> ClusterOutcome | None:
        """How the cluster budget decided on reservation ``reservation_id``, logged by
        ``session_id`` in a committed batch (see
        :data:`~tether.persist.backends.postgres_schema.BUDGET_FUNCTION`); ``None``
        when it has no open row.

        Raises:
            psycopg.Error: the database cannot be read.
        """
        return await asyncio.to_thread(self._backend.budget_outcome, session_id, reservation_id)

    def budget_day(self, day: str) -> DayTotals:
        """What all hosts spent and have reserved on ``day`` (blocking: run it in a
        worker thread)."""
        return self._backend.budget_day(day)

    async def ring_runs(self, session_id: str) -> None:
        """Ring the run queue's doorbell: a worker waiting for work looks at once
        (a run given back, or handed off, by this host)."""
        await asyncio.to_thread(self._backend.notify, self._runs, session_id)

    def _heard_drain(self, rest: str) -> None:
        """``drain <host> <grace>``: emit :data:`DRAIN_REQUESTED` when it names this host."""
        host, _, grace = rest.partition(" ")
        try:
            seconds = float(grace)
        except ValueError:
            log.warning("a drain request with a bad grace period %r ignored", grace)
            return
        if host in (self.host_id, f"{self.host_id}:{os.getpid()}"):
            self._ctx.emit(DRAIN_REQUESTED, seconds)

    async def _bell_connection(self) -> psycopg.AsyncConnection[Any]:
        import psycopg

        return await psycopg.AsyncConnection.connect(
            self._url, autocommit=True, application_name="tether-bell"
        )

    async def run(self) -> None:
        """Listen until cancelled, reconnecting after a lost connection."""
        import psycopg

        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._url, autocommit=True, application_name="tether-listen"
                )
            except psycopg.OperationalError as exc:
                log.warning("listening for other hosts failed (%s); retrying", exc)
                await asyncio.sleep(RECONNECT_DELAY)
                continue
            try:
                await self._listen(conn)
            except psycopg.OperationalError as exc:
                log.warning("the listening connection was lost (%s); reconnecting", exc)
                self._listening.clear()
                self._doorbell.ring_all()
                self.submitted.set()
                await asyncio.sleep(RECONNECT_DELAY)
            finally:
                with contextlib.suppress(Exception):
                    await conn.close()

    async def _listen(self, conn: psycopg.AsyncConnection[Any]) -> None:
        from psycopg import sql

        for name in (self._control, self._events, self._runs):
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
        self._listening.set()
        async for notice in conn.notifies():
            if notice.channel == self._events:
                for session_id in sessions_rung(notice.payload):
                    self._doorbell.ring(session_id)
            elif notice.channel == self._runs:
                self.submitted.set()
            elif notice.channel == self._control:
                verb, _, session_id = notice.payload.partition(" ")
                if verb == "cancel" and session_id:
                    self._ctx.emit(CANCEL_REQUESTED, session_id)
                elif verb == "drain" and session_id:
                    self._heard_drain(session_id)
                else:
                    log.warning("unknown control message %r ignored", notice.payload)

    def taken_over(self, session_id: str, host: str | None) -> None:
        """Announce (on the loop) that ``session_id`` was taken over by ``host``."""
        message = f"session {session_id} was taken over by host {host or 'unknown'}"
        self._ctx.emit(TAKEN_OVER, session_id, message)
