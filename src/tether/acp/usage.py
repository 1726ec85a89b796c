"""Token usage and cost of one session, as ACP ``usage_update`` payloads.

A :class:`UsageMeter` folds a session's events in order. Each
``assistant/message`` that carries usage figures (the provider reported
them) makes a new update:

* ``used`` — the tokens in the model's context after that answer: its input
  (the whole prompt, cached parts included) plus its output;
* ``size`` — the context window of the model that answered, from the model
  catalog of the settings (:mod:`tether.llm.catalog`); ``0`` when the settings
  do not give it;
* ``cost`` — the session's cumulative cost, only when the settings give the
  current model's prices: every answer priced at the prices of the model that
  gave it (answers of models without prices, or priced in another currency,
  count for nothing).

The model that answered is the session's model at that point of the log: the
header's, then each ``session/config`` ``model`` after it.
"""

from __future__ import annotations

from collections.abc import Mapping

from tether.acp.updates import SessionUpdate
from tether.llm.catalog import ModelCatalog, ModelEntry
from tether.session import AssistantMessageEvent, Event
from tether.session.settings import MODEL_OPTION, ConfigChanged

_ANSWER = AssistantMessageEvent.type
_CONFIG = ConfigChanged.type


class UsageMeter:
    """The usage and cost of one session so far (see the module docs)."""

    __slots__ = ("_catalog", "_costs", "_used", "model")

    def __init__(self, catalog: ModelCatalog, model: str) -> None:
        self._catalog = catalog
        self.model = model
        """The model of the next answer."""
        self._used: int | None = None
        self._costs: dict[str, float] = {}

    def advance(self, event: Event) -> bool:
        """Fold ``event`` in; whether it brought new usage figures."""
        kind = event.type
        if kind == _CONFIG:
            payload = event.payload
            if isinstance(payload, ConfigChanged) and payload.option == MODEL_OPTION:
                self.model = payload.value
            return False
        if kind != _ANSWER:
            return False
        payload = event.payload
        if not isinstance(payload, AssistantMessageEvent) or payload.usage is None:
            return False
        self._count(payload.usage)
        return True

    def _count(self, usage: Mapping[str, int]) -> None:
        self._used = usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
        entry = self._catalog.get(self.model)
        if entry is not None and entry.prices is not None:
            currency = entry.prices.currency
            self._costs[currency] = self._costs.get(currency, 0.0) + entry.prices.cost(usage)

    @property
    def reported(self) -> bool:
        """Whether any answer so far carried usage figures."""
        return self._used is not None

    def update(self) -> SessionUpdate | None:
        """The ``usage_update`` for the session now, or ``None`` before any figures."""
        if self._used is None:
            return None
        entry = self._entry()
        update: SessionUpdate = {
            "sessionUpdate": "usage_update",
            "used": self._used,
            "size": (entry.context_window or 0) if entry is not None else 0,
        }
        cost = self.cost()
        if cost is not None:
            update["cost"] = {"amount": cost[0], "currency": cost[1]}
        return update

    def cost(self) -> tuple[float, str] | None:
        """``(amount, currency)`` spent so far, when the current model's prices are known."""
        entry = self._entry()
        if entry is None or entry.prices is None:
            return None
        currency = entry.prices.currency
        return round(self._costs.get(currency, 0.0), 6), currency

    def describe(self) -> str:
        """A line for a person: the context used, and the cost when it is known."""
        if self._used is None:
            return "No usage reported yet in this session."
        entry = self._entry()
        window = entry.context_window if entry is not None else None
        context = f"{self._used:,} tokens in context"
        if window:
            context += f" of {window:,} ({self._used / window:.0%})"
        cost = self.cost()
        if cost is None:
            return f"{context}; no prices are set for {self.model} (see docs/models.md)."
        return f"{context}; {cost[0]:.4f} {cost[1]} spent in this session."

    def _entry(self) -> ModelEntry | None:
        return self._catalog.get(self.model)
