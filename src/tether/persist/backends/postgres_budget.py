"""The cluster budget's reads: how a reservation the database decided on ended, and
what a day spent, for all hosts of one PostgreSQL schema.

The decisions themselves are taken in the transaction of the batch that logs
the reservation (:data:`~tether.persist.backends.postgres_schema.BUDGET_FUNCTION`);
these queries only read them once the batch is committed.
"""

from __future__ import annotations

from typing import Any

import msgspec
import psycopg

__all__ = ["ClusterOutcome", "DayTotals", "read_day", "read_outcome"]


class DayTotals(msgspec.Struct, frozen=True):
    """What one UTC day spent (settled) and still has reserved (not settled), all hosts."""

    spent_tokens: int = 0
    spent_usd: float = 0.0
    reserved_tokens: int = 0
    reserved_usd: float = 0.0

    def of(self, unit: str) -> float:
        """Spent plus reserved in ``unit`` (``tokens`` or ``usd``)."""
        if unit == "tokens":
            return float(self.spent_tokens + self.reserved_tokens)
        return self.spent_usd + self.reserved_usd


class ClusterOutcome(msgspec.Struct, frozen=True):
    """Whether a reservation was granted, and its day's totals when it was read."""

    granted: bool
    day: DayTotals


_OUTCOME = """
SELECT r.granted, coalesce(d.spent_tokens, 0), coalesce(d.spent_usd, 0),
       coalesce(d.reserved_tokens, 0), coalesce(d.reserved_usd, 0)
FROM budget_reservations r LEFT JOIN budget_days d ON d.day = r.day
WHERE r.session_id = %s AND r.id = %s
"""


def read_outcome(
    cur: psycopg.Cursor[Any], session_id: str, reservation_id: str
) -> ClusterOutcome | None:
    """The outcome of reservation ``reservation_id`` logged by ``session_id``; ``None``
    when it has no row (it was settled, or never logged with a cluster claim)."""
    row = cur.execute(_OUTCOME, (session_id, reservation_id)).fetchone()
    if row is None:
        return None
    granted, spent_tokens, spent_usd, reserved_tokens, reserved_usd = row
    totals = DayTotals(
        int(spent_tokens), float(spent_usd), int(reserved_tokens), float(reserved_usd)
    )
    return ClusterOutcome(bool(granted), totals)


def read_day(cur: psycopg.Cursor[Any], day: str) -> DayTotals:
    """What ``day`` (``YYYY-MM-DD``) spent and has reserved; nothing when it has no row."""
    row = cur.execute(
        "SELECT spent_tokens, spent_usd, reserved_tokens, reserved_usd FROM budget_days"
        " WHERE day = %s::date",
        (day,),
    ).fetchone()
    if row is None:
        return DayTotals()
    return DayTotals(int(row[0]), float(row[1]), int(row[2]), float(row[3]))
