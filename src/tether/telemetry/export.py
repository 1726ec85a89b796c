"""One session's spans from its log: where they hang, what is sent, what is left.

:class:`SessionTrace` holds the :class:`~tether.telemetry.spans.TraceFold` of
one session and the seq through which its spans have been sent
(:class:`ExportMarks`, a small file per session in the data directory).
Folding always starts at seq 0, so whatever process folds a log — the one
that wrote it, the one that resumed it after a crash or a takeover, or
``tether sessions trace`` — builds the same spans; only the spans that close
after the mark are sent again. The mark is written after the endpoint took the
spans, so a crash between the two sends those spans once more, with the same
ids (a backend that keys spans by id keeps one copy).

A child agent's session (its header's lineage names a delegation) hangs under
the parent's ``execute_tool`` span of the delegating call, in the parent's
trace: :func:`trace_parent` finds it in the parent's log.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tether.fence import environ, is_secret
from tether.session import Event, ToolCallEvent, ToolResultEvent, TurnStart
from tether.session.events import of_types
from tether.session.model import session_model
from tether.telemetry.spans import Pricing, SpanRecord, TraceFold, TraceParent, span_id, trace_id

if TYPE_CHECKING:
    from tether.llm.catalog import ModelCatalog
    from tether.session import Session, SessionHeader

__all__ = ["ExportMarks", "SessionTrace", "catalog_pricing", "known_secrets", "trace_parent"]

Loader = Callable[[str], Awaitable["Session | None"]]
"""Reads a session by id (live or stored); ``None`` when it cannot be read."""

_PLACING = frozenset({TurnStart.type, ToolCallEvent.type, ToolResultEvent.type})
"""The events that place a tool call in its turn."""

MAX_DEPTH = 16
"""How many delegations up :func:`trace_parent` follows before it gives up."""


def known_secrets() -> tuple[str, ...]:
    """The values of tether's secret-named variables (API keys, tokens), for masking."""
    return tuple(value for name, value in environ().items() if is_secret(name) and value)


def catalog_pricing(catalog: ModelCatalog) -> Pricing:
    """Prices from ``catalog``: ``(model, usage) -> (amount, currency)`` or ``None``."""

    def price(model: str, usage: Mapping[str, int]) -> tuple[float, str] | None:
        entry = catalog.get(model)
        if entry is None or entry.prices is None:
            return None
        return entry.prices.cost(usage), entry.prices.currency

    return price


async def trace_parent(header: SessionHeader, load: Loader) -> TraceParent | None:
    """Where the turns of the session of ``header`` hang: ``None`` for a root session,
    else the delegating call's ``execute_tool`` span in the parent's trace.

    A parent that cannot be read, or a call not in its log, leaves the child's
    turns as roots of traces of their own.
    """
    depth = 0
    chain: list[tuple[str, str]] = []  # (parent id, call id), nearest first
    current: SessionHeader | None = header
    parents: list[Session] = []
    while current is not None and depth < MAX_DEPTH:
        lineage = current.lineage
        if lineage is None or lineage.delegation is None:
            break
        parent = await load(lineage.parent)
        if parent is None:
            break
        chain.append((lineage.parent, lineage.delegation.call))
        parents.append(parent)
        current = parent.header
        depth += 1
    found: TraceParent | None = None
    # From the root down: each level's trace is its parent's, the root's its turn's.
    for (parent_id, call), parent in zip(reversed(chain), reversed(parents), strict=True):
        located = _call_position(parent.events, call)
        if located is None:
            return None
        turn_seq, call_seq = located
        trace = found.trace_id if found is not None else trace_id(parent_id, turn_seq)
        found = TraceParent(trace, span_id(parent_id, call_seq))
    return found


def _call_position(events: Iterable[Event], call: str) -> tuple[int, int] | None:
    """``(seq of its turn's start, seq opening its span)`` of tool call ``call``."""
    turn_seq: int | None = None
    for event in of_types(events, _PLACING):
        payload = event.payload
        if isinstance(payload, TurnStart):
            turn_seq = event.seq
        elif isinstance(payload, ToolCallEvent | ToolResultEvent) and payload.id == call:
            return None if turn_seq is None else (turn_seq, event.seq)
    return None


class ExportMarks:
    """The seq through which each session's spans were sent, one small file each.

    A mark is written whole (a temporary file renamed over the old one), so a
    crash leaves the old mark or the new one, never a torn one.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def get(self, session_id: str) -> int:
        """The mark of ``session_id``; -1 when nothing was sent (or the file is unreadable)."""
        try:
            data = json.loads((self.directory / f"{session_id}.json").read_text())
        except (OSError, ValueError):
            return -1
        sent = data.get("sent_through") if isinstance(data, dict) else None
        return sent if type(sent) is int else -1

    def set(self, session_id: str, seq: int) -> None:
        """Record that the spans of ``session_id`` closing at or before ``seq`` were sent.

        Raises:
            OSError: the file could not be written.
        """
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=self.directory, prefix=".mark-")
        try:
            with os.fdopen(fd, "w") as file:
                json.dump({"sent_through": seq}, file)
            os.replace(temporary, self.directory / f"{session_id}.json")
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


class SessionTrace:
    """The fold of one session and how far its spans were sent."""

    def __init__(self, fold: TraceFold, sent_through: int = -1) -> None:
        self.fold = fold
        self.sent_through = sent_through
        """Spans closing at or before this seq were sent before."""

    @classmethod
    def of(
        cls,
        session: Session,
        parent: TraceParent | None,
        *,
        content: bool = False,
        pricing: Pricing | None = None,
        configured_model: str | None = None,
        sent_through: int = -1,
    ) -> SessionTrace:
        """A trace of ``session`` folded from seq 0, nothing of it folded yet."""
        header = session.header
        lineage = header.lineage
        seeded = lineage.seed_length if lineage is not None and lineage.delegation is None else 0
        fold = TraceFold(
            session.id,
            session_model(session, configured=configured_model, at=0).model,
            parent=parent,
            content=content,
            pricing=pricing,
            skip_before=seeded,
            secrets=known_secrets(),
        )
        return cls(fold, sent_through)

    def take(self, events: Iterable[Event]) -> list[SpanRecord]:
        """Fold ``events`` (the next ones in seq order); the spans they closed that were
        not sent before."""
        sent = self.sent_through
        return [span for span in self.fold.fold_all(events) if span.end_seq > sent]
