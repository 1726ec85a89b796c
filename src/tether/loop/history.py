"""The model-visible history of one session, kept up to date incrementally.

Every model request is rebuilt from the log (``derive_messages``). Deriving
is a per-event mapping over an append-only list, so the result for the first
*n* events never changes: this keeps it and derives only the events appended
since the last request, which keeps a long conversation's per-turn cost flat.
"""

from __future__ import annotations

from tether.content import Message
from tether.session import derive_messages
from tether.session.log import Session


class History:
    """``derive_messages(session)``, computed incrementally."""

    __slots__ = ("_messages", "_seen", "_session")

    def __init__(self, session: Session) -> None:
        self._session = session
        self._messages: list[Message] = []
        self._seen = 0

    def messages(self) -> tuple[Message, ...]:
        """The conversation the model sees now, equal to ``derive_messages(session)``."""
        events = self._session.events
        if len(events) > self._seen:
            end = len(events)
            self._messages.extend(derive_messages(events[self._seen : end]))
            self._seen = end
        return tuple(self._messages)
