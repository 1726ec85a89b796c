"""Attempts of one model request: what a client is shown, live and replayed.

When a request fails mid-stream and is retried, the loop appends
``llm/retry`` (:class:`~tether.session.vocabulary.RetryEvent`) at the attempt
boundary. The ``assistant/chunk`` events of the step streamed before it —
back to the step's start or the previous ``llm/retry`` — belong to an
**abandoned attempt**: the model's answer (``assistant/message``) is the
last attempt's alone.

So that what a client saw equals what was stored, a live client is shown a
notice at the boundary (:func:`retry_notice`), and a replay of the log
(:func:`shown`) leaves the abandoned chunks out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from tether.session.events import Event
from tether.session.vocabulary import AssistantChunk, RetryEvent, StepStart

if TYPE_CHECKING:
    from tether.session.log import SessionEvents

RETRY_TYPE = RetryEvent.type
_ATTEMPT_TYPES = frozenset({AssistantChunk.type, RETRY_TYPE, StepStart.type})


def retry_notice(data: Mapping[str, object]) -> str:
    """The line that tells a live client a request is retried (``data`` of ``llm/retry``)."""
    attempt = data.get("attempt")
    following = f"{attempt + 1}" if isinstance(attempt, int) else "?"
    allowed = data.get("max_attempts")
    if isinstance(allowed, int):
        following += f"/{allowed}"
    reason = data.get("error") or data.get("code") or "model error"
    return f"[retrying: {reason}, attempt {following}]"


def abandoned_chunks(events: Iterable[Event]) -> frozenset[int]:
    """The seqs of the chunks that belong to abandoned attempts."""
    abandoned: set[int] = set()
    attempt: list[int] = []
    for event in events:
        kind = event.type
        if kind == AssistantChunk.type:
            attempt.append(event.seq)
        elif kind == RETRY_TYPE:
            abandoned.update(attempt)
            attempt.clear()
        elif kind == StepStart.type:
            attempt.clear()
    return frozenset(abandoned)


def shown(events: SessionEvents, stop: int | None = None) -> Iterator[Event]:
    """The events of a log up to seq ``stop`` (exclusive; default: its end),
    without the chunks of abandoned attempts, in order.

    The events are decoded as they are taken, a run at a time (`SessionEvents.between`),
    never the whole log at once; finding the abandoned chunks decodes only the
    events that mark attempts, and none when the log holds no retry.
    """
    abandoned: frozenset[int] = frozenset()
    if next(events.of_types(frozenset({RETRY_TYPE}), 0, stop), None) is not None:
        abandoned = abandoned_chunks(events.of_types(_ATTEMPT_TYPES, 0, stop))
    for event in events.between(0, stop):
        if event.seq not in abandoned:
            yield event
