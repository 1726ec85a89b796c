"""The model-visible history of one session, kept up to date incrementally.

Every model request is rebuilt from the log (``derive_messages``). Deriving
is a fold over an append-only list (:class:`~tether.session.derive.Conversation`):
this keeps its result and folds only the events appended since the last
request. A ``context/compacted`` event puts a summary in place of a range of
the messages kept and a ``history/cleared`` drops them all; the messages that
stay are the same objects. That keeps a long conversation's per-turn cost
flat, and a compaction costs what it removes: the conversation is never
derived again from the start, so the memory of the messages it keeps is never
held twice (see "What a session holds in memory" in ``docs/sessions.md``).

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
from tether.session.compaction import ContextCompacted
from tether.session.derive import DERIVED_TYPES, Conversation
from tether.session.log import Session
from tether.session.model import ModelChoice, ModelTracker, session_model
from tether.session.settings import SETTINGS_TYPES, HistoryCleared, SessionSettings

_FOLDED = DERIVED_TYPES | SETTINGS_TYPES
_RESETS = frozenset((ContextCompacted.type, HistoryCleared.type))


class History:
    """``derive_messages(session)``, computed incrementally, with its estimated size,
    and the session's settings."""

    __slots__ = (
        "_anchor",
        "_conversation",
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
        self._conversation = Conversation()
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
        return tuple(self._conversation.messages)

    def conversation(self) -> Conversation:
        """The conversation as derived up to the session's last event, read-only:
        :meth:`messages` with the seq each message stands at."""
        self._advance()
        return self._conversation

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
        # The new events of the types either fold reads: a log holds most events
        # packed, and only these are decoded.
        new = list(events.of_types(_FOLDED, self._seen, end))
        for event in new:
            settings.advance(event)
            self._model.advance(event)
        self._seen = end
        messages, sizes = self._conversation.messages, self._sizes
        kept = len(sizes)
        changed = self._conversation.advance(new)
        added = messages[changed:]
        if any(event.type in _RESETS for event in new):
            # What the provider counted no longer applies.
            self._anchor = None
        if changed < kept:
            self._total -= sum(sizes[changed:])
            self._uncertain = sum(map(uncertain_tokens, messages[:changed]))
            self._tool_images = _with_images(messages[:changed])
        del sizes[changed:]
        sizes += map(message_tokens, added)
        self._total += sum(sizes[changed:])
        self._uncertain += sum(map(uncertain_tokens, added))
        self._tool_images += _with_images(added)

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
