"""``context/environment``: the facts about where the agent works that may change.

The system prompt states only what stays the same for a session (so that a
provider's prompt cache serves it from one request to the next, and from
one session to another, see :mod:`tether.loop.prompt`). The working
directory, the date and the state of the git repository are logged instead,
as one ``EnvironmentNoted`` event, when an agent's first turn finds them
different from the last note in the log::

    {"text": "Environment now:\\n- Working directory: /src/app\\n- Today's date: …\\n- Git: …"}

It is model-visible: :func:`tether.session.derive_messages` makes it a user
message where it stands, so it comes after everything the model saw before
it and the earlier requests stay a prefix of the next one. It is part of the
core vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from tether.content import TextBlock, UserRoleMessage
from tether.session.compaction import COMPACTED_TYPE
from tether.session.events import Event
from tether.session.fields import check_str
from tether.session.settings import HistoryCleared
from tether.session.vocabulary import EventStruct

__all__ = [
    "ENVIRONMENT_TYPE",
    "NOTED_TYPES",
    "EnvironmentNoted",
    "environment_message",
    "last_noted",
]

_TYPE = "context/environment"
ENVIRONMENT_TYPE = _TYPE
NOTED_TYPES = frozenset({_TYPE, COMPACTED_TYPE, HistoryCleared.type})
"""The types :func:`last_noted` reads."""


class EnvironmentNoted(EventStruct, frozen=True):
    """The changing facts of the agent's environment, as noted (see the module docstring)."""

    type: ClassVar[str] = _TYPE

    text: str

    def __post_init__(self) -> None:
        check_str(_TYPE, "text", self.text)


def environment_message(noted: EnvironmentNoted) -> UserRoleMessage:
    """The message the model sees for ``noted``."""
    return UserRoleMessage((TextBlock(noted.text),))


def last_noted(events: Iterable[Event]) -> str | None:
    """The text of the last ``context/environment`` note the model still sees among
    ``events`` (those of :data:`NOTED_TYPES` suffice), if any: a note that a later
    compaction summarized, or that a ``history/cleared`` dropped, is not seen."""
    text: str | None = None
    seq = -1
    for event in events:
        data = event.data
        if event.type == _TYPE:
            value = data.get("text")
            text, seq = (value if isinstance(value, str) else None), event.seq
        elif event.type == HistoryCleared.type:
            text = None
        elif event.type == COMPACTED_TYPE:
            first, last = data.get("first_seq"), data.get("last_seq")
            if isinstance(first, int) and isinstance(last, int) and first <= seq <= last:
                text = None
    return text
