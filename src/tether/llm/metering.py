"""Token usage and cost of one session, folded from its log.

A :class:`UsageMeter` folds a session's events in order. Each
``assistant/message`` that carries usage figures (the provider reported
them) counts:

* the tokens in the model's context after that answer: its input (the whole
  prompt, cached parts included) plus its output — until a compaction
  (``context/compacted``) shrinks the context, whose new size is known only
  from the next answer;
* the session's cumulative cost, when the model catalog of the settings
  (:mod:`tether.llm.catalog`) gives prices: every answer priced at the prices
  of the model that gave it (answers of models without prices, or priced in
  another currency than the current model's, count for nothing).

The model that answered is the session's model at that point of the log: the
header's, then each ``session/config`` ``model`` after it. Frontends build on
it: the ACP bridge's ``usage_update`` (:mod:`tether.acp.usage`) and the chat's
``/cost``.
"""

from __future__ import annotations

from collections.abc import Mapping

from tether.llm.catalog import ModelCatalog, ModelEntry
from tether.session import AssistantMessageEvent, Event
from tether.session.compaction import ContextCompacted
from tether.session.settings import MODEL_OPTION, ConfigChanged

_ANSWER = AssistantMessageEvent.type
_CONFIG = ConfigChanged.type
_COMPACTED = ContextCompacted.type


class UsageMeter:
    """The usage and cost of one session so far (see the module docs)."""

    __slots__ = ("_catalog", "_compacted_from", "_costs", "_used", "model")

    def __init__(self, catalog: ModelCatalog, model: str) -> None:
        self._catalog = catalog
        self.model = model
        """The model of the next answer."""
        self._used: int | None = None
        self._compacted_from: int | None = None
        """The context's size a compaction started from, until the next answer."""
        self._costs: dict[str, float] = {}

    def advance(self, event: Event) -> bool:
        """Fold ``event`` in; whether it brought new usage figures."""
        kind = event.type
        if kind == _COMPACTED:
            payload = event.payload
            if isinstance(payload, ContextCompacted):
                self._compacted_from, self._used = payload.tokens_before, None
            return False
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
        self._compacted_from = None
        entry = self._catalog.get(self.model)
        if entry is not None and entry.prices is not None:
            currency = entry.prices.currency
            self._costs[currency] = self._costs.get(currency, 0.0) + entry.prices.cost(usage)

    @property
    def used(self) -> int | None:
        """The tokens in context after the last answer with figures; ``None`` before
        any, and after a compaction until the next answer."""
        return self._used

    def context_share(self) -> float | None:
        """The share of the model's context window in use after the last answer
        (1.0 is full; more when the window was overrun), when both are known."""
        entry = self._entry()
        window = entry.context_window if entry is not None else None
        if self._used is None or not window:
            return None
        return self._used / window

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
            if self._compacted_from is not None:
                return (
                    f"The context was compacted from {self._compacted_from:,} tokens; "
                    f"its new size is known after the next answer.{self._spent()}"
                )
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

    def _spent(self) -> str:
        cost = self.cost()
        return "" if cost is None else f" {cost[0]:.4f} {cost[1]} spent in this session."

    def _entry(self) -> ModelEntry | None:
        return self._catalog.get(self.model)
