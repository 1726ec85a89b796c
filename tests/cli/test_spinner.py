"""The spinner on a terminal stream: a status of one or several lines, drawn in place."""

from __future__ import annotations

import io

import pytest

from tether.cli import spinner as spinning
from tether.cli.spinner import FRAMES, INTERVAL, Spinner


async def test_a_status_of_several_lines_is_erased_whole_before_the_next() -> None:
    out = io.StringIO()
    status = Spinner(out)
    status("bash make · 1 s\n  │ one\n  │ two")
    status("bash make · 2 s\n  │ three")
    drawn = out.getvalue()
    second = drawn[drawn.index("· 1 s") :]
    # Up two lines (the three the first took), each cleared, then the new status.
    assert second.index("\x1b[A\x1b[K\x1b[A\x1b[K") < second.index("· 2 s")
    status(None)
    assert out.getvalue().endswith("\r\x1b[K\x1b[A\x1b[K")


async def test_a_changing_status_animates_on_rather_than_restarting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(spinning.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    status = Spinner(out)
    status("bash make · 0 s")
    now[0] += 3 * INTERVAL + INTERVAL / 2
    status("bash make · 1 s")
    assert out.getvalue().endswith(f"{FRAMES[3]} bash make · 1 s")
