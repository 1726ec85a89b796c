"""``context/compacted``: a summary that stands in for a range of the conversation.

When a conversation grows too long for the model's context window, the agent
loop asks the model to summarize its older part and appends one
`ContextCompacted` event. Nothing is removed: the events it summarizes stay in
the log, and `tether.session.derive_messages` puts the summary in their place
when it rebuilds what the model sees::

    {"first_seq": 0, "last_seq": 411, "summary": "…", "trigger": "auto",
     "model": "deepseek:deepseek-chat", "tokens_before": 98210}

``first_seq`` and ``last_seq`` (inclusive) name the range summarized; it
always ends at a closed step, so no tool call is cut from its result.
``trigger`` says why: ``auto`` (the request would have passed the configured
share of the context window), ``overflow`` (the provider refused the request
as too long) or ``manual`` (``/compact``, or a program). ``tokens_before`` is
the estimated size of the conversation before the compaction.

It is part of the core vocabulary: every `EventRegistry` knows it, so a log
holding one loads without the plugin that wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal, get_args

from tether.session.errors import EventFormatError
from tether.session.fields import check_choice, check_str
from tether.session.vocabulary import EventStruct

__all__ = ["COMPACTED_TYPE", "CompactionTrigger", "ContextCompacted", "compaction_notice"]

CompactionTrigger = Literal["auto", "overflow", "manual"]
_TRIGGERS: tuple[str, ...] = get_args(CompactionTrigger)
_TYPE = "context/compacted"
COMPACTED_TYPE = _TYPE


class ContextCompacted(EventStruct, frozen=True):
    """A summary of events ``first_seq`` … ``last_seq`` (see the module docstring)."""

    type: ClassVar[str] = _TYPE

    first_seq: int
    last_seq: int
    summary: str
    trigger: CompactionTrigger
    model: str
    tokens_before: int

    def __post_init__(self) -> None:
        for name in ("first_seq", "last_seq", "tokens_before"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise EventFormatError(f"{_TYPE}: {name} must be an int >= 0, got {value!r}")
        if self.last_seq < self.first_seq:
            raise EventFormatError(
                f"{_TYPE}: last_seq ({self.last_seq}) is before first_seq ({self.first_seq})"
            )
        check_str(_TYPE, "summary", self.summary)
        check_choice(_TYPE, "trigger", self.trigger, _TRIGGERS)
        check_str(_TYPE, "model", self.model)


_WHY = {
    "auto": "the conversation neared the context window",
    "overflow": "the provider refused the request as too long",
    "manual": "asked for",
}


def compaction_notice(data: Mapping[str, object]) -> str:
    """The one line a terminal shows for a ``context/compacted`` event's data."""
    trigger = str(data.get("trigger"))
    return (
        f"(context compacted: events {data.get('first_seq')} to {data.get('last_seq')} "
        f"summarized, {_WHY.get(trigger, trigger)}; the log keeps them)"
    )
