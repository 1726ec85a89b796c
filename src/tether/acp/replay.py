"""``session/load``: a stored conversation, replayed as ``session/update`` payloads.

The replay is the same mapping as the live stream (:mod:`tether.acp.updates`)
run over the whole log, with the user's own messages included: user
messages, agent messages and thoughts chunk by chunk as they streamed, and
every tool call followed by its final status and output. Chunks of model
request attempts that were abandoned and retried are left out
(:mod:`tether.session.attempts`), so the replay shows the text the model's
answer holds. With a :class:`~tether.acp.usage.UsageMeter`, each answer that
reported usage is followed by its ``usage_update``, as it was live.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tether.acp.updates import SessionUpdate, UpdateMapper
from tether.session.attempts import shown as without_abandoned
from tether.tools.registry import Shown

if TYPE_CHECKING:
    from tether.acp.usage import UsageMeter
    from tether.session import SessionEvents


@dataclass(frozen=True, slots=True)
class Shows:
    """What the client takes, for a replay (see :class:`UpdateMapper`)."""

    compaction: bool = False
    cancelled_calls: bool = False


def replay(
    events: SessionEvents,
    meter: UsageMeter | None = None,
    cwd: str | None = None,
    *,
    stop: int | None = None,
    shown: Shown | None = None,
    compaction: bool = False,
) -> Iterator[SessionUpdate]:
    """The updates that show ``events`` (a session log, from its start, up to
    seq ``stop``; default: its end) to a client, in order.

    The log is decoded as the updates are taken, a run of events at a time:
    a consumer that sends each update before taking the next holds only one
    run decoded. ``cwd`` is the session's, against which relative paths of
    locations resolve; ``shown`` is how the session's tools are shown;
    ``compaction``: the client takes ``compaction_update`` updates.
    """
    shows = Shows(compaction=compaction)
    for _, update in sequenced(events, meter, cwd, stop=stop, shown=shown, shows=shows):
        yield update


def sequenced(
    events: SessionEvents,
    meter: UsageMeter | None = None,
    cwd: str | None = None,
    *,
    stop: int | None = None,
    start: int = 0,
    shown: Shown | None = None,
    shows: Shows = Shows(),
) -> Iterator[tuple[int, SessionUpdate]]:
    """:func:`replay`'s updates from seq ``start`` on, each with the seq of the event
    it shows.

    The mapping runs over the whole log all the same (an update's ids, its
    usage figures, a message continued across ``start`` are what they were
    live); only the updates of events before ``start`` are left out, so a
    client that has everything before ``start`` gets exactly what it lacks.
    """
    mapper = UpdateMapper(
        live=False,
        meter=meter,
        cwd=cwd,
        shown=shown,
        compaction=shows.compaction,
        cancelled_calls=shows.cancelled_calls,
    )
    for event in without_abandoned(events, stop):
        updates = mapper.updates(event)
        if event.seq >= start:
            for update in updates:
                yield event.seq, update
