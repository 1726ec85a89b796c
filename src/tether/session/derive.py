"""The model-visible conversation, rebuilt from a session log alone."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable

from tether.content import AssistantMessage, Message, TextBlock, ToolMessage, UserRoleMessage
from tether.session.compaction import ContextCompacted
from tether.session.environment import EnvironmentNoted, environment_message
from tether.session.events import Event, of_types
from tether.session.log import Session
from tether.session.settings import HistoryCleared
from tether.session.vocabulary import (
    AssistantMessageEvent,
    EventPayload,
    ToolResultEvent,
    UserMessageEvent,
)

__all__ = [
    "DERIVED_TYPES",
    "Conversation",
    "derive_messages",
    "derive_with_seqs",
    "summary_message",
]

_CLEARED = HistoryCleared.type

_VISIBLE: dict[str, type[EventPayload]] = {
    cls.type: cls
    for cls in (
        UserMessageEvent,
        AssistantMessageEvent,
        ToolResultEvent,
        ContextCompacted,
        EnvironmentNoted,
    )
}

DERIVED_TYPES = frozenset((*_VISIBLE, _CLEARED))
"""The types a conversation is derived from: the others change nothing in it."""

SUMMARY_PREFIX = (
    "The earlier part of this conversation was compacted to fit the context window. "
    "A summary of it follows; the most recent messages come after it unchanged.\n\n"
)


def summary_message(compacted: ContextCompacted) -> UserRoleMessage:
    """The message that stands in the conversation for the range ``compacted`` summarizes."""
    return UserRoleMessage((TextBlock(SUMMARY_PREFIX + compacted.summary),))


def derive_messages(source: Session | Iterable[Event]) -> list[Message]:
    """Return the conversation the model sees, in log order.

    Model-visible means logged: this reads nothing but the events.

    - ``user/message`` becomes a `UserRoleMessage`, and so does
      ``context/environment`` (its text).
    - ``assistant/message`` becomes an `AssistantMessage`; an interrupted one is
      kept, with ``interrupted=True`` and the content that had streamed.
    - ``tool/result`` becomes a `ToolMessage`, with the images it carries.
    - ``context/compacted`` replaces the messages of the events it summarizes
      (``first_seq`` … ``last_seq``, among those given) with one user message
      holding its summary (`summary_message`), where the first of them was. A
      summary inside that range (an earlier compaction) is replaced with the
      rest: the newer summary was made from it. Events between the range and
      the compaction stay as they are.
    - ``history/cleared`` drops everything before it: the model sees only
      what follows the last clear.

    Everything else is not model-visible and is skipped: turn and step
    markers, ``assistant/chunk`` (the assistant message carries the complete
    content), ``tool/call`` markers, inbox splices (a pending message becomes
    visible when it is logged as ``user/message``) and plugin events. The system
    prompt is not part of the log; callers put it in front.

    Events without a payload (built directly rather than appended or decoded)
    are decoded from their data.

    Raises:
        EventFormatError: such an event's data does not fit its type.
    """
    return derive_with_seqs(source)[0]


def derive_with_seqs(source: Session | Iterable[Event]) -> tuple[list[Message], list[int]]:
    """`derive_messages`, and beside it the seq each message stands at: its
    event's, or for a summary the first seq of the range it replaces."""
    conversation = Conversation()
    conversation.advance(source.events if isinstance(source, Session) else source)
    return conversation.messages, conversation.origins.tolist()


class Conversation:
    """`derive_with_seqs`, folded over the events a log gains, in log order.

    ``messages`` is what `derive_messages` returns for the events folded so
    far, and ``origins`` the seq each message stands at. Folding more events
    changes only what they change: a message that stays is the same object,
    so a compaction or a clear costs what it removes, not a new conversation.
    """

    __slots__ = ("messages", "origins")

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.origins = array("q")

    def advance(self, events: Iterable[Event]) -> int:
        """Fold ``events`` (those after the ones folded so far, in order); return
        the index from which ``messages`` changed (their length before when
        the events only added messages).

        Raises:
            EventFormatError: an event without a payload has data that does
                not fit its type.
        """
        messages, origins = self.messages, self.origins
        changed = len(messages)
        for event in of_types(events, DERIVED_TYPES):
            # By name first: most events are not visible, and a loaded chunk's
            # payload is built only when read.
            visible = _VISIBLE.get(event.type)
            if visible is None:
                if event.type == _CLEARED:
                    messages.clear()
                    del origins[:]
                    changed = 0
                continue
            payload = event.payload
            if payload is None:
                payload = visible.from_data(event.data)
            if isinstance(payload, ContextCompacted):
                changed = min(changed, _compact(messages, origins, payload, event.seq))
                continue
            if isinstance(payload, UserMessageEvent):
                messages.append(UserRoleMessage(payload.content))
            elif isinstance(payload, EnvironmentNoted):
                messages.append(environment_message(payload))
            elif isinstance(payload, AssistantMessageEvent):
                messages.append(AssistantMessage(payload.content, payload.interrupted))
            elif isinstance(payload, ToolResultEvent):
                messages.append(
                    ToolMessage(
                        payload.id, payload.name, payload.content, payload.is_error, payload.images
                    )
                )
            origins.append(event.seq)
        return changed


def _compact(
    messages: list[Message], origins: array[int], compacted: ContextCompacted, seq: int
) -> int:
    """Put ``compacted``'s summary in place of the messages its range covers;
    return the summary's index."""
    # A range can only name events before the compaction itself.
    last = min(compacted.last_seq, seq - 1)
    start = bisect_left(origins, compacted.first_seq)
    end = bisect_left(origins, last + 1)
    messages[start:end] = [summary_message(compacted)]
    origins[start:end] = array("q", (compacted.first_seq,))
    return start
