"""``session/load``: a stored conversation, replayed as ``session/update`` payloads.

The replay is the same mapping as the live stream (:mod:`tether.acp.updates`)
run over the whole log, with the user's own messages included: user
messages, agent messages and thoughts chunk by chunk as they streamed, and
every tool call followed by its final status and output.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from tether.acp.updates import SessionUpdate, UpdateMapper
from tether.session import Event


def replay(events: Iterable[Event]) -> Iterator[SessionUpdate]:
    """The updates that show ``events`` (a session log, from its start) to a client."""
    mapper = UpdateMapper(live=False)
    for event in events:
        yield from mapper.updates(event)
