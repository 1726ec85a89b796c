"""The events doorbell of the PostgreSQL backend: rung after commit, coalesced per host.

PostgreSQL serializes the commits of every transaction that ran ``NOTIFY``
(they take one database-wide lock to queue their notifications), so a
doorbell rung inside each append transaction would make every append of every
host wait for every other one. Appends therefore commit without it, and each
host's :class:`CommitBell` rings afterwards: one transaction (one statement)
carries the wake-ups of every session this host committed to since the last
one, at most one such transaction every :data:`INTERVAL` seconds per host.

The bell is loop-bound: the host's persistence tells it of each written
batch on the event loop (``session/written``), and its task rings from the
loop on a connection of its own, so a ring never waits for a write's
connection, nor for a thread to be scheduled.

A wake-up is never dropped: a session's entry leaves the pending set only
when the ``NOTIFY`` carrying it has committed; one that fails is merged back
and sent again (its latest seq wins). A wake-up may still arrive late (the
bell's connection is down) or twice; followers read by seq, so either costs a
read, never an event, and their poll is the last safety net (a host killed
between a commit and its ring leaves that wake-up to it).

Payload: one line ``"<session id> <last seq>"`` per session, lines joined by
``\\n``, split over several notifications when longer than
:data:`PAYLOAD_LIMIT` bytes (all sent in the same statement).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, Protocol

log = logging.getLogger(__name__)

INTERVAL = 0.001
"""The shortest time between two doorbell transactions of one host, in seconds.

A commit after a quiet spell rings at once; commits within this time of the
last ring share the next one."""

RETRY = 0.5
"""How long the bell waits before ringing again after a failed ``NOTIFY``, in seconds."""

PAYLOAD_LIMIT = 7900
"""The most bytes of one notification's payload (PostgreSQL refuses 8000 and more)."""

RING = "SELECT pg_notify(%s, payload) FROM unnest(%s::text[]) AS payload"


class BellConnection(Protocol):
    """What the bell needs of a connection (psycopg's ``AsyncConnection`` in autocommit)."""

    async def execute(self, query: Any, params: Any = ...) -> Any: ...

    async def close(self) -> None: ...


class CommitBell:
    """Rings ``channel`` for the sessions :meth:`committed` names, from :meth:`run`,
    over connections from ``connect``. Loop-bound."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[BellConnection]],
        channel: str,
        *,
        interval: float = INTERVAL,
    ) -> None:
        self._connect = connect
        self._channel = channel
        self._interval = interval
        self._pending: dict[str, int] = {}
        """The last committed seq of each session not rung for yet."""
        self._due = asyncio.Event()
        self.rings = 0
        """How many doorbell transactions committed (for benchmarks and tests)."""

    def committed(self, session_id: str, last_seq: int) -> None:
        """Note that events of ``session_id`` up to ``last_seq`` are committed; the
        wake-up is sent soon (at once when the bell was quiet), never dropped."""
        if last_seq > self._pending.get(session_id, -1):
            self._pending[session_id] = last_seq
            self._due.set()

    async def run(self) -> None:
        """Ring for committed sessions until cancelled; then ring once more for what
        is pending (one attempt) and close the connection."""
        loop = asyncio.get_running_loop()
        conn: BellConnection | None = None
        last_ring = float("-inf")
        try:
            while True:
                await self._due.wait()
                wait = last_ring + self._interval - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)  # commits meanwhile join this ring
                self._due.clear()
                if not self._pending:
                    continue
                try:
                    conn = conn or await self._connect()
                    await self._ring(conn)
                except Exception as exc:  # the driver's errors, a lost connection
                    log.warning("the events doorbell failed (%s); ringing again", exc)
                    await _closed(conn)
                    conn = None
                    self._due.set()
                    await asyncio.sleep(RETRY)
                    continue
                last_ring = loop.time()
        finally:
            if conn is not None and self._pending:
                try:
                    await self._ring(conn)
                except Exception as exc:
                    log.warning("the last doorbells were not sent (%s); followers poll", exc)
            await _closed(conn)

    async def _ring(self, conn: BellConnection) -> None:
        pending, self._pending = self._pending, {}
        payloads = list(_payloads(f"{sid} {seq}" for sid, seq in pending.items()))
        try:
            await conn.execute(RING, (self._channel, payloads))
        except BaseException:
            for sid, seq in pending.items():  # merged back: nothing is dropped
                if seq > self._pending.get(sid, -1):
                    self._pending[sid] = seq
            raise
        self.rings += 1


async def _closed(conn: BellConnection | None) -> None:
    if conn is not None:
        with contextlib.suppress(Exception):
            await conn.close()


def _payloads(lines: Iterable[str]) -> Iterator[str]:
    """``lines`` joined by newlines, in payloads of at most :data:`PAYLOAD_LIMIT` bytes."""
    chunk: list[str] = []
    size = 0
    for line in lines:
        length = len(line.encode()) + 1
        if chunk and size + length > PAYLOAD_LIMIT:
            yield "\n".join(chunk)
            chunk, size = [], 0
        chunk.append(line)
        size += length
    if chunk:
        yield "\n".join(chunk)
