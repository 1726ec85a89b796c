"""What a session listing shows about each session, folded from its events."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import cast

import msgspec

from tether.persist.backends.records import EventRecord
from tether.session.stored import StoredEvent

TITLE_LIMIT = 80
"""The longest title, in characters, ellipsis included."""


def title_of(data: Mapping[str, object]) -> str | None:
    """The title a ``user/message`` event gives its session, or ``None`` if it has no text.

    The text blocks of ``data["content"]`` are joined with runs of whitespace
    collapsed to one space, and cut to :data:`TITLE_LIMIT` characters with an
    ellipsis.
    """
    content = data.get("content")
    if not isinstance(content, list):
        return None
    parts = [
        block["text"]
        for block in content
        if isinstance(block, Mapping)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    ]
    return title_from(parts)


def title_from(parts: Iterable[str]) -> str | None:
    """The title made of the text ``parts`` of a first prompt (as :func:`title_of`)."""
    text = " ".join(" ".join(parts).split())
    if not text:
        return None
    if len(text) > TITLE_LIMIT:
        text = text[: TITLE_LIMIT - 1].rstrip() + "…"
    return text


def _plain(data: Mapping[str, object] | msgspec.Raw) -> Mapping[str, object]:
    """A written record's data, decoded if it came encoded."""
    if isinstance(data, msgspec.Raw):
        return cast(Mapping[str, object], msgspec.json.decode(data))
    return data


class Activity(msgspec.Struct, frozen=True):
    """How far a session has got: its turns, its latest event and its title.

    ``title`` comes from the first ``user/message`` that has text, or from the
    last ``session/title`` when there is one;
    ``last_activity`` is ``None`` until the session has an event.
    """

    turn_count: int = 0
    last_activity: float | None = None
    title: str | None = None

    def extend(self, events: Iterable[StoredEvent]) -> Activity:
        """Return the activity after stored ``events``, which follow those already counted."""
        return self._fold((e.type, e.time, e.data_object) for e in events)

    def extend_written(self, events: Sequence[EventRecord]) -> Activity:
        """`extend` for records about to be written."""
        if not events:
            return self
        # A batch is written as one transaction: counted without a call per event.
        turns = self.turn_count + [e["type"] for e in events].count("turn/start")
        title = self.title
        for event in events:
            if title is not None:
                break
            if event["type"] == "user/message":
                title = title_of(_plain(event["data"]))
        return Activity(turns, events[-1]["time"], title)

    def _fold(
        self, events: Iterable[tuple[str, float, Callable[[], Mapping[str, object]]]]
    ) -> Activity:
        turns, last, title = self.turn_count, self.last_activity, self.title
        for kind, time, data in events:
            if kind == "turn/start":
                turns += 1
            elif kind == "user/message" and title is None:
                title = title_of(data())
            elif kind == "session/title":
                # A title written for the session replaces the first prompt's.
                named = data().get("title")
                if isinstance(named, str) and named:
                    title = named
            last = time
        return Activity(turns, last, title)
