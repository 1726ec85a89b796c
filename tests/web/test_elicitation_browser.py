"""A server's request for input answered in the page: Debian's Chromium driven by Playwright,
against a real ``tether web`` process whose sessions use an MCP server written with the SDK
(:mod:`tests.mcp_client.asking_server`). One server and one browser for the module."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.mcp_client.support import HERE
from tests.web.test_browser import (
    Server,
    _need_chromium,
    _new_session,
    _prompt,
    launched_chromium,
    served,
    signed_in,
)

ASKING_SERVER = str(HERE / "asking_server.py")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    _need_chromium()
    home = tmp_path_factory.mktemp("web-home")
    config = home / "servers.yml"
    asking = {"ask": {"command": sys.executable, "args": [ASKING_SERVER]}}
    config.write_text(f"plugins:\n  - id: mcp\n    config:\n      servers: {json.dumps(asking)}\n")
    with served(home, "--mode", "auto", config=config) as server:
        yield server


@pytest.fixture(scope="module")
def browser(server: Server) -> Iterator[Any]:
    with launched_chromium() as chromium:
        yield chromium


@pytest.fixture
def context(browser: Any, server: Server) -> Iterator[Any]:
    with signed_in(browser, server) as context:
        yield context


def test_a_form_is_filled_in_the_page_and_reaches_the_server(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    _prompt(page, "/tool mcp__ask__deploy {}")
    card = page.locator(".elicitation")
    card.locator(".question-title", has_text="ask asks: Where should it be deployed?").wait_for()
    card.locator("select[name=region]").select_option("us")
    card.locator("input[name=replicas]").fill("4")
    card.locator("input[name=confirm]").check()
    card.locator("input[name=api_token]").fill("tok-from-the-page")
    card.locator("button.allow").click()
    typed = {"region": "us", "replicas": 4, "confirm": True, "api_token": "tok-from-the-page"}
    output = page.locator(".tool-output", has_text="accept")
    output.wait_for()
    assert json.loads(output.inner_text().strip().removeprefix("accept ")) == typed
    card.wait_for(state="detached")
    assert page.errors == []


def test_a_url_is_a_link_and_declining_it_reaches_the_server(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    _prompt(page, "/tool mcp__ask__sign_in {}")
    card = page.locator(".elicitation")
    link = card.locator("a.elicitation-url")
    link.wait_for()
    assert link.get_attribute("href") == "https://login.example.test/device?code=42"
    card.locator("button.reject").click()
    page.locator(".tool-output", has_text="decline").wait_for()
    assert page.errors == []


def test_stop_withdraws_an_open_request(context: Any, server: Server, tmp_path: Path) -> None:
    page = _new_session(context, server, tmp_path)
    _prompt(page, "/tool mcp__ask__deploy {}")
    card = page.locator(".elicitation")
    card.wait_for()
    page.click("#stop")
    card.wait_for(state="detached")
    page.locator(".turn-end.aborted").wait_for()
    assert page.errors == []
