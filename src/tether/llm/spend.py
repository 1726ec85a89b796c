"""The spend gate: what a model request must pass before the LLM seam sends it.

Whoever makes a model request on behalf of a session (the agent loop's
steps, a compaction's summary, a title, a plugin calling ``ctx.llm`` from a
tool) goes through :meth:`~tether.llm.service.LlmService.stream`. When a
:class:`SpendGate` is set in :data:`SPENDING` for the running context, the
seam asks it first (:meth:`SpendGate.admit`): the gate reserves the request's
worst case, or refuses it. A refused request is not sent: its stream is one
``Finish("error", error_code="budget")``. After the stream ends, however it
ends, the seam settles the reservation with the usage the provider reported
(:meth:`SpendGate.settle`).

The agent loop sets the gate of a session's budget for the length of each of
its turns (:mod:`tether.loop.budget`); tasks started in the turn inherit it,
so tools and child agents are covered. :data:`PURPOSE` says what a request
is for (``step`` unless a caller says otherwise, as a compaction does).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Protocol

import msgspec

from tether.llm.chunks import Usage
from tether.llm.request import ModelRequest

__all__ = ["BUDGET_CODE", "PURPOSE", "SPENDING", "Admission", "SpendGate", "purpose"]

BUDGET_CODE = "budget"
"""The ``error_code`` of the finish of a request the gate refused."""


class Admission(msgspec.Struct, frozen=True):
    """The gate's answer: the request to send (maybe with ``max_tokens`` set to what was
    reserved for its output) and the gate's ticket, or the refusal (one line) and the
    error code its stream's finish carries."""

    request: ModelRequest
    ticket: object = None
    refusal: str | None = None
    code: str = "budget"


class SpendGate(Protocol):
    """Reserves before a request is sent and settles after it (see the module docs)."""

    async def admit(self, request: ModelRequest, purpose: str) -> Admission:
        """Reserve ``request``'s worst case, durably, or refuse it."""
        ...

    def settle(self, admission: Admission, usage: Usage | None, answered: bool) -> None:
        """Settle ``admission`` at ``usage`` (``None``: none reported; ``answered``:
        the provider streamed some of an answer)."""
        ...


SPENDING: ContextVar[SpendGate | None] = ContextVar("tether_spending", default=None)
"""The gate requests made in this context pass; ``None``: no budget is kept."""

PURPOSE: ContextVar[str] = ContextVar("tether_spend_purpose", default="step")
"""What requests made in this context are for, as reservations record it."""


@contextlib.contextmanager
def purpose(name: str) -> Iterator[None]:
    """Within the block, model requests are reserved as being for ``name``."""
    token = PURPOSE.set(name)
    try:
        yield
    finally:
        PURPOSE.reset(token)
