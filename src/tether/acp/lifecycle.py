"""``session/list`` pages and session titles.

**Paging.** Stored sessions are listed newest activity first (ties by id),
:data:`PAGE_SIZE` a page. ``nextCursor`` names the last session of a page
(its activity and id, encoded); the next page holds the sessions that sort
after it, so a session created or updated between two requests moves to the
front and is neither shown twice nor skipped among the older ones. A cursor
tether did not write is invalid params.

**Children.** A child agent's session (one a ``task`` call started,
:mod:`tether.plugins.tool_subagent`) is listed like any other, in the same
order, with its lineage in the entry's ``_meta``:
``{"tether": {"parent": "<parent session id>", "task": "<description>"}}``
(:func:`lineage_meta`); a client nests it under its parent from there. Only
child sessions carry ``_meta``.

**Titles.** A session's title is its first prompt's text, whitespace
collapsed and cut to 80 characters (the title ``session/list`` and
``tether sessions list`` show, :func:`tether.persist.backends.summary.title_of`).
It is sent as a ``session_info_update`` right after the first prompt is
logged, live and in a replay (:class:`~tether.acp.updates.UpdateMapper`).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from tether.acp.errors import BridgeError
from tether.session.lineage import Lineage

if TYPE_CHECKING:
    from tether.persist.backends.base import SessionSummary

__all__ = ["PAGE_SIZE", "BadCursorError", "Page", "iso_time", "lineage_meta", "page_of"]

PAGE_SIZE = 50
"""Sessions per ``session/list`` page."""


class BadCursorError(BridgeError):
    """A ``session/list`` cursor tether did not write."""


Page = tuple[list["SessionSummary"], str | None]
"""The sessions of one page, and the cursor of the next (``None`` after the last)."""


def _key(summary: SessionSummary) -> tuple[float, str]:
    return (-(summary.last_activity or 0.0), summary.id)


def _encode(key: tuple[float, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps([key[0], key[1]]).encode()).decode()


def _decode(cursor: str) -> tuple[float, str]:
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (binascii.Error, ValueError, UnicodeError):
        raise BadCursorError(f"cursor {cursor[:40]!r} is not one session/list returned") from None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not isinstance(value[0], int | float)
        or isinstance(value[0], bool)
        or not isinstance(value[1], str)
    ):
        raise BadCursorError(f"cursor {cursor[:40]!r} is not one session/list returned")
    return float(value[0]), value[1]


def page_of(summaries: Sequence[SessionSummary], cursor: str | None, size: int = PAGE_SIZE) -> Page:
    """The page of ``summaries`` after ``cursor`` (from the start when ``None``).

    Raises:
        BadCursorError: ``cursor`` was not written by this function.
    """
    ordered = sorted(summaries, key=_key)
    if cursor is not None:
        after = _decode(cursor)
        ordered = [summary for summary in ordered if _key(summary) > after]
    shown = ordered[:size]
    more = len(ordered) > size
    return shown, _encode(_key(shown[-1])) if more and shown else None


def iso_time(timestamp: float) -> str:
    """``timestamp`` (seconds since the epoch) as ISO 8601, in UTC."""
    return datetime.fromtimestamp(timestamp, UTC).isoformat()


def lineage_meta(lineage: Lineage | None) -> dict[str, object] | None:
    """The ``_meta`` of a ``session/list`` entry of a session with ``lineage``: a
    child session's parent and task, or ``None`` for a session nobody delegated to."""
    if lineage is None or lineage.delegation is None:
        return None
    shown: dict[str, object] = {"parent": lineage.parent}
    if lineage.delegation.task:
        shown["task"] = lineage.delegation.task
    return {"tether": shown}
