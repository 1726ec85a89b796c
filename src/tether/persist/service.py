"""The persistence service (``ctx.persistence``): durable session logs over a backend.

A persistence plugin (``tether.persist.jsonl``, ``tether.persist.sqlite``)
builds a backend and calls :func:`mount_persistence`, which wires three things
into its fiber as one effect:

* listeners: ``session/event`` marks a session dirty for the write-behind
  writer, ``session/flush`` (parallel) is the durability barrier,
  ``session/disposed`` lets the writer forget a session once it is written;
* the writer task, drained and awaited on unload before the backend closes;
* the ``persistence`` service: load, resume, list and delete stored sessions.

It emits ``session/written (session, durable)`` (a notification) after each
batch it writes durably: ``durable`` events of ``session`` are now on disk (a
batch stored without waiting for the disk, see :mod:`tether.persist.writer`,
rings the followers' doorbell only).

Crash repair: a stored log whose last turn never closed gets its closing
events (see :mod:`tether.session.repair`). Resuming writes them before the
session is used; a plain load adds them in memory only, since the session may
be live in another process. A session live in this process is never repaired.

One live owner per session: resuming takes the session's lease
(:mod:`tether.persist.backends.lease`) before it reads the log, so a repair is
written only by the process that will own the session. A new session whose
id its creator chose is claimed (:meth:`Persistence.claim`): its lease is
taken, and under it the id is checked not to be stored, so of two processes
creating one id exactly one goes on; a new session under a generated id takes
its lease with its first write (or :meth:`Persistence.store`). Whatever
happens around it, a new session's first write creates it and never appends
to a log stored before (see :mod:`tether.persist.writer`). The lease is given
up once the session is disposed and written. Loads and listings take no lease
and never write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from msgspec import Meta

from tether.persist.backends.base import LogBackend, SessionSummary, TornTail
from tether.persist.backends.bulk import collector_paused
from tether.persist.backends.errors import StoreConflictError
from tether.persist.backends.lease import Holder, LeaseBook
from tether.persist.backends.records import parse_header
from tether.persist.follow import Doorbell, follow
from tether.persist.writer import WriteBehind
from tether.runtime.keys import Notice, ServiceKey
from tether.runtime.schema import Schema
from tether.session.errors import SessionError
from tether.session.log import Session, SessionHeader
from tether.session.registry import DEFAULT_REGISTRY
from tether.session.repair import repair
from tether.session.store import (
    SESSION_DISPOSED,
    SESSION_EVENT,
    SESSION_FLUSH,
    SESSIONS,
    SessionConflictError,
    SessionStore,
)
from tether.session.stored import StoredEvent
from tether.session.vocabulary import TurnEnd

if TYPE_CHECKING:
    from tether.runtime import Context

log = logging.getLogger(__name__)


SESSION_WRITTEN = Notice[Session, int]("session/written")
"""``(session, durable)``: a batch was written; ``durable`` events of ``session`` are on disk."""

PERSISTENCE = ServiceKey["Persistence"]("persistence")
"""``ctx.persistence``: load, resume, list and delete stored sessions."""


class PersistenceConfig(Schema, frozen=True):
    """Configuration shared by the persistence plugins."""

    data_dir: Path | None = None
    """Where logs are stored; default ``$TETHER_HOME``, else ``~/.local/share/tether``."""
    batch_window_ms: Annotated[float, Meta(ge=0, le=1000)] = 20.0
    """How long the writer waits after an append to gather a batch (a flush skips it)."""


LOCAL_POLL = 0.25
"""How often a follower reads again for writes no doorbell rings for (another process's)."""


class Persistence:
    """Stored sessions: the read side of persistence, and resume."""

    def __init__(
        self,
        backend: LogBackend,
        writer: WriteBehind,
        store: SessionStore,
        leases: LeaseBook,
        doorbell: Doorbell,
        *,
        poll: float = LOCAL_POLL,
    ) -> None:
        self._backend = backend
        self._writer = writer
        self._store = store
        self._leases = leases
        self._doorbell = doorbell
        self._poll = poll
        self._resuming: set[str] = set()
        """Sessions :meth:`prepare_resume` is preparing now."""

    def follow(self, session_id: str, after_seq: int = -1) -> AsyncIterator[list[StoredEvent]]:
        """The stored events of ``session_id`` after ``after_seq``, then the new
        ones as they are stored (here or, by the backend's doorbell, in another
        process or host), in batches in seq order with no gap and no duplicate;
        the caller stops by leaving the iteration. See :mod:`tether.persist.follow`.

        Raises (while iterating):
            SessionNotFoundError, CorruptLogError: from the backend.
        """
        return follow(self._backend, self._doorbell, session_id, after_seq, poll=self._poll)

    async def events_after(
        self, session_id: str, after_seq: int, *, limit: int | None = None
    ) -> list[StoredEvent]:
        """The events of ``session_id`` stored now with seq greater than ``after_seq``,
        in order, the first ``limit`` of them (all with ``None``).

        Raises:
            SessionNotFoundError, CorruptLogError: from the backend.
        """
        return await asyncio.to_thread(
            self._backend.events_after, session_id, after_seq, limit=limit
        )

    async def load(self, session_id: str, *, as_stored: bool = False) -> Session:
        """Read a stored session for reading; a last turn that never closed is
        closed **in memory only** — unless the session is live, or
        ``as_stored`` asks for the log exactly as it is stored.

        The returned session is a private copy: not entered in the store.
        Nothing is written: the session may be live in another process (a
        ``tether sessions show`` next to a running ``tether chat``), whose log
        a written repair would break. A session live in this process, or
        whose lease another running process holds (:meth:`holder`), is
        returned as stored: its open turn is still running, not interrupted.
        :meth:`prepare_resume` is where a repair becomes durable.

        Raises:
            SessionNotFoundError, CorruptLogError, UnsupportedFormatError: from
                the backend.
            SessionError: the stored events do not form a valid log (the
                message names the session and the seq).
        """
        session = await self._read(session_id)
        if as_stored:
            return session
        if self._store.get(session_id) is None and not await self._live_elsewhere(session_id):
            repair(session)
        return session

    async def _live_elsewhere(self, session_id: str) -> bool:
        """Whether a lease this persistence does not hold is held for ``session_id``."""
        return not self._leases.holds(session_id) and await self.holder(session_id) is not None

    async def holder(self, session_id: str) -> Holder | None:
        """The running process that has ``session_id`` live (on any host), else ``None``.

        Only reads. See :meth:`LogBackend.lease_holder`.
        """
        return await asyncio.to_thread(self._backend.lease_holder, session_id)

    async def holders(self, session_ids: Sequence[str]) -> dict[str, Holder]:
        """The running processes that have any of ``session_ids`` live, by session (those
        live nowhere are left out): :meth:`holder` of each, in one worker thread.

        Only reads. See :meth:`LogBackend.lease_holder`.
        """

        def read() -> dict[str, Holder]:
            held = ((s, self._backend.lease_holder(s)) for s in session_ids)
            return {session_id: holder for session_id, holder in held if holder is not None}

        return await asyncio.to_thread(read)

    async def prepare_resume(self, session_id: str) -> Session:
        """Load a stored session, repair it durably, and prepare it privately in the store.

        The caller enters it (``ctx.sessions.enter``) to make it live; appends
        then continue the stored seq and turn numbering.

        Raises:
            SessionConflictError: the session is live.
            Everything :meth:`load` raises.
        """
        if self._store.get(session_id) is not None:
            raise SessionConflictError(f"session {session_id!r} is already live")
        if session_id in self._resuming:
            # The lease is shared inside this process: it cannot tell two
            # resumes of one session apart, so this set does.
            raise SessionConflictError(f"session {session_id!r} is being resumed already")
        self._resuming.add(session_id)
        token = object()
        try:
            await asyncio.to_thread(self._leases.acquire, session_id, token)
            try:
                session = await self._read(session_id)
                await self._repair(session)
                restored = self._store.prepare_restored(session.header, session.events)
                self._writer.continues(restored)
                # The restored session holds the lease until its first write hands
                # it to the writer (or :meth:`abandon` gives it up).
                self._leases.acquire(session_id, restored)
            finally:
                self._leases.release(session_id, token)
        finally:
            self._resuming.discard(session_id)
        log.debug("session %s resumed (%d events stored)", session_id, len(restored.events))
        return restored

    async def claim(self, session: Session) -> None:
        """Claim the id of a new session its creator chose: take the session's
        lease, and under it check that nothing is stored under the id.

        Of two processes (or hosts) claiming one id, one holds the lease and
        the other is refused; a claim after the winner stored the session finds
        it stored. The session holds the lease until its first write hands it
        to the writer (or :meth:`abandon` gives it up); that write creates the
        session.

        Raises:
            SessionConflictError: the id is stored (resume it instead).
            SessionLeasedError: another process has the session open.
            OSError, LogStoreError: storage cannot record the lease or be read.
        """
        claiming = asyncio.ensure_future(asyncio.to_thread(self._claim, session))
        try:
            await asyncio.shield(claiming)
        except asyncio.CancelledError:
            # The thread goes on and may take the lease: give it up once it is done.
            with contextlib.suppress(Exception):
                await claiming
            self._leases.release(session.id, session)
            raise

    def _claim(self, session: Session) -> None:
        self._leases.acquire(session.id, session)
        try:
            stored = self._backend.exists(session.id)
        except BaseException:
            self._leases.release(session.id, session)
            raise
        if stored:
            self._leases.release(session.id, session)
            raise SessionConflictError(
                f"session {session.id!r} is already stored: resume it instead of "
                "creating a new session over it"
            )

    def abandon(self, session: Session) -> None:
        """Give up the lease of a session :meth:`prepare_resume` prepared (or
        :meth:`claim` claimed) that never went live."""
        if not self._store.is_live(session):
            self._leases.release(session.id, session)

    async def store(self, session: Session) -> None:
        """Return once ``session`` (a live one) is stored with everything appended to it.

        Unlike a flush, this stores a session that has no events yet, as its
        header: a session created and acknowledged but never used can be
        resumed by another process.

        Raises:
            SessionLeasedError: another process has the session open.
            OSError, LogStoreError: the write failed.
        """
        self._writer.store_header(session)
        await self._writer.flush(session)

    async def check_writable(self) -> None:
        """Prove that sessions can be stored now (see :meth:`LogBackend.check_writable`).

        Raises:
            OSError, sqlite3.Error: storage is read-only, damaged or full.
        """
        await asyncio.to_thread(self._backend.check_writable)

    async def exists(self, session_id: str) -> bool:
        """Whether anything is stored under ``session_id``."""
        return await asyncio.to_thread(self._backend.exists, session_id)

    async def list(self) -> list[SessionSummary]:
        """Summaries of every stored session, newest activity first."""
        return await asyncio.to_thread(self._backend.list)

    async def import_log(
        self, header: Mapping[str, object], events: Sequence[StoredEvent]
    ) -> Session:
        """Store a session log read from elsewhere (what ``sessions export``
        writes) under its own id, checked as a load checks it.

        Raises:
            InvalidRecordError: the header does not have the stored shape.
            SessionError, EventFormatError: the events do not form a valid log
                (the message names the session and the seq).
            StoreConflictError: a session with this id is already stored.
            SessionLeasedError: a process has a session of this id live.
        """
        record = parse_header(header)
        try:
            session = Session.restore(
                SessionHeader.from_record(record), DEFAULT_REGISTRY.decode_stored(list(events))
            )
        except SessionError as exc:
            raise type(exc)(f"session {record['id']!r}: {exc}") from exc
        await asyncio.to_thread(self._store_new, session)
        return session

    async def store_new(self, session: Session) -> None:
        """Store a whole session built in this process and never live (a fork),
        under its own id, in one write.

        Raises:
            StoreConflictError: a session with this id is already stored.
            SessionLeasedError: a process has a session of this id live.
            OSError, LogStoreError: the write failed.
        """
        await asyncio.to_thread(self._store_new, session)

    def _store_new(self, session: Session) -> None:
        token = object()
        self._leases.acquire(session.id, token)
        try:
            self._backend.create(
                session.header.to_record(), [event.to_stored_record() for event in session.events]
            )
        except StoreConflictError:
            # Restored above, its seqs run from 0: the id is what is stored.
            raise StoreConflictError(
                f"session {session.id} is already stored (delete it first to replace it)"
            ) from None
        finally:
            self._leases.release(session.id, token)

    async def delete(self, session_id: str) -> None:
        """Delete a stored session.

        Raises:
            SessionConflictError: the session is live (stop its agent first).
            SessionNotFoundError: nothing is stored under this id.
        """
        if self._store.get(session_id) is not None:
            raise SessionConflictError(f"session {session_id!r} is live; it cannot be deleted")
        await asyncio.to_thread(self._delete, session_id)

    def _delete(self, session_id: str) -> None:
        token = object()
        self._leases.acquire(session_id, token)
        try:
            self._backend.delete(session_id)
        finally:
            self._leases.release(session_id, token)

    async def _read(self, session_id: str) -> Session:
        session, torn = await asyncio.to_thread(_load, self._backend, session_id)
        if torn is not None:
            log.warning(
                "session %s: its log ends in a torn line (line %d, %d bytes), left out; "
                "the session's next write cuts it off",
                session_id,
                torn.line,
                torn.discarded_bytes,
            )
        return session

    async def _repair(self, session: Session) -> None:
        stored = len(session.events)
        if repair(session):
            # Written directly, under the lease prepare_resume holds: the
            # session handed out is a fresh object the writer starts afresh.
            closing = [event.to_record() for event in session.events[stored:]]
            await asyncio.to_thread(self._backend.write, session.header.to_record(), closing)


def _load(backend: LogBackend, session_id: str) -> tuple[Session, TornTail | None]:
    """Read and decode a stored session, and say whether its log ends in a torn line."""
    # Decoding allocates an event per record, holding no cycles; pausing the
    # collector meanwhile avoids collections that walk them all.
    with collector_paused():
        try:
            stored = backend.load_events(session_id, DEFAULT_REGISTRY)
            header = SessionHeader.from_record(stored.header)
            session = Session.restore(header, stored.events, decoded=True)
            return session, stored.repaired_tail
        except SessionError as exc:
            raise type(exc)(f"session {session_id!r}: {exc}") from exc


async def store_created(ctx: Context, session: Session) -> None:
    """Return once a session just created is stored, its header included even with
    no events yet, so that the id a front end shows names a session on disk; with
    no persistence mounted (sessions in memory only), once it is flushed.

    The one step every front end takes before it shows a new session's id
    (``tether run``/``chat``, ``tether web``, ACP ``session/new``).

    Raises:
        SessionLeasedError: another process has the session open.
        OSError, LogStoreError, ExceptionGroup: the write failed.
    """
    persistence = ctx.get(PERSISTENCE)
    if persistence is not None:
        await persistence.store(session)
    else:
        await ctx.service(SESSIONS).flush(session)


async def mount_persistence(
    ctx: Context,
    backend: LogBackend,
    *,
    window: float,
    doorbell: Doorbell | None = None,
    poll: float = LOCAL_POLL,
) -> None:
    """Wire ``backend`` into ``ctx``'s fiber as the durability listener and service.

    ``doorbell`` (default: a new one) is rung after each written batch; a
    backend that hears other hosts' writes rings it too, and sets ``poll``
    (how often followers read again without a ring) accordingly.
    """
    store = ctx.service(SESSIONS)
    bell = Doorbell() if doorbell is None else doorbell

    def written(session: Session, durable: int) -> None:
        bell.ring(session.id)
        ctx.emit(SESSION_WRITTEN, session, durable)

    async def body():  # type: ignore[no-untyped-def]
        leases = LeaseBook(backend.acquire_lease)
        writer = WriteBehind(
            backend,
            leases=leases,
            window=window,
            on_written=written,
            on_stored=lambda session, _stored: bell.ring(session.id),
        )
        task = asyncio.get_running_loop().create_task(writer.run(), name="session-writer")

        async def stop() -> None:
            await writer.close()
            await task
            await asyncio.to_thread(leases.release_all)
            await asyncio.to_thread(backend.close)

        yield stop
        # The listeners belong to this effect's chain, so they are removed
        # before the writer drains: no event can slip in after the drain.
        # A turn's end is written at once: the acknowledgement of the turn
        # (an ACP answer, `tether run`'s exit) follows it and waits for it.
        yield ctx.listen(
            SESSION_EVENT,
            lambda session, event: writer.notice(session, now=event.type == TurnEnd.type),
        )
        yield ctx.listen(SESSION_FLUSH, writer.flush)
        yield ctx.listen(SESSION_DISPOSED, writer.release)
        ctx.provide(PERSISTENCE, Persistence(backend, writer, store, leases, bell, poll=poll))

    await ctx.effect(body, label="persistence")
