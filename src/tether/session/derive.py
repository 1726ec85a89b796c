"""The model-visible conversation, rebuilt from a session log alone."""

from __future__ import annotations

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

__all__ = ["DERIVED_TYPES", "derive_messages", "derive_with_seqs", "summary_message"]

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
    events = of_types(source.events if isinstance(source, Session) else source, DERIVED_TYPES)
    messages: list[Message] = []
    origins: list[int] = []
    for event in events:
        # By name first: most events are not visible, and a loaded chunk's
        # payload is built only when read.
        visible = _VISIBLE.get(event.type)
        if visible is None:
            if event.type == _CLEARED:
                messages.clear()
                origins.clear()
            continue
        payload = event.payload
        if payload is None:
            payload = visible.from_data(event.data)
        if isinstance(payload, ContextCompacted):
            _compact(messages, origins, payload, event.seq)
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
    return messages, origins


def _compact(
    messages: list[Message], origins: list[int], compacted: ContextCompacted, seq: int
) -> None:
    """Put ``compacted``'s summary in place of the messages its range covers."""
    # A range can only name events before the compaction itself.
    last = min(compacted.last_seq, seq - 1)
    start = bisect_left(origins, compacted.first_seq)
    end = bisect_left(origins, last + 1)
    messages[start:end] = [summary_message(compacted)]
    origins[start:end] = [compacted.first_seq]
