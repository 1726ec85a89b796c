"""Reads of the PostgreSQL backend: the queries, and event rows as event lines.

An event row becomes the line the file backends store (`tether.persist.backends.lines`),
its ``data`` as the database gives it back, so one decoder checks every backend's events.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import msgspec
import psycopg

from tether.persist.backends.errors import SessionNotFoundError
from tether.persist.backends.lines import drained, gathered

Row = tuple[int, str, float, str]
"""An event row as read: ``(seq, type, time, data)``."""


def read_log(cur: psycopg.Cursor[Any], session_id: str) -> tuple[str, list[Row]]:
    """The stored header (JSON text) and every event row of a session, in one snapshot.

    Raises:
        SessionNotFoundError: the session has no row.
    """
    cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
    stored = cur.execute(
        "SELECT header::text FROM sessions WHERE id = %s", (session_id,)
    ).fetchone()
    if stored is None:
        raise SessionNotFoundError(session_id)
    rows = cur.execute(
        "SELECT seq, type, time, data::text FROM events WHERE session_id = %s ORDER BY seq",
        (session_id,),
    ).fetchall()
    return stored[0], rows


def read_after(
    cur: psycopg.Cursor[Any], session_id: str, after_seq: int, limit: int | None
) -> list[Row]:
    """The event rows of a session whose seq is greater than ``after_seq``, the first ``limit``.

    Raises:
        SessionNotFoundError: the session has no row.
    """
    if cur.execute("SELECT 1 FROM sessions WHERE id = %s", (session_id,)).fetchone() is None:
        raise SessionNotFoundError(session_id)
    return cur.execute(
        "SELECT seq, type, time, data::text FROM events"
        " WHERE session_id = %s AND seq > %s ORDER BY seq LIMIT %s",
        (session_id, after_seq, limit),
    ).fetchall()


def read_listing(cur: psycopg.Cursor[Any]) -> list[tuple[Any, ...]]:
    """Every session's listing columns, with the host and pid of a live lease
    (``None`` host when none is live)."""
    return cur.execute(
        "SELECT s.id, s.header::text, s.turn_count, s.last_activity, s.title,"
        " CASE WHEN l.expires_at > clock_timestamp() THEN l.host END, l.pid"
        " FROM sessions s LEFT JOIN leases l ON l.session_id = s.id"
    ).fetchall()


def event_lines(rows: Iterable[Row]) -> bytes:
    """The event lines (`tether.persist.backends.lines`) of event rows, in their order."""
    return b"".join([_event_line(row) for row in rows])


def _event_line(row: Row) -> bytes:
    """The event line of an event row: the line the file backends store, its
    ``data`` as the database gives it back.

    The lines are then read by the same decoder as theirs, which checks each
    one (a row's ``data`` that is not a JSON object fails there, naming its seq).
    """
    seq, kind, time, data = row
    return (
        _LINE_ENCODER.encode({"type": kind, "seq": seq, "time": time, "data": msgspec.Raw(data)})
        + b"\n"
    )


def event_blocks(rows: list[Row]) -> Iterator[bytes]:
    """:func:`event_lines` of ``rows`` in blocks (`gathered`), each row let go
    as its block is built."""
    return gathered(_event_line(row) for row in drained(rows))


_LINE_ENCODER = msgspec.json.Encoder()
