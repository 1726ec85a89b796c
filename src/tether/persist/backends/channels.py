"""The NOTIFY channels of sessions kept in PostgreSQL (no driver needed to name them).

Channels belong to a database, not to a schema: each schema's channels are
named after it, so hosts of another schema on the same database do not hear
this one's doorbells.
"""

from __future__ import annotations

CONTROL_CHANNEL = "control"
"""Requests to the host that holds a session: ``"cancel <session id>"``."""

EVENTS_CHANNEL = "events"
"""The doorbell of committed writes: a line ``"<session id> <last seq>"`` per session
(several lines when a host's wake-ups were coalesced)."""

RUNS_CHANNEL = "runs"
"""The doorbell of the run queue: ``"<session id>"`` of a run just submitted."""

CHANNELS = (CONTROL_CHANNEL, EVENTS_CHANNEL, RUNS_CHANNEL)


def channel(schema: str, name: str) -> str:
    """The NOTIFY channel ``name`` of the sessions kept in ``schema``."""
    return f"tether.{schema}.{name}"


def sessions_rung(payload: str) -> list[str]:
    """The session ids an events doorbell payload names (one ``"<id> <seq>"`` per line)."""
    return [line.rpartition(" ")[0] for line in payload.split("\n") if line]
