"""``session/list`` pages: newest first, cursors that survive new activity, bad cursors refused."""

from __future__ import annotations

import pytest

from tether.acp.lifecycle import BadCursorError, page_of
from tether.persist.backends.base import SessionSummary


def summary(session_id: str, last_activity: float) -> SessionSummary:
    return SessionSummary(
        id=session_id,
        created_at=0.0,
        cwd="/",
        turn_count=1,
        last_activity=last_activity,
        title=None,
    )


def test_pages_go_newest_first_and_new_activity_neither_repeats_nor_skips_older_ones() -> None:
    stored = [summary(f"s{i}", float(i)) for i in range(7)]
    first, cursor = page_of(stored, None, size=3)
    assert [s.id for s in first] == ["s6", "s5", "s4"]
    # Meanwhile s1 has new activity and a session is created: both sort first now.
    stored = [summary("s1", 10.0), summary("new", 11.0), *(s for s in stored if s.id != "s1")]
    second, cursor = page_of(stored, cursor, size=3)
    assert [s.id for s in second] == ["s3", "s2", "s0"]
    assert cursor is None


@pytest.mark.parametrize("cursor", ["not-a-cursor", "W10=", "WzEsIDJd", ""])
def test_a_cursor_page_of_did_not_write_is_refused(cursor: str) -> None:
    with pytest.raises(BadCursorError, match="not one session/list returned"):
        page_of([summary("s", 1.0)], cursor)
