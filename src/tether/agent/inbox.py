"""The inbox: two FIFOs of input waiting for an agent's driver.

``queued`` holds prompts for future turns (one per turn); ``steering`` holds
input for the next step boundary of the running turn. **Every change is
appended to the session first** (``agent/inbox/spliced``), so resuming a
session rebuilds the inbox exactly (:func:`tether.session.replay_inbox`).

A message inserted ``held`` (a submission waiting for its insert to be on
disk) is in its FIFO but not claimable: a claim takes messages from the head
and stops at the first held one, so what follows it waits and the order is
kept. :meth:`Inbox.release` makes it claimable; :meth:`Inbox.withdraw`
removes it (a ``discard`` splice). A cancel clears held messages too.

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
        self._held: dict[str, Target] = {}
        """Messages inserted but not claimable yet (their insert is not durable), by id."""

    def pending(self, target: Target) -> tuple[UserMessage, ...]:
        return tuple(self._fifos[target])

    def __bool__(self) -> bool:
        """Whether anything is pending, claimable or held."""
        return any(self._fifos.values())

    @property
    def holding(self) -> bool:
        """Whether a held message (one waiting to be durable) is pending."""
        return bool(self._held)

    def holds_head(self, target: Target) -> bool:
        """Whether the head of ``target`` is a held message (its verdict is pending)."""
        fifo = self._fifos[target]
        return bool(fifo) and fifo[0].id in self._held

    def has(self, target: Target) -> bool:
        """Whether a claim of ``target`` would take something (its head is not held)."""
        fifo = self._fifos[target]
        return bool(fifo) and fifo[0].id not in self._held

    def insert(self, message: UserMessage, target: Target, *, held: bool = False) -> None:
        """Append ``message`` to ``target`` (logged first); ``held``: not claimable
        until :meth:`release`."""
        self._session.append(
            InboxSpliced(queue=target.value, op="insert", messages=(to_event(message),))
        )
        self._fifos[target].append(message)
        if held:
            self._held[message.id] = target
        self._notify(INBOX_INSERTED, (message,), target)

    def release(self, message_id: str) -> bool:
        """Make the held message ``message_id`` claimable; whether it is still pending
        (a cancel may have cleared it)."""
        return self._held.pop(message_id, None) is not None

    def withdraw(self, message_id: str) -> bool:
        """Remove the held message ``message_id`` from its FIFO, logged first as a
        ``discard`` splice (so a resume agrees); whether it was still pending."""
        target = self._held.get(message_id)
        if target is None:
            return False
        fifo = self._fifos[target]
        message = next(m for m in fifo if m.id == message_id)
        self._session.append(InboxSpliced(queue=target.value, op="discard", ids=(message_id,)))
        del self._held[message_id]
        fifo.remove(message)
        self._notify(INBOX_DISCARDED, (message,), target)
        return True

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
        """Remove up to ``limit`` messages from the head of ``target``, logged first as
        ``op``. A claim stops at the first held message; a cancel takes held ones too."""
        fifo = self._fifos[target]
        taken: list[UserMessage] = []
        for message in fifo:
            if (limit is not None and len(taken) == limit) or (
                op == "claim" and message.id in self._held
            ):
                break
            taken.append(message)
        if not taken:
            return ()
        self._session.append(
            InboxSpliced(queue=target.value, op=op, ids=tuple(m.id for m in taken))
        )
        for message in taken:
            fifo.popleft()
            self._held.pop(message.id, None)
        event = INBOX_CLAIMED if op == "claim" else INBOX_DISCARDED
        self._notify(event, tuple(taken), target)
        return tuple(taken)
