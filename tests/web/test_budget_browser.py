"""The spend budget on the web page: a `tether web --max-budget-tokens` process on the
offline model, in Debian's Chromium (and one with ``--max-cluster-day-tokens``, its
sessions in PostgreSQL). The page shows the turn's ``budget`` stop reason and the
``budget/exhausted`` receipt naming the budget, live and when the session is opened
again."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import postgres
from tests.web.test_browser import (
    Server,
    _need_chromium,
    _new_session,
    _prompt,
    launched_chromium,
    served,
    signed_in,
)


class BudgetServer(Server):
    def __init__(self, url: str, process: subprocess.Popen[str], budget: str) -> None:
        super().__init__(url, process)
        self.budget = budget
        """The budget the server's sessions run out of (a key of :data:`WHOSE`)."""


WHOSE = {"session": "this session's", "cluster": "all hosts' daily"}
"""How the receipt names each budget the tests run out of."""


@pytest.fixture(scope="module", params=sorted(WHOSE))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BudgetServer]:
    _need_chromium()
    home = tmp_path_factory.mktemp("web-budget-home")
    env: dict[str, str] = {}
    # Every request reserves more than 50 tokens (its output alone: 8,192): none fits.
    command = ["--mode", "auto", "--max-budget-tokens", "50"]
    if request.param == "cluster":
        schema = postgres.new_schema()
        request.addfinalizer(lambda: postgres.drop(schema))
        env |= {"TETHER_DATABASE_URL": postgres.URL, "TETHER_DATABASE_SCHEMA": schema}
        command[-2] = "--max-cluster-day-tokens"
    with served(home, *command, env=env) as server:
        yield BudgetServer(server.url, server.process, request.param)


@pytest.fixture
def context(server: Server) -> Iterator[Any]:
    with launched_chromium() as browser, signed_in(browser, server) as context:
        yield context


def test_the_page_shows_the_budget_stop_and_its_receipt(
    context: Any, server: BudgetServer, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    _prompt(page, "hello")
    end = page.locator(".turn-end.budget")
    end.wait_for()
    assert end.inner_text() == "stopped: the spend budget is exhausted"
    receipt = page.locator(".budget-receipt").inner_text()
    assert re.fullmatch(
        rf"budget exhausted: 0 tokens of {WHOSE[server.budget]} 50 tokens spent; the next request "
        r"to offline would reserve [\d,]+ tokens, so it was not sent",
        receipt,
    ), receipt
    assert page.locator(".assistant").count() == 0  # no request was sent
    again = context.new_page()
    again.goto(page.url)
    again.locator(".budget-receipt").wait_for()
    # Its text as the page holds it: a turn out of view is not laid out (content-visibility),
    # and the rendered text (inner_text) of what is not laid out may be empty.
    shown_again = again.locator(".turn-end.budget")
    shown_again.wait_for(state="attached")
    assert shown_again.text_content() == end.inner_text()
    assert page.errors == []
