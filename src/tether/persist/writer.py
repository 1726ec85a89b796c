"""Write-behind batching of session events, with a flush barrier.

Appends never wait for the disk. Each append marks its session dirty and wakes
the writer task; the writer waits one batch window (so a burst of appends
becomes one batch), then, session by session, writes every event appended
since the last write in one backend call run in a worker thread (one fsync or
one transaction per batch). An append noticed with ``now`` (the persistence
service passes it for a turn's end, which an acknowledgement follows) cuts the
window short, so the write is under way before anyone waits for it.

A backend that can defer its syncs (:class:`~tether.persist.backends.base.SyncsLater`,
the JSONL files) is synced only for a batch someone waits for: a flush, a
``now`` notice, a released session, the writer's drain. Every other batch is
stored without waiting for the disk, on the event loop's thread when that
waits for no lock (it is one ``write``), and the next sync makes it durable
with the rest: a turn costs one sync, at its end, and the sync an
acknowledgement waits for never queues behind a batch nobody waits for.
What a crash can lose is still only what nobody waited for.

:meth:`WriteBehind.flush` is the durability barrier: it skips the window and
returns once every event appended to the session before the call is durable.
A failed write fails the flushes waiting on it; its events stay pending and
are retried by the next append or flush of that session.

Writes happen only under the session's lease: the first write of a session
takes it (through the :class:`~tether.persist.backends.lease.LeaseBook`), so
a session open in another process fails to write instead of interleaving
with it; the lease is given up once the session is released and written.
A session whose lease another host took over is lost to this writer: its
flushes fail with the takeover, its later events are never written, and its
lease is forgotten at once, so loading the session again here takes a fresh
one.
:meth:`WriteBehind.store_header` makes a session stored before its first
event (a session created and not yet used can be loaded elsewhere).

A session's first write either creates it or continues it, never guesses:
a session the writer was told continues a stored log (:meth:`WriteBehind.continues`,
which resume calls) appends from the seq stored; any other session is new,
and its first write creates it (:meth:`LogBackend.create`), which fails if
anything is stored under its id. So what another process stored is never
taken for a new session's history, and a new session is never spliced onto it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Callable, Sequence

import msgspec

from tether.persist.backends.base import LogBackend, SyncsLater, WritesWithoutWaiting
from tether.persist.backends.lease import LeaseBook, SessionTakenOverError, taken_over
from tether.session.events import Event
from tether.session.log import Session

log = logging.getLogger(__name__)

INLINE_LIMIT = 0.002
"""An acknowledged batch is written on the event loop's thread only while the
last write took less than this many seconds (see :class:`WriteBehind`)."""


class _Track(msgspec.Struct, eq=False):
    """What the writer knows of one session: how much of it is stored, and who waits."""

    session: Session
    durable: int | None = None
    """How many of the session's events are durable; ``None`` until first asked of the backend."""
    stored: int = 0
    """How many are stored (readable, durable or not: at least :attr:`durable`)."""
    now: bool = False
    """A ``now`` notice came since the last synced write: the next write syncs."""
    waiters: list[tuple[int, asyncio.Future[None]]] = msgspec.field(default_factory=list)
    released: bool = False
    header_wanted: bool = False
    """The header must be stored even while the session has no events."""
    failing: bool = False
    """The last write failed (its failure was logged once)."""
    creating: bool = False
    """The next write creates the session: nothing may be stored under its id."""


class WriteBehind:
    """Batches and writes the events of many sessions to one backend.

    Run :meth:`run` as a task owned by whoever owns the backend, and
    :meth:`close` it (which drains every pending event) before closing the
    backend.

    Writes run in a worker thread, with one exception: a batch someone waits
    for (a flush, or a ``now`` notice), when it is the only one pending, is
    written on the event loop's own thread if the backend can write it
    without waiting for a lock (:class:`WritesWithoutWaiting`) and the last
    write took less than ``inline_limit`` (:data:`INLINE_LIMIT`). Handing the write to a thread
    and back costs two thread wake-ups, more than the write itself on a
    small machine; the loop is held for one quick write at most, and a slow
    disk sends writes back to the thread.
    """

    def __init__(
        self,
        backend: LogBackend,
        *,
        leases: LeaseBook,
        window: float = 0.002,
        inline_limit: float = INLINE_LIMIT,
        on_written: Callable[[Session, int], None] | None = None,
        on_stored: Callable[[Session, int], None] | None = None,
    ) -> None:
        """``on_written(session, durable)`` is called after each successful batch
        that made events durable (``durable`` of them are on disk);
        ``on_stored(session, stored)`` after each batch stored but not synced
        (``stored`` events are readable; see :class:`SyncsLater`);
        ``inline_limit`` is the longest last write that still lets an awaited
        batch be written on the loop's thread, in seconds."""
        if window < 0:
            raise ValueError(f"batch window must be >= 0 seconds, got {window}")
        self._backend = backend
        self._leases = leases
        self._window = window
        self._on_written = on_written
        self._on_stored = on_stored
        self._tracks: dict[Session, _Track] = {}
        self._lost: weakref.WeakKeyDictionary[Session, SessionTakenOverError] = (
            weakref.WeakKeyDictionary()
        )
        """Sessions another host took over, while they live: never written again."""
        self._continuing: weakref.WeakSet[Session] = weakref.WeakSet()
        """Sessions that continue a stored log (resumed ones); every other one is new."""
        self._dirty: dict[_Track, None] = {}
        self._wake = asyncio.Event()
        self._urgent = asyncio.Event()
        self._closing = False
        self._stopped = False
        self._inline = backend if isinstance(backend, WritesWithoutWaiting) else None
        self._later = backend if isinstance(backend, SyncsLater) else None
        self._inline_limit = inline_limit
        self._last_write = inline_limit
        """How long the last write took, in seconds (none yet: as if too long)."""

    def notice(self, session: Session, *, now: bool = False) -> None:
        """Record that ``session`` has new events (called on every append).

        With ``now``, the batch is written without waiting for the window:
        an acknowledgement is about to wait for it (see :meth:`flush`), and
        whatever the process does before it asks overlaps the write.
        """
        if session in self._lost:
            return
        track = self._tracks.get(session)
        if track is None:
            track = self._tracks[session] = _Track(session)
        if track not in self._dirty:
            self._dirty[track] = None
            self._wake.set()
        if now:
            track.now = True
            self._urgent.set()
            self._wake.set()

    def continues(self, session: Session) -> None:
        """Note that ``session`` continues the log stored under its id (it was
        resumed from it): its first write appends from the seq stored.

        Call it before the session's first append. A session never noted here
        is new: its first write creates it, and fails with
        :class:`~tether.persist.backends.errors.StoreConflictError` if
        anything is stored under its id.
        """
        self._continuing.add(session)

    def store_header(self, session: Session) -> None:
        """Have ``session`` stored (its header, at least) by the next batch.

        A :meth:`flush` after this call returns once the session is stored,
        even if it has no events yet.
        """
        self.notice(session)
        self._tracks[session].header_wanted = True

    def release(self, session: Session) -> None:
        """Forget ``session`` once everything appended to it so far is written."""
        if session in self._lost:
            return
        track = self._tracks.get(session)
        if track is None:
            # Never written here: a resumed session still holds its lease.
            self._leases.release(session.id, session)
            return
        track.released = True
        if track.durable is not None and track.durable >= len(session.events):
            # Everything is written already: forgotten (and its lease given
            # up) now, not when the writer next runs.
            self._settle(track)
            if session not in self._tracks:
                self._dirty.pop(track, None)
                return
        self._dirty[track] = None
        self._wake.set()

    async def flush(self, session: Session) -> None:
        """Return once every event appended to ``session`` before the call is durable.

        Raises:
            RuntimeError: the writer is closed.
            SessionTakenOverError: another host took the session over; nothing
                appended since is written.
            OSError, StoreConflictError, …: the backend failed to write them.
        """
        lost = self._lost.get(session)
        if lost is not None:
            raise lost
        target = len(session.events)
        track = self._tracks.get(session)
        if track is None:
            if target == 0:
                return
            self.notice(session)
            track = self._tracks[session]
        elif track.durable is not None and track.durable >= target and not track.header_wanted:
            return
        if self._stopped:
            raise RuntimeError("the session writer is closed")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        track.waiters.append((target, future))
        self._dirty[track] = None
        self._urgent.set()
        self._wake.set()
        await future

    async def run(self) -> None:
        """Write batches until :meth:`close` is called and nothing is pending."""
        while True:
            await self._wake.wait()
            if not self._urgent.is_set() and not self._closing and self._window:
                # asyncio.timeout, not wait_for: no task to create and cancel per batch.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._window):
                        await self._urgent.wait()
            awaited = self._urgent.is_set() and not self._closing
            self._wake.clear()
            self._urgent.clear()
            batch = list(self._dirty)
            self._dirty.clear()
            if len(batch) == 1:
                await self._write(batch[0], inline=awaited)
            else:
                # Sessions are written side by side: each write is one file (or
                # one transaction), so their fsyncs need not wait on each other.
                await asyncio.gather(*(self._write(track) for track in batch))
            if self._closing and not self._dirty:
                self._stopped = True
                return

    async def close(self) -> None:
        """Ask :meth:`run` to drain every pending event and return.

        Sessions whose last write failed get one more attempt in the drain.
        """
        self._closing = True
        for track in self._tracks.values():
            if track.durable is None or track.durable < len(track.session.events):
                self._dirty[track] = None
        # Urgent too: a writer waiting out its window drains now.
        self._urgent.set()
        self._wake.set()

    async def _write(self, track: _Track, *, inline: bool = False) -> None:
        session = track.session
        if session in self._lost:
            return
        end = len(session.events)
        try:
            if track.durable is None:
                track.durable = track.stored = await asyncio.to_thread(self._begin, track)
            # Consumed here: a ``now`` notice during this write asks for the next one.
            sync = self._later is None or self._syncs(track)
            track.now = False
            start = track.stored
            if end > start or track.header_wanted or track.creating:
                events = session.events[start:end]
                if track.creating:
                    await asyncio.to_thread(self._store, session, events, create=True)
                    sync = True  # a session is created durable
                elif not sync:
                    await self._store_unsynced(session, events)
                elif not (inline and self._store_inline(session, events)):
                    await asyncio.to_thread(self._store, session, events)
                track.stored = end
                if sync:
                    track.durable = end
                track.header_wanted = False
                if track.creating:
                    # Stored now: a later track of it (a flush after its
                    # release, say) continues what this one created.
                    self._continuing.add(session)
                    track.creating = False
                self._tell(session, end, durable=sync)
            elif sync and track.durable < track.stored:
                # Everything is stored; some of it is not durable yet.
                await self._sync(session, inline=inline)
                track.durable = track.stored
                self._tell(session, track.durable, durable=True)
        except Exception as exc:
            waiters, track.waiters = track.waiters, []
            lost = taken_over(exc)
            if lost is not None:
                await self._lose(track, lost, waiters)
                return
            if track.durable is not None and track.stored != track.durable:
                await self._restored(track)
            if not track.failing:
                # Once per failing streak, and not as an error: every flush
                # waiting now or later (the acknowledgement of the work, the
                # agent's teardown) gets the error itself, and the next
                # append retries.
                log.info("writing session %s failed: %s", session.id, exc)
            track.failing = True
            for _target, future in waiters:
                if not future.done():
                    future.set_exception(exc)
            return
        if track.failing:
            track.failing = False
            log.info("writing session %s works again; nothing was lost", session.id)
        self._settle(track)

    async def _lose(
        self,
        track: _Track,
        error: SessionTakenOverError,
        waiters: list[tuple[int, asyncio.Future[None]]],
    ) -> None:
        """``track``'s session was taken over: write it no more, forget its lease (in a
        thread: releasing it may be a round trip), then fail its waiters.

        The session is remembered as lost for as long as it lives, so that
        nothing it appends later (even after it was released) starts a new
        track, which would take a fresh lease and store what the new owner
        never saw.
        """
        session = track.session
        self._lost[session] = error
        self._tracks.pop(session, None)
        self._dirty.pop(track, None)
        log.info("session %s is no longer written here: %s", session.id, error)
        try:
            await asyncio.to_thread(self._leases.forget, session.id, track)
        except Exception:  # the lease is lost anyway; the writer must go on
            log.exception("could not give up the lost lease of session %s", session.id)
        finally:
            # After the lease is forgotten: whoever waited may load the session again at once.
            for _target, future in waiters:
                if not future.done():
                    future.set_exception(error)

    def _begin(self, track: _Track) -> int:
        """Before a session's first write: take its lease; for a session that
        continues a stored log, learn how much is stored (a new one has nothing
        stored: its first write creates it)."""
        session = track.session
        self._leases.acquire(session.id, track)
        # A session being resumed or created under a chosen id handed its
        # lease to its session object.
        self._leases.release(session.id, session)
        if session in self._continuing:
            return self._backend.next_seq(session.id)
        track.creating = True
        return 0

    def _store(self, session: Session, events: Sequence[Event], *, create: bool = False) -> None:
        records = [event.to_stored_record() for event in events]
        started = time.perf_counter()
        if create:
            self._backend.create(session.header.to_record(), records)
        else:
            self._backend.write(session.header.to_record(), records)
        self._last_write = time.perf_counter() - started

    def _tell(self, session: Session, count: int, *, durable: bool) -> None:
        told = self._on_written if durable else self._on_stored
        if told is not None:
            told(session, count)

    def _syncs(self, track: _Track) -> bool:
        """Whether ``track``'s next write must make it durable: someone waits for it,
        or will (a ``now`` notice), or the session or the writer is closing."""
        return bool(track.waiters) or track.now or track.released or self._closing

    async def _restored(self, track: _Track) -> None:
        """After a failed write of a session stored beyond what is durable: learn how
        much of it is stored still (a failed write or sync takes back what was stored
        after the last sync, a refused one nothing)."""
        assert track.durable is not None
        durable = track.durable
        try:
            track.stored = await asyncio.to_thread(self._backend.next_seq, track.session.id)
        except Exception:  # the backend's own failure stands; the next write finds out
            track.stored = durable
        track.stored = max(track.stored, durable)

    async def _store_unsynced(self, session: Session, events: Sequence[Event]) -> None:
        """Store ``events`` without waiting for the disk: on this thread when that waits
        for no lock, else in a worker thread."""
        assert self._later is not None
        records = [event.to_stored_record() for event in events]
        header = session.header.to_record()
        if not self._later.write_unsynced(header, records, wait=False):
            await asyncio.to_thread(self._later.write_unsynced, header, records)

    async def _sync(self, session: Session, *, inline: bool) -> None:
        """Make what is stored of ``session`` durable: on this thread under the same
        rule as :meth:`_store_inline`, else in a worker thread."""
        if not (inline and self._last_write < self._inline_limit and self._synced(session, False)):
            await asyncio.to_thread(self._synced, session, True)

    def _synced(self, session: Session, wait: bool) -> bool:
        assert self._later is not None
        started = time.perf_counter()
        done = self._later.sync(session.id, wait=wait)
        if done:
            self._last_write = time.perf_counter() - started
        return done

    def _store_inline(self, session: Session, events: Sequence[Event]) -> bool:
        """Write on this thread if that waits for no lock and writes are quick; whether it did."""
        if self._inline is None or self._last_write >= self._inline_limit:
            return False
        records = [event.to_stored_record() for event in events]
        started = time.perf_counter()
        written = self._inline.try_write(session.header.to_record(), records)
        if written:
            self._last_write = time.perf_counter() - started
        return written

    def _settle(self, track: _Track) -> None:
        durable = track.durable or 0
        remaining = []
        for target, future in track.waiters:
            if target <= durable:
                if not future.done():
                    future.set_result(None)
            else:
                remaining.append((target, future))
        track.waiters = remaining
        if track.released and durable >= len(track.session.events) and not remaining:
            self._tracks.pop(track.session, None)
            self._leases.release(track.session.id, track)
            self._leases.release(track.session.id, track.session)
