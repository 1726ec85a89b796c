"""Rebuilding an agent's inbox from the splices in its session log."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from tether.session.errors import SessionInvariantError
from tether.session.events import Event, of_types
from tether.session.vocabulary import InboxSpliced, UserMessageEvent

__all__ = ["InboxState", "replay_inbox"]


_SPLICED = frozenset((InboxSpliced.type,))


class InboxState(NamedTuple):
    """The messages pending in each FIFO, oldest first."""

    queued: tuple[UserMessageEvent, ...]
    steering: tuple[UserMessageEvent, ...]


def replay_inbox(events: Iterable[Event]) -> InboxState:
    """Replay the ``agent/inbox/spliced`` events of a log, in order.

    ``insert`` appends its messages to the tail of its FIFO; ``claim``,
    ``cancel`` and ``discard`` remove the named messages. Other events are
    ignored. The result is the inbox as it was after the last splice.

    Raises:
        SessionInvariantError: a splice inserts a message id that is already
            pending (in either FIFO) or removes one that is not pending in its
            FIFO; ``seq`` names the splice.
        EventFormatError: a splice without a payload has malformed data.
    """
    fifos: dict[str, dict[str, UserMessageEvent]] = {"queued": {}, "steering": {}}
    for event in of_types(events, _SPLICED):
        if event.type != InboxSpliced.type:
            continue
        splice = event.payload
        if not isinstance(splice, InboxSpliced):
            splice = InboxSpliced.from_data(event.data)
        fifo = fifos[splice.queue]
        if splice.op == "insert":
            for message in splice.messages:
                if any(message.id in pending for pending in fifos.values()):
                    raise SessionInvariantError(
                        f"inbox insert of {message.id!r}: that id is already pending",
                        seq=event.seq,
                    )
                fifo[message.id] = message
        else:
            for message_id in splice.ids:
                if fifo.pop(message_id, None) is None:
                    raise SessionInvariantError(
                        f"inbox {splice.op} of {message_id!r}: not pending in {splice.queue}",
                        seq=event.seq,
                    )
    return InboxState(tuple(fifos["queued"].values()), tuple(fifos["steering"].values()))
