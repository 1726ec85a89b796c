"""Following a session: its events after a seq, then live, with no gap and no duplicate.

:meth:`Follows.follow` is the one function every view of the web app reads a
session through (the event stream of each tab, the API's ``events`` stream).
It yields **batches** of events in seq order, each batch starting right after
the last one yielded and holding at most `BATCH` events: a view catching up
with a long log gets it a batch at a time, each decoded when the view asks
for it, never the log whole:

* a session **live in this process** is read from its in-memory log: the
  follower is subscribed to the session's wake-ups before the log is read,
  and every wake-up reads the log from the follower's cursor, so an event
  appended between the subscription and the first read is neither lost nor
  sent twice (the log, not the wake-up, carries the events);
* a session **stored, not live in this process** (live nowhere, or in
  another process: its lease is held elsewhere, on this host or, on
  PostgreSQL, on another one) is read from storage, then followed there, so
  that a process that has it live, or opens it later, is followed from its
  writes: :meth:`Persistence.follow
  <tether.persist.service.Persistence.follow>` reads by seq from the cursor
  each time the backend's doorbell rings (or its poll comes round), and the
  stored records are decoded by the same registry a load decodes them by, so
  a view gets the same event values as from a live session. Should the
  session then go live in this process, the follower goes on from its
  in-memory log, at the same cursor; once it leaves this process again
  (``session/disposed``), from storage.

Waking is shared: the followers of a session subscribe to one
:class:`~tether.persist.follow.Doorbell` rung by ``session/event``. A view
that also shows state kept outside the log (the web app's permission
questions) is woken for it by :meth:`Follows.nudge`: the follower then yields
an **empty** batch, and the view reads that state again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING

from tether.persist.follow import BATCH, Doorbell
from tether.session.registry import DEFAULT_REGISTRY

if TYPE_CHECKING:
    from tether.persist.service import Persistence
    from tether.session import Event, Session
    from tether.session.store import SessionStore


class Follows:
    """The followers of sessions in this process (one per open view)."""

    def __init__(self, store: SessionStore, persistence: Persistence | None) -> None:
        self._store = store
        self._persistence = persistence
        self._bell = Doorbell()
        self._nudges: dict[str, int] = {}
        self._loading: dict[str, asyncio.Future[Session]] = {}
        """The reads of stored sessions under way (see :meth:`load`)."""
        """Per session followed: how many nudges it had (a follower yields on a change)."""

    def on_session_event(self, session: Session, event: Event) -> None:
        """``session/event``: wake every follower of ``session``."""
        self._bell.ring(session.id)

    def on_session_disposed(self, session: Session) -> None:
        """``session/disposed``: wake every follower of ``session``, which now
        follows it in storage (another process may open it)."""
        self._bell.ring(session.id)

    def nudge(self, session_id: str) -> None:
        """Have every follower of ``session_id`` yield an empty batch (see the module docs)."""
        if session_id in self._nudges:
            self._nudges[session_id] += 1
            self._bell.ring(session_id)

    def followers(self, session_id: str) -> int:
        """How many followers ``session_id`` has now."""
        return self._bell.subscribers(session_id)

    async def follow(
        self, session_id: str, after_seq: int = -1, *, batch_window: float = 0.0
    ) -> AsyncGenerator[Sequence[Event], None]:
        """The events of ``session_id`` with seq > ``after_seq``, in batches, then live.

        With ``batch_window``, a live batch gathers what is appended within that
        many seconds of its first event (a streamed answer's chunks come one by
        one: each follower then wakes and writes once per window, not per chunk).

        The iteration runs until the consumer stops it (closes the generator or
        is cancelled), which removes the follower at once (and stops its read
        of another process's session).

        Raises:
            SessionNotFoundError: the session is neither live here nor stored.
            InvalidSessionIdError: ``session_id`` is not a session id.
            CorruptLogError, SessionError: the stored log cannot be read.
        """
        self._nudges.setdefault(session_id, 0)
        stored: list[Event] = []
        reader: asyncio.Task[None] | None = None
        with self._bell.subscribe(session_id) as wake:
            nudges = self._nudges[session_id]
            try:
                cursor = after_seq
                batch: Sequence[Event]
                if self._store.get(session_id) is None:
                    loaded: Session | None = await self.load(session_id)
                    # Live here meanwhile: read from there on, at the same cursor.
                    while loaded is not None and self._store.get(session_id) is None:
                        batch = loaded.events[cursor + 1 : cursor + 1 + BATCH]
                        if not batch:
                            break
                        cursor = batch[-1].seq
                        yield batch
                    loaded = None  # read: not held while followed
                while True:
                    wake.clear()
                    if nudges != self._nudges[session_id]:
                        nudges = self._nudges[session_id]
                        yield ()
                    session = self._store.get(session_id)
                    if session is not None:
                        batch = session.events[cursor + 1 : cursor + 1 + BATCH]
                        if reader is not None:  # live here now: storage lags behind
                            await _stop(reader)
                            reader = None
                    else:
                        batch = [event for event in stored[:BATCH] if event.seq > cursor]
                        del stored[:BATCH]
                        if reader is not None and reader.done():
                            reader.result()  # its failure is the follower's
                        elif reader is None and self._persistence is not None and not batch:
                            # Not live here (or no longer): followed in storage from here on.
                            reader = _reader(self._persistence, session_id, cursor, stored, wake)
                    if batch:
                        cursor = batch[-1].seq
                        yield batch
                        continue
                    await wake.wait()
                    if batch_window and nudges == self._nudges[session_id]:
                        await asyncio.sleep(batch_window)
            finally:
                if reader is not None:
                    await _stop(reader)
                if self._bell.subscribers(session_id) == 1:  # this follower's own
                    self._nudges.pop(session_id, None)

    async def load(self, session_id: str) -> Session:
        """The stored session ``session_id``, read to be viewed (never changed).

        Reads of one session asked for while one is under way share it: the
        views of one page (its events, its details, its usage) hold a big
        log once, not once each. A read whose asker went away meanwhile is
        started again by the next one waiting.

        Raises:
            SessionNotFoundError, CorruptLogError, SessionError: as
                :meth:`Persistence.load <tether.persist.service.Persistence.load>`.
        """
        while (pending := self._loading.get(session_id)) is not None:
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                if not pending.cancelled():
                    raise  # this reader was cancelled, not the shared read
        persistence = self._stored_in(session_id)
        shared: asyncio.Future[Session] = asyncio.get_running_loop().create_future()
        self._loading[session_id] = shared
        try:
            session = await persistence.load(session_id)
        except asyncio.CancelledError:
            shared.cancel()
            raise
        except BaseException as exc:
            shared.set_exception(exc)
            shared.exception()  # told to whoever waits; never logged as unheard
            raise
        else:
            shared.set_result(session)
            return session
        finally:
            del self._loading[session_id]

    def _stored_in(self, session_id: str) -> Persistence:
        if self._persistence is None:
            from tether.persist.backends.errors import SessionNotFoundError

            raise SessionNotFoundError(session_id)
        return self._persistence


def _reader(
    persistence: Persistence,
    session_id: str,
    after_seq: int,
    into: list[Event],
    wake: asyncio.Event,
) -> asyncio.Task[None]:
    """A task following ``session_id`` in storage after ``after_seq`` (see
    :func:`_read_stored`), whether or not another process has it live now: one
    that opens it later is followed from its first write. A poll of an idle log
    reads nothing new (``events_after``)."""
    return asyncio.get_running_loop().create_task(
        _read_stored(persistence, session_id, after_seq, into, wake),
        name=f"web-follow:{session_id}",
    )


async def _stop(reader: asyncio.Task[None]) -> None:
    """Cancel ``reader`` and wait until it is gone (a failure it had is the caller's
    only if seen before)."""
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)


async def _read_stored(
    persistence: Persistence,
    session_id: str,
    after_seq: int,
    into: list[Event],
    wake: asyncio.Event,
) -> None:
    """Follow ``session_id`` in storage after ``after_seq``: each batch stored is
    decoded into ``into`` and ``wake`` is set, until cancelled."""
    try:
        async for batch in persistence.follow(session_id, after_seq):
            into.extend(DEFAULT_REGISTRY.decode_stored(batch))
            wake.set()
    finally:
        wake.set()  # a failure (or the end) is seen by the follower
