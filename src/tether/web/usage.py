"""Tokens and cost of each turn of a session, as the session page shows them.

Folded from the log alone: each ``assistant/message`` that reported usage is
counted in its turn, priced by the catalog's prices of the model the session
was set to at that point (``session/config model``, else the header's, else
``default_model``) with :meth:`~tether.llm.catalog.Prices.cost`. A model the
settings give no prices has no cost (``None``), never a guessed one.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from tether.llm.catalog import ModelCatalog
from tether.session import AssistantMessageEvent, Event, TurnStart
from tether.session.settings import MODEL_OPTION, ConfigChanged


class TurnUsage(msgspec.Struct):
    """What one turn's answers used, and cost when the prices are known."""

    turn: int
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    currency: str | None = None

    def to_json(self) -> dict[str, object]:
        return msgspec.structs.asdict(self)


def usage_by_turn(events: Iterable[Event], catalog: ModelCatalog, model: str) -> list[TurnUsage]:
    """Each turn that reported usage, in turn order; ``model`` is the session's first."""
    turns: dict[int, TurnUsage] = {}
    turn = 0
    for event in events:
        kind = event.type  # by name first: reading a chunk's payload would build it
        if kind == "turn/start":
            payload = event.payload
            assert isinstance(payload, TurnStart)
            turn = payload.turn
        elif kind == "session/config":
            payload = event.payload
            if isinstance(payload, ConfigChanged) and payload.option == MODEL_OPTION:
                model = payload.value
        elif kind == "assistant/message":
            payload = event.payload
            if not isinstance(payload, AssistantMessageEvent) or payload.usage is None:
                continue
            row = turns.setdefault(turn, TurnUsage(turn))
            row.input_tokens += payload.usage.get("input_tokens", 0)
            row.output_tokens += payload.usage.get("output_tokens", 0)
            entry = catalog.get(model)
            if entry is not None and entry.prices is not None:
                row.cost = (row.cost or 0.0) + entry.prices.cost(payload.usage)
                row.currency = entry.prices.currency
    return list(turns.values())
