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
from typing import TYPE_CHECKING

from tether.acp.updates import SessionUpdate, UpdateMapper
from tether.session.attempts import shown as without_abandoned
from tether.tools.registry import Shown

if TYPE_CHECKING:
    from tether.acp.usage import UsageMeter
    from tether.session import SessionEvents


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
    mapper = UpdateMapper(live=False, meter=meter, cwd=cwd, shown=shown, compaction=compaction)
    for event in without_abandoned(events, stop):
        yield from mapper.updates(event)
