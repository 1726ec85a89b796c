"""What the sessions page shows of each session beyond its summary: context, cost, prompts.

A stored session's summary (:class:`~tether.persist.backends.base.SessionSummary`)
holds its title, turns and last activity; the page also shows how full its
context is and what it cost (:class:`~tether.llm.metering.UsageMeter`, as the
chat's ``/cost`` and the ACP bridge's ``usage_update`` count them), and
searches its prompts. Those are folded from the log, so :class:`ListingIndex`
keeps them by session with the stamp they were folded at (turns, last
activity, events stored): a listing folds again only the sessions that
changed since, and reads of a session's log decode only the four event
types that count.

A listing has a time budget for that work (:data:`FOLD_BUDGET`): the
sessions it could not fold in time are listed without figures and folded by
the next listing, so a page over many sessions never waits on all their logs
at once (the first listing after a start folds as many as the budget allows).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import msgspec

from tether.content import TextBlock
from tether.llm.catalog import ModelCatalog
from tether.llm.metering import UsageMeter
from tether.session import AssistantMessageEvent, UserMessageEvent
from tether.session.compaction import ContextCompacted
from tether.session.registry import DEFAULT_REGISTRY
from tether.session.settings import ConfigChanged

if TYPE_CHECKING:
    from tether.session import Event
    from tether.session.stored import StoredEvent

FOLD_BUDGET = 0.1
"""Seconds one listing spends at most folding the logs of sessions that changed."""

READ_AT_ONCE = 16
"""Logs read at once by a listing's folds (each read is a hop to a worker thread)."""

PROMPTS_KEPT = 16 * 1024
"""Characters of a session's prompts kept for the search (its first ones)."""

COUNTED = frozenset(
    {
        AssistantMessageEvent.type,
        ConfigChanged.type,
        ContextCompacted.type,
        UserMessageEvent.type,
    }
)
"""The event types the figures are folded from."""


class Figures(msgspec.Struct, frozen=True):
    """A session's context, cost and prompts, as of its last fold.

    ``used`` is the tokens in context after the last answer with figures and
    ``window`` the context window of the model that gave it (``None`` when the
    settings do not give it); ``cost`` and ``currency`` are set when the
    current model's prices are; ``prompts`` is the text of its prompts, the
    first :data:`PROMPTS_KEPT` characters, folded to lower case for the search.
    """

    used: int | None = None
    window: int | None = None
    cost: float | None = None
    currency: str | None = None
    prompts: str = ""

    def to_json(self) -> dict[str, object]:
        """The row's fields the page shows (the prompts are only searched)."""
        return {
            "context": None if self.used is None else {"used": self.used, "window": self.window},
            "cost": self.cost,
            "currency": self.currency,
        }


Stamp = tuple[object, ...]
"""What identifies a version of a session's log: figures folded at it stay true."""


def fold(events: Iterable[Event], catalog: ModelCatalog, model: str) -> Figures:
    """The figures of a session that started on ``model``, folded from ``events``
    (those of :data:`COUNTED` types suffice)."""
    meter = UsageMeter(catalog, model)
    prompts: list[str] = []
    size = 0
    for event in events:
        if event.type == UserMessageEvent.type:
            payload = event.payload
            if size < PROMPTS_KEPT and isinstance(payload, UserMessageEvent):
                text = " ".join(b.text for b in payload.content if isinstance(b, TextBlock))
                prompts.append(text)
                size += len(text) + 1
            continue
        meter.advance(event)
    entry = catalog.get(meter.model)
    cost = meter.cost()
    return Figures(
        used=meter.used,
        window=None if entry is None else entry.context_window,
        cost=None if cost is None else cost[0],
        currency=None if cost is None else cost[1],
        prompts="\n".join(prompts)[:PROMPTS_KEPT].casefold(),
    )


def decode_counted(stored: Sequence[StoredEvent]) -> list[Event]:
    """The events of :data:`COUNTED` types among ``stored``, decoded (the others are not)."""
    return DEFAULT_REGISTRY.decode_stored([record for record in stored if record.type in COUNTED])


class ListingIndex:
    """Each listed session's :class:`Figures`, with the stamp they were folded at.

    It lives on the app's event loop; the caller lets one listing at a time
    :meth:`refresh` it.
    """

    def __init__(self) -> None:
        self._entries: dict[str, tuple[Stamp, Figures]] = {}

    def get(self, session_id: str, stamp: Stamp) -> Figures | None:
        """The figures folded at ``stamp``, or ``None`` when they are missing or stale."""
        entry = self._entries.get(session_id)
        if entry is None or entry[0] != stamp:
            return None
        return entry[1]

    def put(self, session_id: str, stamp: Stamp, figures: Figures) -> None:
        self._entries[session_id] = (stamp, figures)

    def keep_only(self, session_ids: Iterable[str]) -> None:
        """Forget the sessions not among ``session_ids`` (deleted since)."""
        kept = set(session_ids)
        for gone in [s for s in self._entries if s not in kept]:
            del self._entries[gone]

    async def refresh(
        self,
        stale: Sequence[tuple[str, Stamp]],
        read: Callable[[str], Awaitable[Figures | None]],
        *,
        budget: float = FOLD_BUDGET,
    ) -> int:
        """Fold the ``stale`` sessions with ``read`` (``None``: the session is gone or
        unreadable, left without figures), :data:`READ_AT_ONCE` at a time, until
        ``budget`` seconds have passed; return how many are left to fold."""
        deadline = time.monotonic() + budget
        for start in range(0, len(stale), READ_AT_ONCE):
            if time.monotonic() > deadline:
                return len(stale) - start
            chunk = stale[start : start + READ_AT_ONCE]
            folded = await asyncio.gather(*(read(session_id) for session_id, _ in chunk))
            for (session_id, stamp), figures in zip(chunk, folded, strict=True):
                if figures is not None:
                    self._entries[session_id] = (stamp, figures)
        return 0
