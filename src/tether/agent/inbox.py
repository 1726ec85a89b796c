"""The inbox: two FIFOs of input waiting for an agent's driver.

``queued`` holds prompts for future turns (one per turn); ``steering`` holds
input for the next step boundary of the running turn. **Every change is
appended to the session first** (``agent/inbox/spliced``), so resuming a
session rebuilds the inbox exactly (:func:`tether.session.replay_inbox`).

Live notifications (``emit``; each receives ``(agent, messages, queue)``):
``agent/inbox/inserted``, ``agent/inbox/claimed``, ``agent/inbox/discarded``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from tether.agent.events import INBOX_CLAIMED, INBOX_DISCARDED, INBOX_INSERTED, InboxNotice
from tether.agent.types import Target, UserMessage
from tether.session import InboxOp, InboxSpliced, UserMessageEvent, replay_inbox
from tether.session.log import Session

Notify = Callable[[InboxNotice, tuple[UserMessage, ...], Target], None]


def to_event(message: UserMessage) -> UserMessageEvent:
    return UserMessageEvent(id=message.id, source=message.source, content=message.content)


def from_event(event: UserMessageEvent) -> UserMessage:
    return UserMessage(content=event.content, source=event.source, id=event.id)


class Inbox:
    """The FIFOs of one agent; mutate only through these methods."""

    def __init__(self, session: Session, notify: Notify) -> None:
        self._session = session
        self._notify = notify
        state = replay_inbox(session.events)
        self._fifos: dict[Target, deque[UserMessage]] = {
            Target.QUEUED: deque(from_event(m) for m in state.queued),
            Target.STEERING: deque(from_event(m) for m in state.steering),
        }

    def pending(self, target: Target) -> tuple[UserMessage, ...]:
        return tuple(self._fifos[target])

    def __bool__(self) -> bool:
        return any(self._fifos.values())

    def has(self, target: Target) -> bool:
        return bool(self._fifos[target])

    def insert(self, message: UserMessage, target: Target) -> None:
        """Append ``message`` to ``target`` (logged first)."""
        self._session.append(
            InboxSpliced(queue=target.value, op="insert", messages=(to_event(message),))
        )
        self._fifos[target].append(message)
        self._notify(INBOX_INSERTED, (message,), target)

    def claim_turn(self) -> tuple[UserMessage, ...]:
        """Take the input of a new turn: one queued prompt, then all pending steering."""
        queued = self._take(Target.QUEUED, 1, "claim")
        return queued + self._take(Target.STEERING, None, "claim")

    def claim_steering(self) -> tuple[UserMessage, ...]:
        """Take all pending steering (at a step boundary)."""
        return self._take(Target.STEERING, None, "claim")

    def cancel_all(self) -> tuple[UserMessage, ...]:
        """Clear both FIFOs as cancelled (logged first); return what was dropped."""
        return self._take(Target.QUEUED, None, "cancel") + self._take(
            Target.STEERING, None, "cancel"
        )

    def _take(self, target: Target, limit: int | None, op: InboxOp) -> tuple[UserMessage, ...]:
        fifo = self._fifos[target]
        count = len(fifo) if limit is None else min(limit, len(fifo))
        if count == 0:
            return ()
        taken = tuple(list(fifo)[:count])
        self._session.append(
            InboxSpliced(queue=target.value, op=op, ids=tuple(m.id for m in taken))
        )
        for _ in range(count):
            fifo.popleft()
        event = INBOX_CLAIMED if op == "claim" else INBOX_DISCARDED
        self._notify(event, taken, target)
        return taken
