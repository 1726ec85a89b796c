"""The model-visible conversation, rebuilt from a session log alone."""

from __future__ import annotations

from collections.abc import Iterable

from tether.content import AssistantMessage, Message, ToolMessage, UserRoleMessage
from tether.session.events import Event
from tether.session.log import Session
from tether.session.settings import HistoryCleared
from tether.session.vocabulary import (
    AssistantMessageEvent,
    EventPayload,
    ToolResultEvent,
    UserMessageEvent,
)

__all__ = ["derive_messages"]

_VISIBLE: dict[str, type[EventPayload]] = {
    cls.type: cls for cls in (UserMessageEvent, AssistantMessageEvent, ToolResultEvent)
}


def derive_messages(source: Session | Iterable[Event]) -> list[Message]:
    """Return the conversation the model sees, in log order.

    Model-visible means logged: this reads nothing but the events.

    - ``user/message`` becomes a `UserRoleMessage`.
    - ``assistant/message`` becomes an `AssistantMessage`; an interrupted one is
      kept, with ``interrupted=True`` and the content that had streamed.
    - ``tool/result`` becomes a `ToolMessage`.
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
    events = source.events if isinstance(source, Session) else source
    messages: list[Message] = []
    for event in events:
        # By name first: most events are not visible, and a loaded chunk's
        # payload is built only when read.
        visible = _VISIBLE.get(event.type)
        if visible is None:
            if event.type == HistoryCleared.type:
                messages.clear()
            continue
        payload = event.payload
        if payload is None:
            payload = visible.from_data(event.data)
        if isinstance(payload, UserMessageEvent):
            messages.append(UserRoleMessage(payload.content))
        elif isinstance(payload, AssistantMessageEvent):
            messages.append(AssistantMessage(payload.content, payload.interrupted))
        elif isinstance(payload, ToolResultEvent):
            messages.append(
                ToolMessage(payload.id, payload.name, payload.content, payload.is_error)
            )
    return messages
