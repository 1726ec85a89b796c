"""The seam between the session layer and durable storage of session logs.

A session log is a header plus events whose seqs run from 0 without gaps. A
:class:`LogBackend` stores them; it knows nothing of the runtime, is
synchronous, and is safe to call from several threads (callers in async code
run it in a worker thread).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import msgspec

from tether.persist.backends.errors import CorruptLogError
from tether.persist.backends.lease import Holder, Lease
from tether.persist.backends.records import HeaderRecord, parse_stored_header
from tether.session.lineage import Delegation, Lineage, read_lineage
from tether.session.stored import StoredEvent

if TYPE_CHECKING:
    from tether.session.log import LoadedEvents
    from tether.session.registry import EventRegistry


class TornTail(msgspec.Struct, frozen=True):
    """The incomplete last line a JSONL load found at the end of a file.

    ``line`` is its 1-based line number, ``offset`` where the intact part ends
    and ``discarded_bytes`` how many bytes the load left out. The load does
    not change the file; the session's next write cuts the line off.
    """

    line: int
    offset: int
    discarded_bytes: int


class StoredLog(msgspec.Struct, frozen=True):
    """A session log as loaded: the header as a fresh dict, and each event
    decoded once into a `StoredEvent` (its data raw JSON, for the session
    layer to decode into its payload)."""

    header: HeaderRecord
    events: list[StoredEvent]
    repaired_tail: TornTail | None = None


class LoadedLog(msgspec.Struct, frozen=True):
    """A session log as loaded and decoded: the header as a fresh dict, and
    the events, each at its seq and carrying the payload the registry it
    was decoded by gives its type, held packed as `Session.restore` takes
    them (with ``decoded=True``)."""

    header: HeaderRecord
    events: LoadedEvents
    repaired_tail: TornTail | None = None


class SessionSummary(msgspec.Struct, frozen=True):
    """One row of a session listing.

    ``turn_count`` counts ``turn/start`` events, ``last_activity`` is the time of
    the last event and ``title`` the text of the first ``user/message`` that has
    text, shortened; ``meta`` holds the header's labels and ``lineage`` its
    lineage (a child agent's parent and delegation, for one; logs that kept
    them in the labels are read into it, see :mod:`tether.session.lineage`).
    A session that cannot be read has ``error`` set, ``cwd`` and
    ``created_at`` as ``None`` where unknown, and a ``last_activity`` taken from
    storage metadata where the backend has it. ``holder`` names who has the
    session live (host and pid) where the backend shares sessions between
    hosts (PostgreSQL), else ``None``.
    """

    id: str
    cwd: str | None
    created_at: float | None
    turn_count: int
    last_activity: float
    title: str | None
    error: str | None = None
    meta: Mapping[str, str] = msgspec.field(default_factory=dict)
    holder: Holder | None = None
    lineage: Lineage | None = None

    @property
    def delegation(self) -> Delegation | None:
        """How the session was delegated to, for a child agent's; else ``None``."""
        lineage = self.lineage
        return None if lineage is None else lineage.delegation

    @property
    def delegator(self) -> str | None:
        """The session id of the agent that delegated to the session, for a child's."""
        lineage = self.lineage
        return None if lineage is None or lineage.delegation is None else lineage.parent

    def __hash__(self) -> int:
        # ``meta`` is a dict, which cannot be hashed; rows equal in it are equal in the rest.
        return hash(
            (
                self.id,
                self.cwd,
                self.created_at,
                self.turn_count,
                self.last_activity,
                self.title,
                self.error,
                self.holder,
            )
        )

    @classmethod
    def of_row(
        cls,
        session_id: str,
        header: object,
        turn_count: int,
        last_activity: float,
        title: str | None,
        *,
        holder: Holder | None = None,
    ) -> SessionSummary:
        """The row of a session a database keeps a summary row for (its header as
        JSON text); a header that does not parse makes the row :meth:`unreadable`."""
        try:
            record = parse_stored_header(session_id, header)
        except CorruptLogError as exc:
            return cls.unreadable(session_id, last_activity, str(exc))
        lineage, labels = read_lineage(record["lineage"], record["meta"])
        return cls(
            id=session_id,
            cwd=record["cwd"],
            created_at=record["created_at"],
            turn_count=turn_count,
            last_activity=last_activity,
            title=title,
            meta=labels,
            holder=holder,
            lineage=lineage,
        )

    @classmethod
    def unreadable(cls, session_id: str, last_activity: float, error: str) -> SessionSummary:
        """The row for a session that cannot be read, saying why."""
        return cls(
            id=session_id,
            cwd=None,
            created_at=None,
            turn_count=0,
            last_activity=last_activity,
            title=None,
            error=error,
        )


def newest_first(summaries: Iterable[SessionSummary]) -> builtins.list[SessionSummary]:
    """Order a listing by ``last_activity``, newest first, ties by id."""
    return sorted(summaries, key=lambda s: (-s.last_activity, s.id))


class LogBackend(Protocol):
    """Durable storage for session logs.

    Session ids are checked with
    :func:`~tether.persist.backends.records.validate_session_id`; every method
    raises :class:`~tether.persist.backends.errors.InvalidSessionIdError` for
    one that fails, and
    :class:`~tether.persist.backends.errors.BackendClosedError` once the
    backend is closed.
    """

    def exists(self, session_id: str) -> bool:
        """Whether anything is stored for ``session_id``."""
        ...

    def next_seq(self, session_id: str) -> int:
        """The seq the session's next event must carry: how many events are stored.

        0 if the session is not stored. Cheap: it does not read the whole log.

        Raises:
            CorruptLogError: the part of the log it reads is damaged.
            UnsupportedFormatError: the log was written by a newer format.
        """
        ...

    def write(self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]) -> None:
        """Store one batch of events for the session ``header["id"]``; durable on return.

        The first write of a session stores the header and the batch
        atomically: both become visible together or not at all. It may be
        empty: a session created and not yet used is stored as its header.
        Later writes append, and their header is only used for its id. An
        empty batch for a stored session does nothing. An event's ``data``
        is a mapping, or its JSON object already encoded as a
        ``msgspec.Raw`` (what the writer hands over), stored as it is once
        checked.

        Raises:
            InvalidRecordError: the header (first write) or an event does not
                have the stored shape or is not JSON-serialisable.
            StoreConflictError: the batch does not continue the stored log
                (another writer created the session or appended first, or the
                seqs skip or repeat). Nothing of the batch is stored.
        """
        ...

    def create(self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]) -> None:
        """Store a new session: ``header`` and a first batch (maybe empty), atomically,
        only if nothing is stored under its id; durable on return.

        The check and the store are one step (an exclusive create of the file,
        an insert of the header row that conflicts): of two writers creating
        one id, exactly one succeeds, and a session stored before is never
        taken for the new one's history.

        Raises:
            InvalidRecordError: the header or an event is invalid.
            StoreConflictError: something is stored under the id (another writer
                created it), or the batch does not start at seq 0. Nothing is stored.
        """
        ...

    def load(self, session_id: str) -> StoredLog:
        """Read a whole session log, validated.

        Each event is decoded once, its data checked to be a well-formed JSON
        object and left raw (see :class:`StoredLog`).

        Loading never writes (it works on read-only storage). A torn last line
        (a crash during an append) is left out and reported in
        :attr:`StoredLog.repaired_tail`; everything before it is kept.

        Raises:
            SessionNotFoundError: nothing is stored for ``session_id``.
            CorruptLogError: the header or an event before the last line is
                damaged; it names where.
            UnsupportedFormatError: the log was written by a newer format.
        """
        ...

    def load_events(self, session_id: str, registry: EventRegistry) -> LoadedLog:
        """Read a whole session log and decode it into events through ``registry``.

        What :meth:`load` then `EventRegistry.decode_stored` would give, with
        the same checks and errors, in one pass where the log allows (see
        `tether.session.log_decoder`): a log it does not allow is read the
        checked way, which names the damage.

        Raises:
            Everything :meth:`load` raises.
            UnknownEventTypeError, EventFormatError: as
                `EventRegistry.decode_stored`.
        """
        ...

    def events_after(
        self, session_id: str, after_seq: int, *, limit: int | None = None
    ) -> builtins.list[StoredEvent]:
        """The stored events of ``session_id`` whose seq is greater than ``after_seq``,
        in order: the first ``limit`` of them (all with ``None``).

        What a follower of the log reads each time it is told to look again:
        a backend reads only what was stored after ``after_seq`` where it
        can, so that following an idle session costs nearly nothing, and no
        more than ``limit`` events' worth (about a block of lines beyond), so
        that reading a long log a call at a time holds one call's events.
        Successive calls, each after the last seq the one before returned,
        give the log without gap or duplicate. Never modifies storage (a torn
        tail is left for the next write to cut).

        Raises:
            SessionNotFoundError: nothing is stored for ``session_id``.
            CorruptLogError: what it reads is damaged.
        """
        ...

    def list(self) -> builtins.list[SessionSummary]:
        """Summarise every stored session, newest activity first.

        A session that cannot be read is listed with its ``error`` set instead
        of failing the listing. Listing never modifies storage.
        """
        ...

    def delete(self, session_id: str) -> None:
        """Remove the session's header and events, durably.

        Raises:
            SessionNotFoundError: nothing is stored for ``session_id``.
        """
        ...

    def acquire_lease(self, session_id: str) -> Lease:
        """Take the lease of ``session_id`` for this process (see :mod:`.lease`).

        Raises:
            SessionLeasedError: another running process holds it.
            OSError, sqlite3.Error: storage cannot record the lease.
        """
        ...

    def lease_holder(self, session_id: str) -> Holder | None:
        """The running process that holds the session's lease, else ``None``.

        Only reads (it works on read-only storage); its pid is ``0`` when
        unknown, its host is set where hosts share sessions. This process
        counts when it holds the lease.
        """
        ...

    def check_writable(self) -> None:
        """Prove that a write can reach the disk now, leaving nothing behind.

        Raises:
            OSError, sqlite3.Error: storage is read-only, damaged or full.
        """
        ...

    def close(self) -> None:
        """Release the backend's resources; idempotent."""
        ...


@runtime_checkable
class WritesWithoutWaiting(Protocol):
    """A backend that can try a write that never waits for a lock.

    The session writer uses it to write an acknowledged batch on the event
    loop's own thread (see :mod:`tether.persist.writer`), where waiting for
    another writer would stall everything else the process does.
    """

    def try_write(
        self, header: Mapping[str, object], events: Sequence[Mapping[str, object]]
    ) -> bool:
        """Store a batch as :meth:`LogBackend.write` does, unless that would wait.

        Returns ``False``, having changed nothing, when the write would wait
        for a lock another writer holds, or is not a plain append to a
        stored session (a first write creates a file or a row; let
        :meth:`LogBackend.write` do it). Otherwise the batch is durable on
        return, as after :meth:`LogBackend.write`, and it raises what that raises.
        """
        ...


@runtime_checkable
class SyncsLater(Protocol):
    """A backend that can store a batch without waiting for the disk, and later make
    everything it stored of a session durable in one step.

    The session writer stores this way the batches nobody waits for (see
    :mod:`tether.persist.writer`): a batch is readable once stored, and only an
    acknowledgement needs it on disk, so a turn costs one sync, at its end.

    A failed write or sync takes back everything stored since the session's last
    sync (it may not have reached the disk): the session's log ends where it was
    last durable, and the batches after it are stored again by the next write.
    """

    def write_unsynced(
        self,
        header: Mapping[str, object],
        events: Sequence[Mapping[str, object]],
        *,
        wait: bool = True,
    ) -> bool:
        """Store a batch as :meth:`LogBackend.write` does, without making it durable.

        With ``wait`` false, returns ``False``, having changed nothing, when the
        write would wait for a lock another writer holds or is not a plain
        append to a stored session. Otherwise returns ``True`` and raises what
        :meth:`LogBackend.write` raises.
        """
        ...

    def sync(self, session_id: str, *, wait: bool = True) -> bool:
        """Make every batch of ``session_id`` stored so far durable.

        With ``wait`` false, returns ``False``, having done nothing, when that
        would wait for a lock another writer holds.

        Raises:
            SessionNotFoundError: the session is not stored.
            OSError: the disk failed; what was stored since the last sync is taken back.
        """
        ...
