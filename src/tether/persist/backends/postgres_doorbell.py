"""The events doorbell of the PostgreSQL backend: rung after commit, coalesced per host.

PostgreSQL serializes the commits of every transaction that ran ``NOTIFY``
(they take one database-wide lock to queue their notifications), so a
doorbell rung inside each append transaction would make every append of every
host wait for every other one. Appends therefore commit without it, and each
host's :class:`CommitBell` rings afterwards: one transaction (one statement)
carries the wake-ups of every session this host committed to since the last
one, at most one such transaction every :data:`INTERVAL` seconds per host.

A wake-up is never lost: a session's entry leaves the pending set only when
the ``NOTIFY`` carrying it has committed; one that fails is merged back and
sent again (its latest seq wins). A wake-up may still arrive late (the bell's
connection is down) or twice; followers read by seq, so either costs a read,
never an event, and their poll is the last safety net.

Payload: one line ``"<session id> <last seq>"`` per session, lines joined by
``\\n``, split over several notifications when longer than
:data:`PAYLOAD_LIMIT` bytes (all sent in the same transaction).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from tether.persist.backends.errors import BackendClosedError

log = logging.getLogger(__name__)

INTERVAL = 0.003
"""The shortest time between two doorbell transactions of one host, in seconds.

A commit after a quiet spell rings at once; commits within this time of the
last ring share the next one."""

RETRY = 0.5
"""How long the bell waits before ringing again after a failed ``NOTIFY``, in seconds."""

PAYLOAD_LIMIT = 7900
"""The most bytes of one notification's payload (PostgreSQL refuses 8000 and more)."""

RING = "SELECT pg_notify(%s, payload) FROM unnest(%s::text[]) AS payload"


class CommitBell:
    """Rings ``channel`` for the sessions committed through :meth:`committed`, from a
    thread of its own, over connections from ``connect`` (the bell's alone).

    The thread starts with the first :meth:`committed` and stops in :meth:`close`.
    """

    def __init__(
        self,
        connect: Callable[[], AbstractContextManager[psycopg.Connection[Any]]],
        channel: str,
        *,
        interval: float = INTERVAL,
    ) -> None:
        self._connect = connect
        self._channel = channel
        self._interval = interval
        self._lock = threading.Condition()
        self._pending: dict[str, int] = {}
        """The last committed seq of each session not rung for yet."""
        self._closing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rings = 0
        """How many doorbell transactions committed (for benchmarks and tests)."""

    def committed(self, session_id: str, last_seq: int) -> None:
        """Note that events of ``session_id`` up to ``last_seq`` are committed; the
        wake-up is sent soon (at once when the bell was quiet), never dropped."""
        with self._lock:
            if last_seq > self._pending.get(session_id, -1):
                self._pending[session_id] = last_seq
            if self._thread is None and not self._closing:
                self._thread = threading.Thread(
                    target=self._run, name="tether-commit-bell", daemon=True
                )
                self._thread.start()
            self._lock.notify()

    def close(self) -> None:
        """Ring for what is pending (one attempt), then stop the thread and join it."""
        with self._lock:
            self._closing = True
            thread = self._thread
            self._lock.notify()
        self._stop.set()
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        last_ring = float("-inf")
        while True:
            with self._lock:
                while not self._pending and not self._closing:
                    self._lock.wait()
                if not self._pending:
                    return
                closing = self._closing
            wait = last_ring + self._interval - time.monotonic()
            if wait > 0 and not closing:
                self._stop.wait(wait)  # commits meanwhile join this ring
            with self._lock:
                pending, self._pending = self._pending, {}
            try:
                self._ring(pending)
            except (psycopg.Error, BackendClosedError) as exc:
                self._put_back(pending)
                if closing:
                    log.warning("the last doorbells were not sent (%s); followers poll", exc)
                    return
                log.warning("the events doorbell failed (%s); ringing again", exc)
                self._stop.wait(RETRY)
                continue
            last_ring = time.monotonic()
            if closing:
                return

    def _ring(self, pending: dict[str, int]) -> None:
        payloads = list(_payloads(f"{sid} {seq}" for sid, seq in pending.items()))
        with self._connect() as conn:
            conn.execute(RING, (self._channel, payloads))
        self.rings += 1

    def _put_back(self, pending: dict[str, int]) -> None:
        with self._lock:
            for sid, seq in pending.items():
                if seq > self._pending.get(sid, -1):
                    self._pending[sid] = seq


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
