"""A preview a tool can make is one the session log can keep."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.acp.updates import stored_preview
from tether.tools.preview import Diff, Location, ToolPreview

lines = st.none() | st.integers(min_value=-3, max_value=10**6) | st.booleans()
paths = st.text(max_size=8)


@given(path=paths, line=lines, diff_path=paths)
def test_a_preview_that_can_be_made_can_be_logged(path: str, line: object, diff_path: str) -> None:
    try:
        preview = ToolPreview(
            kind="edit",
            title="edit",
            locations=(Location(path, line),),  # line may be of any type here
            diffs=(Diff(diff_path, None, "new\n"),),
        )
    except ValueError:
        return
    stored = stored_preview("call-1", preview)
    assert stored.locations[0].line == line
    assert stored.diffs[0].path == diff_path


@pytest.mark.parametrize(
    ("path", "line", "message"),
    [
        ("/a.txt", 0, "a location's line must be an int >= 1, got 0"),
        ("/a.txt", True, "a location's line must be an int >= 1, got True"),
        ("", 3, "a location needs a non-empty path, got ''"),
    ],
)
def test_a_location_the_log_would_refuse_is_refused_when_made(
    path: str, line: int, message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        Location(path, line)
    assert str(raised.value) == message


def test_a_diff_without_a_path_is_refused_when_made() -> None:
    with pytest.raises(ValueError, match="a diff needs a non-empty path"):
        Diff("", "old", "new")
