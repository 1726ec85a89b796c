"""`tether web` in a real browser: Debian's Chromium driven by Playwright, against a real
`tether web` process on the offline model. One server and one browser for the module."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.web.chromium import CHROMIUM, CHROMIUM_ARGS

WAIT_MS = 15_000


def _need_chromium() -> None:
    if os.path.exists(CHROMIUM):
        return
    reason = f"Chromium is not installed ({CHROMIUM}; apt-get install chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


class Server:
    def __init__(self, url: str, process: subprocess.Popen[str]) -> None:
        self.url = url
        self.base = url.split("/?", maxsplit=1)[0]
        self.token = url.split("token=")[1]
        self.process = process

    def api(self, path: str) -> Any:
        request = urllib.request.Request(
            self.base + path, headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    _need_chromium()
    home = tmp_path_factory.mktemp("web-home")
    process = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.main", "--data-dir", str(home), "web", "--mode", "auto"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TETHER_MODEL": "offline"},
    )
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), process.stderr.read() if process.stderr else ""
    try:
        yield Server(url, process)
    finally:
        process.terminate()
        process.communicate(timeout=30)
    assert process.returncode == 128 + 15  # SIGTERM, handled: tether stopped cleanly


@pytest.fixture(scope="module")
def browser(server: Server) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def context(browser: Any, server: Server) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    page.goto(server.url)  # the page keeps the token in this origin's storage
    page.close()
    try:
        yield context
    finally:
        context.close()


def _new_session(context: Any, server: Server, cwd: Path, mode: str = "auto") -> Any:
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.goto(server.base + "/")
    page.fill("#new-cwd", str(cwd))
    page.select_option("#new-mode", mode)
    page.click("#create")
    page.wait_for_url(re.compile(r".*/s/[^/]+$"))
    page.locator("body[data-connected=true]").wait_for(state="attached")
    page.errors = errors
    return page


def _prompt(page: Any, text: str) -> None:
    page.fill("#prompt", text)
    page.click("#send")


def _turn_ended(page: Any, count: int = 1) -> None:
    page.locator(".turn-end").nth(count - 1).wait_for()


def _check_complete(page: Any, server: Server) -> None:
    """The page saw every record of the log once, in order."""
    session_id = page.url.rsplit("/", 1)[1]
    events = server.api(f"/api/sessions/{session_id}")["events"]
    page.locator(f"body[data-last-seq='{events - 1}']").wait_for(state="attached")
    assert page.get_attribute("body", "data-gaps") == "0"
    assert page.get_attribute("body", "data-dups") == "0"


def test_the_token_leaves_the_address_bar_and_no_cookie_carries_it(
    browser: Any, server: Server
) -> None:
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(server.url)
        page.locator("#sessions").wait_for(state="attached")
        assert "token" not in page.url
        assert context.cookies() == []
        assert page.evaluate("localStorage.getItem('tether_token')") == server.token
    finally:
        context.close()


def test_a_new_session_runs_bash_and_streams_the_answer_and_its_output(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    _prompt(page, "$ echo from-the-browser")
    page.locator(".tool-output", has_text="from-the-browser").wait_for()
    page.locator(".assistant", has_text="The bash call finished").wait_for()
    _turn_ended(page)
    assert page.locator(".turn-end").first.inner_text() == "completed"
    assert page.locator(".tool-call .tool-name").first.inner_text() == "bash"
    _check_complete(page, server)
    listing = context.new_page()
    listing.goto(server.base + "/")
    listing.locator("#sessions a.title", has_text="from-the-browser").wait_for()
    listing.fill("#filter", "no-such-title-anywhere")
    listing.locator("#empty").wait_for()
    assert page.errors == []


def test_a_running_command_shows_its_time_and_latest_lines_until_its_output(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    _prompt(page, "$ for n in 1 2 3 4 5 6; do echo line-$n; sleep 0.5; done")
    progress = page.locator(".tool-call .tool-progress", has_text="line-2")
    progress.wait_for()
    assert re.match(r"running \d+ s\n", progress.inner_text())
    page.locator(".tool-output", has_text="line-6").wait_for()
    _turn_ended(page)
    assert page.locator(".tool-progress").count() == 0  # the output took its place
    assert page.errors == []


def test_a_background_task_shows_in_the_tasks_panel_and_is_killed_there(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    _prompt(page, "& echo panel-output; sleep 30")
    task = page.locator(".task.running")
    task.wait_for()
    task.locator("summary").click()
    task.locator(".task-tail", has_text="panel-output").wait_for()
    task.locator("button.kill").click()
    page.locator(".task.killed").wait_for()
    assert "sleep 30" in page.locator(".task-command").first.inner_text()


def test_stop_during_a_slow_call_ends_the_turn_cancelled_with_its_receipt(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    _prompt(page, "$ sleep 30")
    page.locator(".tool-call .tool-state", has_text="running").wait_for()
    page.click("#stop")
    page.locator(".turn-end.aborted", has_text="cancelled (user)").wait_for()
    receipt = page.locator(".receipt")
    receipt.wait_for()
    assert "cause: user" in receipt.inner_text()
    assert "process group" in receipt.inner_text()
    _check_complete(page, server)


def test_a_permission_question_is_answered_in_the_page(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path, mode="ask")
    _prompt(page, "$ echo permitted-in-page")
    question = page.locator(".question")
    question.wait_for()
    assert "Allow bash" in question.inner_text() and "permitted-in-page" in question.inner_text()
    page.locator(".tool-call.asking").wait_for()
    question.locator("button.allow").click()
    page.locator(".tool-output", has_text="permitted-in-page").wait_for()
    page.locator(".question").wait_for(state="detached")
    _turn_ended(page)
    # "Always allow" keeps Bash(echo:*) in the session: the next echo is not asked.
    _prompt(page, "$ echo always-in-page")
    question.locator("button.allow-always", has_text="Always allow Bash(echo:*)").click()
    page.locator(".tool-output", has_text="always-in-page").wait_for()
    _turn_ended(page, 2)
    _prompt(page, "$ echo unasked-in-page")
    page.locator(".tool-output", has_text="unasked-in-page").wait_for()
    _turn_ended(page, 3)
    assert page.locator(".question").count() == 0


def test_a_second_tab_and_a_reload_mid_stream_see_the_same_stream_with_no_gap(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    second = context.new_page()
    second.goto(page.url)
    second.locator("body[data-connected=true]").wait_for(state="attached")
    _prompt(page, "$ echo first-tick; sleep 1.5; echo last-tick")
    page.locator(".tool-call .tool-state", has_text="running").wait_for()
    second.locator(".tool-call .tool-state", has_text="running").wait_for()
    page.reload()
    page.locator(".tool-output", has_text="last-tick").wait_for()
    second.locator(".tool-output", has_text="last-tick").wait_for()
    _turn_ended(page)
    _turn_ended(second)
    _check_complete(page, server)
    _check_complete(second, server)
    assert page.inner_text("#transcript") == second.inner_text("#transcript")


def test_the_sessions_page_reads_the_listing_only_while_it_is_seen(
    context: Any, server: Server
) -> None:
    page = context.new_page()
    listings: list[str] = []
    page.on("request", lambda r: "/api/sessions?" in r.url and listings.append(r.url))
    page.goto(server.base + "/")
    page.wait_for_function("() => document.querySelector('#sessions tbody') !== null")
    page.wait_for_timeout(3_500)
    assert len(listings) >= 2  # the first read, then one every 3 s
    page.evaluate(
        """() => {
            Object.defineProperty(document, "hidden", {value: true, configurable: true});
            document.dispatchEvent(new Event("visibilitychange"));
        }"""
    )
    hidden_from = len(listings)
    page.wait_for_timeout(3_500)
    assert len(listings) == hidden_from  # a tab in the background asks nothing
    with page.expect_request(lambda r: "/api/sessions?" in r.url, timeout=300):
        page.evaluate(  # shown again: read at once, not at the next tick
            """() => {
                Object.defineProperty(document, "hidden", {value: false, configurable: true});
                document.dispatchEvent(new Event("visibilitychange"));
            }"""
        )
    page.close()


def test_calls_are_shown_as_their_tools_declare_a_write_and_an_edit_as_diffs(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    _prompt(page, "write notes.txt: first-line")
    _turn_ended(page)
    write = page.locator(".tool-call", has=page.locator(".tool-name", has_text="write"))
    assert write.locator(".args .path").inner_text() == "notes.txt"
    assert write.locator(".diff .add").all_inner_texts() == ["+ first-line"]
    assert write.locator(".diff .del").count() == 0 and write.locator(".json").count() == 0
    _prompt(page, "edit notes.txt: first-line => second-line")
    _turn_ended(page, 2)
    edit = page.locator(".tool-call", has=page.locator(".tool-name", has_text="edit"))
    assert edit.locator(".diff .del").all_inner_texts() == ["- first-line"]
    assert edit.locator(".diff .add").all_inner_texts() == ["+ second-line"]
    assert edit.locator(".json").count() == 0
    read = page.locator(".tool-call", has=page.locator(".tool-name", has_text="read"))
    assert '"path": "notes.txt"' in read.locator(".json").inner_text()
    _prompt(page, "$ echo shown-as-a-command")
    _turn_ended(page, 3)
    bash = page.locator(".tool-call", has=page.locator(".tool-name", has_text="bash"))
    assert bash.locator(".command").inner_text() == "$ echo shown-as-a-command"
    assert (tmp_path / "notes.txt").read_text() == "second-line\n"
    _check_complete(page, server)
    assert page.errors == []
