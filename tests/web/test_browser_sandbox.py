"""The sandbox in a real browser: the new-session form offers the modes, the session page
shows the one chosen with its network policy, and the session's commands obey it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.shell.support import require_landlock
from tests.web.test_browser import Server, _prompt, _turn_ended, browser, context, server

__all__ = ["browser", "context", "server"]  # the fixtures this module uses


def test_a_session_created_read_only_shows_its_sandbox_and_writes_nothing(
    context: Any, server: Server, tmp_path: Path
) -> None:
    require_landlock()
    page = context.new_page()
    page.goto(server.base + "/")
    page.locator("#new-sandbox-label:not([hidden])").wait_for()
    assert page.input_value("#new-sandbox") == "workspace-write"
    page.fill("#new-cwd", str(tmp_path))
    page.select_option("#new-mode", "auto")
    page.select_option("#new-sandbox", "read-only")
    page.click("#create")
    page.wait_for_url(re.compile(r".*/s/[^/]+$"))
    page.locator("body[data-connected=true]").wait_for(state="attached")

    shown = page.locator("#meta .sandbox")
    shown.wait_for()
    assert shown.text_content() == "sandbox read-only (network off)"
    _prompt(page, "$ touch made")
    _turn_ended(page)
    assert not (tmp_path / "made").exists()
