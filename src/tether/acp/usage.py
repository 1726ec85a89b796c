"""Token usage and cost of one session, as ACP ``usage_update`` payloads.

The meter itself is :class:`tether.llm.metering.UsageMeter` (what counts, and
how an answer is priced); this adds the wire form. Each update carries:

* ``used`` — the tokens in the model's context after the last answer with
  figures: its input (the whole prompt, cached parts included) plus its output;
* ``size`` — the context window of the model that answered, from the model
  catalog of the settings (:mod:`tether.llm.catalog`); ``0`` when the settings
  do not give it;
* ``cost`` — the session's cumulative cost, only when the settings give the
  current model's prices.
"""

from __future__ import annotations

from tether.acp.updates import SessionUpdate
from tether.llm.metering import UsageMeter as _Meter


class UsageMeter(_Meter):
    """The usage and cost of one session so far, and its ``usage_update``."""

    __slots__ = ()

    def update(self) -> SessionUpdate | None:
        """The ``usage_update`` for the session now, or ``None`` before any figures."""
        used = self.used
        if used is None:
            return None
        entry = self._entry()
        update: SessionUpdate = {
            "sessionUpdate": "usage_update",
            "used": used,
            "size": (entry.context_window or 0) if entry is not None else 0,
        }
        cost = self.cost()
        if cost is not None:
            update["cost"] = {"amount": cost[0], "currency": cost[1]}
        return update
