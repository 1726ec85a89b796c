"""The model-visible history of one session, kept up to date incrementally.

Every model request is rebuilt from the log (``derive_messages``). Deriving
is a per-event mapping over an append-only list, so the result for the first
*n* events never changes — until a ``history/cleared``, which drops what came
before it. This keeps the result and derives only the events appended since
the last request, which keeps a long conversation's per-turn cost flat.

The same pass folds the session's settings (:class:`SessionSettings`): the
model a ``session/config`` chose is the model of the next request.
"""

from __future__ import annotations

from tether.content import Message
from tether.session import derive_messages
from tether.session.log import Session
from tether.session.settings import MODEL_OPTION, SessionSettings


class History:
    """``derive_messages(session)``, computed incrementally, and the session's settings."""

    __slots__ = ("_messages", "_seen", "_session", "_settings")

    def __init__(self, session: Session) -> None:
        self._session = session
        self._messages: list[Message] = []
        self._seen = 0
        self._settings = SessionSettings()

    def messages(self) -> tuple[Message, ...]:
        """The conversation the model sees now, equal to ``derive_messages(session)``."""
        self._advance()
        return tuple(self._messages)

    def model(self, default: str) -> str:
        """The model the session's log chose last (``session/config model``), else ``default``."""
        self._advance()
        return self._settings.options.get(MODEL_OPTION, default)

    def _advance(self) -> None:
        events = self._session.events
        if len(events) <= self._seen:
            return
        end = len(events)
        new = events[self._seen : end]
        cleared = self._settings.cleared_at
        for event in new:
            self._settings.advance(event)
        derived = derive_messages(new)
        if self._settings.cleared_at != cleared:
            # derive_messages dropped what preceded the clear in ``new``; the rest goes too.
            self._messages = derived
        else:
            self._messages.extend(derived)
        self._seen = end
