"""``context/environment``: the facts about where the agent works that may change.

The system prompt states only what stays the same for a session (so that a
provider's prompt cache serves it from one request to the next, see
:mod:`tether.loop.prompt`). The date and the state of the git repository
are logged instead, as one ``EnvironmentNoted`` event, when an agent's first
turn finds them different from the last note in the log::

    {"text": "Environment now:\\n- Today's date: 2026-12-05\\n- Git: …"}

It is model-visible: :func:`tether.session.derive_messages` makes it a user
message where it stands, so it comes after everything the model saw before
it and the earlier requests stay a prefix of the next one. It is part of the
core vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from tether.content import TextBlock, UserRoleMessage
from tether.session.events import Event
from tether.session.fields import check_str
from tether.session.vocabulary import EventStruct

__all__ = ["ENVIRONMENT_TYPE", "EnvironmentNoted", "environment_message", "last_noted"]

_TYPE = "context/environment"
ENVIRONMENT_TYPE = _TYPE


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
    """The text of the last ``context/environment`` event among ``events``, if any."""
    text: str | None = None
    for event in events:
        if event.type == _TYPE:
            value = event.data.get("text")
            text = value if isinstance(value, str) else None
    return text
