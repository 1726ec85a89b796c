"""Following a session's log: its events after seq N, then live, with no gap and no duplicate.

This is the one seam every live view of a stored session reads through
(``tether sessions tail``, and any view that reconnects naming the last seq it
has). The stored log is the source of truth: a :class:`Doorbell` only says
"look again", and the follower reads by seq from the backend, so a doorbell
rung twice, late or not at all costs a read, never an event.

Doorbells: the persistence service rings one after each batch it writes
(this process's sessions); the PostgreSQL backend also rings it for every
``NOTIFY`` of another host's append. Where nothing rings for writes of other
processes (JSONL and SQLite written by another ``tether``), the follower also
reads again every ``poll`` seconds. Each read is the backend's
``events_after``, which reads only what was stored after the last seq, at
most :data:`BATCH` events of it: a poll of an idle session parses nothing,
and a follower of a long stored log holds one batch of it at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

from tether.persist.backends.base import LogBackend
from tether.session.stored import StoredEvent

BATCH = 2000
"""The most events one read of a follower takes from the backend (and one batch holds)."""


class Doorbell:
    """Wakes the followers of a session when new events may be stored. Loop-bound."""

    def __init__(self) -> None:
        self._rungs: dict[str, set[asyncio.Event]] = {}

    def ring(self, session_id: str) -> None:
        """Say that ``session_id`` may have new stored events."""
        for rung in self._rungs.get(session_id, ()):
            rung.set()

    def ring_all(self) -> None:
        """Say that every session may have new stored events (doorbells may have been missed)."""
        for rungs in self._rungs.values():
            for rung in rungs:
                rung.set()

    def subscribers(self, session_id: str) -> int:
        """How many subscriptions to ``session_id`` are open now."""
        return len(self._rungs.get(session_id, ()))

    @contextlib.contextmanager
    def subscribe(self, session_id: str) -> Iterator[asyncio.Event]:
        """An event set by each :meth:`ring` of ``session_id`` while the block runs."""
        rung = asyncio.Event()
        self._rungs.setdefault(session_id, set()).add(rung)
        try:
            yield rung
        finally:
            rungs = self._rungs.get(session_id)
            if rungs is not None:
                rungs.discard(rung)
                if not rungs:
                    del self._rungs[session_id]


async def follow(
    backend: LogBackend,
    doorbell: Doorbell,
    session_id: str,
    after_seq: int = -1,
    *,
    poll: float,
) -> AsyncIterator[list[StoredEvent]]:
    """Yield the stored events of ``session_id`` after ``after_seq``, then the new
    ones as they are stored, in batches: each batch is what one read found (never
    empty, at most :data:`BATCH` events), in seq order, starting right after the
    last one yielded, until the caller stops iterating. A long stored log is read
    a batch at a time, the next read once the caller asks for the next batch.

    Raises:
        SessionNotFoundError: nothing is stored under ``session_id``.
        CorruptLogError: the log is damaged.
    """
    last = after_seq
    with doorbell.subscribe(session_id) as rung:
        while True:
            # Cleared before the read: a ring during the read means "read again".
            rung.clear()
            events = await asyncio.to_thread(backend.events_after, session_id, last, limit=BATCH)
            if events:
                last = events[-1].seq
                yield events
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(poll):
                        await rung.wait()
