"""The model-visible history of one session, kept up to date incrementally.

Every model request is rebuilt from the log (``derive_messages``). Deriving
is a per-event mapping over an append-only list, so the result for the first
*n* events never changes — until a ``context/compacted`` event puts a
summary in place of a range: this keeps the result and derives only the
events appended since the last request, and derives the whole log again when
one of them is a compaction or a ``history/cleared`` (which drops what came
before it). That keeps a long conversation's per-turn cost flat.

The same pass folds the session's settings (:class:`SessionSettings`) and its
model (:class:`~tether.session.model.ModelTracker`, the rule of
:func:`~tether.session.model.session_model`): the model a ``session/config``
chose is the model of the next request.

A model that does not accept images is sent the tool results that hold
some (a ``read`` made while the session used another model) with a note in
their place (:meth:`History.without_tool_images`).

It also keeps the estimated size of the conversation (see
:mod:`tether.loop.context`), message by message, so that checking a request
against the model's context window is a sum, not a walk.
"""

from __future__ import annotations

from tether.content import Message, ToolMessage
from tether.loop.context import message_tokens, uncertain_tokens
from tether.session import ContextCompacted, derive_messages
from tether.session.derive import DERIVED_TYPES
from tether.session.log import Session
from tether.session.model import ModelChoice, ModelTracker, session_model
from tether.session.settings import SETTINGS_TYPES, SessionSettings

_COMPACTED = ContextCompacted.type
_FOLDED = DERIVED_TYPES | SETTINGS_TYPES


class History:
    """``derive_messages(session)``, computed incrementally, with its estimated size,
    and the session's settings."""

    __slots__ = (
        "_anchor",
        "_messages",
        "_model",
        "_seen",
        "_session",
        "_settings",
        "_sizes",
        "_tool_images",
        "_total",
        "_uncertain",
    )

    def __init__(self, session: Session, start: ModelChoice | None = None) -> None:
        """``start``: the model the session started on (default: what its header says)."""
        self._session = session
        self._model = ModelTracker(start or session_model(session, at=0))
        self._messages: list[Message] = []
        self._sizes: list[int] = []
        self._total = 0
        self._uncertain = 0
        self._seen = 0
        # (tokens the provider counted for a request, the estimate of what it sent)
        self._anchor: tuple[int, int] | None = None
        self._settings = SessionSettings()
        self._tool_images = 0

    def messages(self) -> tuple[Message, ...]:
        """The conversation the model sees now, equal to ``derive_messages(session)``."""
        self._advance()
        return tuple(self._messages)

    def model(self) -> str:
        """The model of the next request: the one the log chose last (``session/config
        model``), else the one the session started on."""
        self._advance()
        return self._model.current.model

    def _advance(self) -> None:
        events = self._session.events
        end = len(events)
        if end <= self._seen:
            return
        settings = self._settings
        cleared = settings.cleared_at
        # The new events of the types either fold reads: a log holds most events
        # packed, and only these are decoded.
        new = list(events.of_types(_FOLDED, self._seen, end))
        for event in new:
            settings.advance(event)
            self._model.advance(event)
        compacted = any(event.type == _COMPACTED for event in new)
        if settings.cleared_at != cleared or compacted:
            self._messages = derive_messages(events.of_types(DERIVED_TYPES, 0, end))
            self._sizes = [message_tokens(message) for message in self._messages]
            self._total = sum(self._sizes)
            self._uncertain = sum(map(uncertain_tokens, self._messages))
            self._anchor = None
            self._tool_images = _with_images(self._messages)
        else:
            added = derive_messages(new)
            sizes = [message_tokens(message) for message in added]
            self._messages.extend(added)
            self._sizes.extend(sizes)
            self._total += sum(sizes)
            self._uncertain += sum(map(uncertain_tokens, added))
            self._tool_images += _with_images(added)
        self._seen = end

    @property
    def has_tool_images(self) -> bool:
        """Whether a tool result of :meth:`messages` (as of its last call) holds images."""
        return self._tool_images > 0

    def without_tool_images(self, messages: tuple[Message, ...], model: str) -> tuple[Message, ...]:
        """``messages`` (as :meth:`messages` returned them) for a model that does not
        accept images: each tool result's images replaced by a line saying one was
        there. The log keeps them; a later model that accepts images sees them."""
        if not self._tool_images:
            return messages
        return tuple(
            _imageless(message, model)
            if type(message) is ToolMessage and message.images
            else message
            for message in messages
        )

    def tokens(self, overhead: int = 0) -> int:
        """The estimated tokens of a request of :meth:`messages` (as of its last call).

        ``overhead`` is the estimate of the rest of the request (the system
        prompt and the tools). When the provider reported how many input
        tokens an earlier request took (:meth:`note_usage`) and that is more,
        its count is used for what that request sent, plus the estimate of
        the messages that came after.
        """
        estimate = self._total + overhead
        if self._anchor is None:
            return estimate
        counted, estimated = self._anchor
        return max(estimate, counted + self._total - estimated)

    def uncertain_tokens(self) -> int:
        """The part of :meth:`tokens` (as of the last :meth:`messages`) that a provider
        may count very differently or not at all: reasoning (dropped from earlier
        turns by some) and images (estimated flat)."""
        return self._uncertain

    def note_usage(self, input_tokens: int) -> None:
        """Record that the request of :meth:`messages` (as last returned) took ``input_tokens``.

        The count includes the system prompt and the tools; it is kept until
        the history is next compacted.
        """
        self._anchor = (input_tokens, self._total)

    def sizes(self) -> tuple[int, ...]:
        """The estimated tokens of each message of :meth:`messages`."""
        return tuple(self._sizes)


def _with_images(messages: list[Message]) -> int:
    """How many of ``messages`` are tool results with images."""
    return sum(1 for m in messages if type(m) is ToolMessage and m.images)


def _imageless(message: ToolMessage, model: str) -> ToolMessage:
    count = len(message.images)
    noun = "an image" if count == 1 else f"{count} images"
    note = f"[the result held {noun}, left out: the model in use ({model}) does not accept images]"
    content = f"{message.content}\n{note}" if message.content else note
    return ToolMessage(message.call_id, message.name, content, message.is_error)
