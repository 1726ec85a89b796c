"""A session's MCP prompts and resources in the page's prompt box: Debian's Chromium driven
by Playwright, against a real ``tether web`` process whose sessions use an MCP server
written with the SDK (:mod:`tests.mcp_client.sdk_server`) and one that cannot list its
resources (:mod:`tests.mcp_client.raw_server`). One server and one browser for the module."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.mcp_client.support import RAW_SERVER, SDK_SERVER
from tests.web.test_browser import (
    Server,
    _need_chromium,
    _new_session,
    _prompt,
    _serious,
    _turn_ended,
    served,
)
from tests.web.test_browser import browser as _browser
from tests.web.test_browser import context as _context

# The browser tests' fixtures, on this module's server: one browser for the module,
# a signed-in context for each test.
browser = _browser
context = _context

OPTIONS = "#picker [role=option]"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    _need_chromium()
    home = tmp_path_factory.mktemp("web-home")
    config = home / "servers.yml"
    servers = {
        "t": {"command": sys.executable, "args": [SDK_SERVER]},
        "raw": {"command": sys.executable, "args": [RAW_SERVER, "--resources", "--good"]},
    }
    # Each session starts its servers: a loaded machine starts Python and the SDK slowly.
    mcp = {"servers": servers, "startup_timeout_ms": 60_000}
    config.write_text(f"plugins:\n  - id: mcp\n    config: {json.dumps(mcp)}\n")
    with served(home, "--mode", "auto", config=config) as server:
        yield server


def _type(page: Any, text: str) -> None:
    page.locator("#prompt").press_sequentially(text)


def _box(page: Any) -> str:
    return str(page.input_value("#prompt"))


def _active(page: Any) -> str:
    """The text of the entry the prompt box points at (``aria-activedescendant``)."""
    active = page.get_attribute("#prompt", "aria-activedescendant")
    assert active, "no entry is highlighted"
    return str(page.inner_text(f"#{active} .pick-label"))


def test_slash_offers_the_sessions_prompts_and_the_chosen_one_is_sent_expanded(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    _type(page, "/mcp__t")
    review = page.locator(OPTIONS, has_text="/mcp__t__review")
    review.wait_for()
    expect(page.locator(OPTIONS)).to_have_count(1)
    assert review.locator(".pick-detail").inner_text() == "Ask for a review of a topic."
    assert review.locator(".pick-arg").all_inner_texts() == ["topic", "tone?"]
    assert _active(page) == "/mcp__t__review"
    page.press("#prompt", "Tab")
    assert _box(page) == "/mcp__t__review "
    assert page.locator("#picker").is_hidden()
    _type(page, "build")
    page.press("#prompt", "Enter")
    page.locator("#said", has_text="Sent prompt 'review' of MCP server 't'").wait_for()
    _turn_ended(page)
    assert page.locator(".user", has_text="Review build in a plain tone.").count() == 1


def test_at_offers_resources_and_a_failing_servers_error_and_attaches_the_chosen_one(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    _type(page, "what is in @")
    page.locator(OPTIONS, has_text="@t:notes://today").wait_for()
    failed = page.locator(f"{OPTIONS}[aria-disabled=true]")
    assert failed.locator(".pick-label").inner_text() == "raw"
    assert "Method not found: resources/list" in failed.locator(".pick-detail").inner_text()
    first = _active(page)
    assert first.startswith("@t:notes://")  # the failed server's entry cannot be chosen
    page.press("#prompt", "ArrowDown")
    second = _active(page)
    assert {first, second} == {"@t:notes://today", "@t:notes://logo"}
    page.press("#prompt", "ArrowUp")
    assert _active(page) == first
    page.press("#prompt", "Escape")
    assert page.locator("#picker").is_hidden() and _box(page) == "what is in @"
    _type(page, "t:notes://to")
    expect(page.locator(OPTIONS)).to_have_count(1)
    assert page.locator(OPTIONS).all_inner_texts() == [
        "@t:notes://today\ntoday · Today's notes. · text/plain"
    ]
    page.press("#prompt", "Enter")
    assert _box(page) == "what is in @t:notes://today "
    page.press("#prompt", "Enter")
    page.locator("#said", has_text="attached @t:notes://today (1 line)").wait_for()
    _turn_ended(page)
    assert page.locator(".user", has_text="buy milk").count() == 1


def test_a_changed_prompt_list_is_offered_and_a_servers_text_is_shown_as_text(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    hostile = '<img src=x onerror="window.__xss=1"><b>bold</b>'
    _prompt(
        page, f"/tool mcp__t__swap_prompt {json.dumps({'name': 'fresh', 'description': hostile})}"
    )
    _turn_ended(page)
    _type(page, "/mcp__t__")
    fresh = page.locator(OPTIONS, has_text="/mcp__t__fresh")
    fresh.wait_for()
    expect(page.locator(OPTIONS)).to_have_count(1)  # review is gone from this session's server
    assert fresh.locator(".pick-detail").inner_text() == hostile
    assert page.locator("#picker img, #picker b").count() == 0
    assert page.evaluate("window.__xss") is None


def test_the_open_picker_fits_a_phone_and_has_no_serious_accessibility_violation(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    page.set_viewport_size({"width": 390, "height": 800})
    _type(page, "see @")
    page.locator(OPTIONS, has_text="@t:notes://today").wait_for()
    box = page.locator("#picker").bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert _serious(page) == []
    page.fill("#prompt", "")
    _type(page, "/mcp")
    page.locator(OPTIONS, has_text="/mcp__t__review").wait_for()
    assert _serious(page) == []
