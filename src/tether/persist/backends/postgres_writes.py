"""Writes of the PostgreSQL backend: batches queued, committed alone or in groups.

A write is one statement, so one round trip and one transaction: a call of
the schema's ``append_batch`` function
(:data:`~tether.persist.backends.postgres_schema.APPEND_FUNCTION`), which
checks the lease, locks the session row and inserts the batch (sent as one JSON
document); the ``NOTIFY`` doorbell is rung after commit, outside the write
transaction, by the host's
:class:`~tether.persist.backends.postgres_doorbell.CommitBell`. Under load, writes of several
sessions that wait for a pooled connection are committed together, in one
transaction (one commit, one WAL flush), each call fenced on its own; a group
with a refused batch is rolled back and its batches are written again one by
one, so a refusal never costs another session. A write whose connection
breaks is retried once on a fresh connection; a retry that finds its batch
already committed (the break hid the commit) succeeds without writing it twice.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import msgspec
import psycopg

from tether.persist.backends.errors import InvalidRecordError, StoreConflictError
from tether.persist.backends.lease import SessionLeasedError, SessionTakenOverError
from tether.persist.backends.postgres_lease import Leases
from tether.persist.backends.postgres_pool import connection_lost
from tether.persist.backends.records import (
    EventRecord,
    HeaderRecord,
    check_continues,
    encode_json,
    encode_record,
    parse_batch,
    parse_header,
    validate_session_id,
)
from tether.persist.backends.summary import Activity

log = logging.getLogger(__name__)

Connect = Callable[[], AbstractContextManager[psycopg.Connection[Any]]]
"""A pooled connection for the caller alone (the backend's, so a subclass may wrap it)."""

APPEND_CALL = "SELECT append_batch(%s, %s, %s::jsonb, %s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s)"

GROUP_MAX = 32
"""The most batches one transaction commits together."""

_BUDGET_EVENTS = frozenset(("budget/reserved", "budget/settled"))
"""The event types ``keep_budget`` reads (see :data:`~.postgres_schema.BUDGET_FUNCTION`)."""


class Pending(msgspec.Struct, eq=False):
    """One session's batch on its way to the database, and how it ended."""

    session_id: str
    params: tuple[object, ...]
    batch: Sequence[EventRecord]
    bad_header: InvalidRecordError | None
    done: threading.Event = msgspec.field(default_factory=threading.Event)
    error: BaseException | None = None
    lost: bool = False
    """The connection broke while its group was committed (the group may have been stored)."""
    budgeted: bool = False
    """The batch logs a spend reservation or settlement (it is committed alone)."""


class BatchWriter:
    """Writes batches through ``connect`` under the fencing tokens of ``leases``.

    Writes use at most ``slots`` connections at once: the pool's other
    connections stay free for reads, and batches that wait for a write
    connection are committed together.
    """

    def __init__(self, connect: Connect, leases: Leases, *, slots: int) -> None:
        self._connect = connect
        self._leases = leases
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max(1, slots))
        self.queue: list[Pending] = []
        """Batches waiting for a connection; the next writer to get one commits them together."""

    def submit(
        self, header: Mapping[str, object], events: Sequence[Mapping[str, object]], *, create: bool
    ) -> None:
        """Queue one batch and return once it is committed (by this thread or
        another one committing a group); raise what refused it.

        Raises:
            InvalidRecordError: the header (first write) or an event is invalid.
            StoreConflictError: the batch does not continue the stored log, or a
                create finds the session stored.
            SessionTakenOverError: another host took the lease over.
            SessionLeasedError: another host holds the lease (a write without one).
        """
        mine = self._pending(header, events, create=create)
        with self._lock:
            self.queue.append(mine)
        while not mine.done.is_set():
            group: list[Pending] = []
            try:
                with self._slots:
                    with self._connect() as conn:
                        with self._lock:
                            group = self.queue[:GROUP_MAX]
                            del self.queue[:GROUP_MAX]
                        alone = self._commit_group(conn, group) if group else []
                    for pending in alone:
                        self._commit_alone(pending, retried=pending.lost)
            except BaseException as exc:
                for pending in group:
                    if not pending.done.is_set():
                        pending.error = exc
                        pending.done.set()
                with self._lock:
                    queued = mine in self.queue
                    if queued:  # never to be written once its caller got the error
                        self.queue.remove(mine)
                if queued or mine in group:
                    raise
                mine.done.wait()  # another thread took it: its outcome is this call's
            if not group:
                mine.done.wait()  # another thread is committing it
        if mine.error is not None:
            raise mine.error

    def _pending(
        self, header: Mapping[str, object], events: Sequence[Mapping[str, object]], *, create: bool
    ) -> Pending:
        """The batch checked and turned into the parameters of :data:`APPEND_CALL`."""
        session_id = validate_session_id(header.get("id"))
        batch = parse_batch(session_id, events)
        # The header matters only to a first write, which the server tells apart.
        record: HeaderRecord | None = None
        bad_header: InvalidRecordError | None = None
        try:
            record = parse_header(header)
        except InvalidRecordError as exc:
            bad_header = exc
        activity = Activity().extend_written(batch)
        params = (
            session_id,
            self._leases.token(session_id),
            None if record is None else _storable(encode_json(record)),
            None if record is None else record["created_at"],
            _storable(b"[" + b",".join(encode_record(event) for event in batch) + b"]"),
            batch[0]["seq"] if batch else 0,
            len(batch),
            activity.turn_count,
            activity.last_activity,
            activity.title,
            None,  # the doorbell is rung after commit (see CommitBell)
            create,
        )
        budgeted = any(event["type"] in _BUDGET_EVENTS for event in batch)
        return Pending(session_id, params, batch, bad_header, budgeted=budgeted)

    def _commit_group(self, conn: psycopg.Connection[Any], group: list[Pending]) -> list[Pending]:
        """Commit the batches of ``group`` (of several sessions) in one transaction.

        Returns the batches to commit one by one: all of them when the group
        failed (a refused batch rolls the others back with it; they are then
        written again, each alone, with the checks of a first attempt), the
        batches that log spending (see the module docs), or just ``group``
        itself when it holds one batch.
        """
        alone = [pending for pending in group if pending.budgeted]
        if alone:
            group = [pending for pending in group if not pending.budgeted]
        if len(group) <= 1:
            return group + alone
        # One lock order (code point order of the ids) for every group and renewal.
        group.sort(key=lambda pending: pending.session_id)
        try:
            with conn.transaction(), conn.pipeline():
                for pending in group:
                    conn.execute(APPEND_CALL, pending.params)
        except psycopg.OperationalError as exc:
            lost = connection_lost(exc)
            for pending in group:
                pending.lost = lost
            return group + alone
        except psycopg.Error:
            return group + alone
        for pending in group:
            pending.done.set()
        return alone

    def _commit_alone(self, pending: Pending, *, retried: bool) -> None:
        """Commit one batch in its own transaction, retried once on a fresh connection
        when the connection broke (a retry first checks whether the break hid its commit)."""
        try:
            while True:
                try:
                    with self._connect() as conn:
                        if retried and self._already_stored(conn, pending):
                            return
                        conn.execute(APPEND_CALL, pending.params)
                    return
                except psycopg.OperationalError as exc:
                    if retried or not connection_lost(exc):
                        raise
                    log.info(
                        "session %s: the connection broke during a write (%s); retrying",
                        pending.session_id,
                        exc,
                    )
                    retried = True
                except psycopg.Error as exc:
                    self._raise_refusal(exc, pending.session_id, pending.batch, pending.bad_header)
                    raise
        except Exception as exc:  # the writer of this batch raises it
            pending.error = exc
        finally:
            pending.done.set()

    def _raise_refusal(
        self,
        exc: psycopg.Error,
        session_id: str,
        batch: Sequence[EventRecord],
        bad_header: InvalidRecordError | None,
    ) -> None:
        """Turn a refusal of ``append_batch`` into the backend's error; return otherwise."""
        message = exc.diag.message_primary or ""
        if exc.sqlstate == "TT001":
            host = message or None
            self._leases.lost(session_id, host)
            raise SessionTakenOverError(session_id, host) from None
        if exc.sqlstate == "TT002":
            host, _, pid = message.rpartition(" ")
            raise SessionLeasedError(session_id, int(pid) or None, host=host) from None
        if exc.sqlstate == "TT003":
            check_continues(session_id, batch, int(message))
            raise StoreConflictError(f"session {session_id!r}: the batch does not continue the log")
        if exc.sqlstate == "TT004" and bad_header is not None:
            raise bad_header from None
        if exc.sqlstate == "TT005":
            raise StoreConflictError(f"session {session_id} is already stored") from None

    def _already_stored(self, conn: psycopg.Connection[Any], pending: Pending) -> bool:
        """Whether a retried batch was committed by the attempt whose connection broke.

        A create's is when the stored header is its own and the log ends with
        its batch (an empty create leaves only the header to compare).
        """
        batch, create = pending.batch, pending.params[-1] is True
        if not batch and not create:
            return False
        first = batch[0]["seq"] if batch else 0
        row = conn.execute(
            "SELECT s.next_seq, e.type, e.time, s.header = %s::jsonb FROM sessions s"
            " LEFT JOIN events e ON e.session_id = s.id AND e.seq = %s WHERE s.id = %s",
            (pending.params[2], first, pending.session_id),
        ).fetchone()
        if row is None or (create and not row[3]):
            return False
        if not batch:
            return bool(row[0] == 0)
        return row[0] == batch[-1]["seq"] + 1 and (row[1], row[2]) == (
            batch[0]["type"],
            batch[0]["time"],
        )


def _storable(text: str | bytes) -> str:
    """JSON text ``jsonb`` accepts: a NUL character (``\\u0000``, which it
    refuses) in a string is stored as U+FFFD, as a lone surrogate is."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if "\\u0000" not in text:
        return text
    return encode_json(_without_nul(json.loads(text)))


def _without_nul(value: object) -> object:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    return value
