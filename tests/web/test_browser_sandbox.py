"""The sandbox in a real browser: the new-session form offers the modes, the session page
shows the one chosen with its network policy, and the session's commands obey it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.shell.support import require_landlock
from tests.web.test_browser import (
    Server,
    _new_session,
    _prompt,
    _turn_ended,
    browser,
    context,
    server,
)

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
    assert page.input_value("#sandbox") == "read-only"
    assert shown.locator(".network").text_content() == " (network off)"
    _prompt(page, "$ touch made")
    _turn_ended(page)
    assert not (tmp_path / "made").exists()


def test_the_sandbox_is_switched_from_the_header_and_the_next_command_obeys(
    context: Any, server: Server, tmp_path: Path
) -> None:
    require_landlock()
    page = _new_session(context, server, tmp_path)
    page.locator("#meta .sandbox").wait_for()
    assert page.input_value("#sandbox") == "workspace-write"
    with page.expect_response(lambda r: r.url.endswith("/config")) as answered:
        page.select_option("#sandbox", "read-only")
    assert answered.value.json()["sandbox"]["mode"] == "read-only"
    _prompt(page, "$ touch refused")
    _turn_ended(page)
    assert not (tmp_path / "refused").exists()
    with page.expect_response(lambda r: r.url.endswith("/config")):
        page.select_option("#sandbox", "workspace-write")
    _prompt(page, "$ touch allowed")
    _turn_ended(page, 2)
    assert (tmp_path / "allowed").exists()
    page.reload()
    page.locator("#meta .sandbox").wait_for()
    assert page.input_value("#sandbox") == "workspace-write"  # the logged switch is kept
    assert page.errors == []
