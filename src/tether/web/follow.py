"""Following a session: its events after a seq, then live, with no gap and no duplicate.

:meth:`Follows.follow` is the one function every view of the web app reads a
session through (the event stream of each tab, the API's ``events`` stream).
It yields **batches** of events in seq order, each batch starting right after
the last one yielded:

* a session **live in this process** is read from its in-memory log: the
  follower's waiter is registered on ``session/event`` before the log is read,
  and every wake-up reads the log from the follower's cursor, so an event
  appended between the subscription and the first read is neither lost nor
  sent twice (the log, not the notification, carries the events);
* a session **stored, and live nowhere**, is read from storage; the follower
  then waits: if the session goes live in this process (a prompt resumes it),
  its new events follow from the cursor;
* a session **live in another process** (its lease is held elsewhere) is read
  from storage, and the iteration ends there. A view reconnects later with
  the last seq it saw (the event stream tells browsers to). This is the seam
  for a cross-process follow from persistence: when persistence offers
  ``follow(session_id, after_seq)`` (a doorbell such as PostgreSQL NOTIFY),
  this branch delegates to it instead of ending.

Waking is cheap and shared: one ``session/event`` listener for every
follower; each follower is one :class:`asyncio.Event` and a cursor. A view
that also shows state kept outside the log (the web app's permission
questions) is woken for it by :meth:`Follows.nudge`: the follower then yields
an **empty** batch, and the view reads that state again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tether.persist.service import Persistence
    from tether.session import Event, Session
    from tether.session.store import SessionStore


class Follows:
    """The followers of sessions in this process (one per open view)."""

    def __init__(self, store: SessionStore, persistence: Persistence | None) -> None:
        self._store = store
        self._persistence = persistence
        self._waiters: dict[str, set[_Follower]] = {}

    def on_session_event(self, session: Session, event: Event) -> None:
        """``session/event``: wake every follower of ``session``."""
        for follower in self._waiters.get(session.id, ()):
            follower.wake.set()

    def nudge(self, session_id: str) -> None:
        """Have every follower of ``session_id`` yield an empty batch (see the module docs)."""
        for follower in self._waiters.get(session_id, ()):
            follower.nudged = True
            follower.wake.set()

    def followers(self, session_id: str) -> int:
        """How many followers ``session_id`` has now."""
        return len(self._waiters.get(session_id, ()))

    async def follow(
        self, session_id: str, after_seq: int = -1, *, batch_window: float = 0.0
    ) -> AsyncGenerator[Sequence[Event], None]:
        """The events of ``session_id`` with seq > ``after_seq``, in batches, then live.

        With ``batch_window``, a live batch gathers what is appended within that
        many seconds of its first event (a streamed answer's chunks come one by
        one: each follower then wakes and writes once per window, not per chunk).

        The iteration ends only for a session live in another process (see the
        module docs); otherwise it runs until the consumer stops it (closes the
        generator or is cancelled), which removes the follower at once.

        Raises:
            SessionNotFoundError: the session is neither live here nor stored.
            InvalidSessionIdError: ``session_id`` is not a session id.
            CorruptLogError, SessionError: the stored log cannot be read.
        """
        follower = _Follower()
        wake = follower.wake
        waiters = self._waiters.setdefault(session_id, set())
        waiters.add(follower)
        try:
            cursor = after_seq
            if self._store.get(session_id) is None:
                stored = await self._read_stored(session_id)
                if self._store.get(session_id) is None:
                    batch = stored.events[cursor + 1 :]
                    if batch:
                        cursor = batch[-1].seq
                        yield batch
                    if await self._live_elsewhere(session_id):
                        return
            while True:
                wake.clear()
                if follower.nudged:
                    follower.nudged = False
                    yield ()
                session = self._store.get(session_id)
                if session is not None:
                    batch = session.events[cursor + 1 :]
                    if batch:
                        cursor = batch[-1].seq
                        yield batch
                        continue
                await wake.wait()
                if batch_window and not follower.nudged:
                    await asyncio.sleep(batch_window)
        finally:
            waiters.discard(follower)
            if not waiters and self._waiters.get(session_id) is waiters:
                del self._waiters[session_id]

    async def _read_stored(self, session_id: str) -> Session:
        if self._persistence is None:
            from tether.persist.backends.errors import SessionNotFoundError

            raise SessionNotFoundError(session_id)
        return await self._persistence.load(session_id)

    async def _live_elsewhere(self, session_id: str) -> bool:
        """Whether another process holds ``session_id``'s lease (it is not live here)."""
        if self._persistence is None or self._store.get(session_id) is not None:
            return False
        return await self._persistence.holder(session_id) is not None


class _Follower:
    """One follower: what wakes it, and whether a nudge did."""

    __slots__ = ("nudged", "wake")

    def __init__(self) -> None:
        self.wake = asyncio.Event()
        self.nudged = False
