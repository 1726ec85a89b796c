"""`tether web` in a real browser: Debian's Chromium driven by Playwright, against a real
`tether web` process on the offline model. One server and one browser for the module."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def served(
    home: Path, *args: str, env: dict[str, str] | None = None, config: Path | None = None
) -> Iterator[Server]:
    """A `tether web` process (``args`` after ``web``, the offline model, ``config`` as
    its configuration file if given), stopped by SIGTERM at the end. Its stderr goes to
    a file beside ``home`` and its stdout, after the line with the URL, is read as it
    comes: a pipe nobody reads fills up (64 KiB) and a server that writes to it then
    blocks, in the middle of whatever test comes next."""
    home.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "tether.cli.main", "--data-dir", str(home)]
    command += [] if config is None else ["--config", str(config)]
    errors_path = home.parent / f"{home.name}.stderr"
    with errors_path.open("w") as errors:
        process = subprocess.Popen(
            [*command, "web", *args],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env={**os.environ, "TETHER_MODEL": "offline", **(env or {})},
        )
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), errors_path.read_text()
    drain = threading.Thread(target=process.stdout.read, daemon=True)
    drain.start()
    try:
        yield Server(url, process)
    finally:
        process.terminate()
        process.wait(timeout=30)
        drain.join(timeout=30)
    assert process.returncode == 128 + 15, errors_path.read_text()  # SIGTERM, handled


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    _need_chromium()
    with served(tmp_path_factory.mktemp("web-home"), "--mode", "auto") as server:
        yield server


@contextlib.contextmanager
def launched_chromium() -> Iterator[Any]:
    """Debian's Chromium, launched by Playwright, closed at the end."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@contextlib.contextmanager
def signed_in(browser: Any, server: Server) -> Iterator[Any]:
    """A desktop-sized browser context that has opened ``server``'s page once (the page
    keeps the token in this origin's storage), closed at the end."""
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    page.goto(server.url)
    page.close()
    try:
        yield context
    finally:
        context.close()


@pytest.fixture(scope="module")
def browser(server: Server) -> Iterator[Any]:
    with launched_chromium() as chromium:
        yield chromium


@pytest.fixture
def context(browser: Any, server: Server) -> Iterator[Any]:
    with signed_in(browser, server) as context:
        yield context


def _creates(response: Any) -> bool:
    """Whether ``response`` answers the page's request to create a session."""
    return bool(response.request.method == "POST" and response.url.endswith("/api/sessions"))


def _new_session(context: Any, server: Server, cwd: Path, mode: str = "auto") -> Any:
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.goto(server.base + "/")
    page.fill("#new-cwd", str(cwd))
    page.select_option("#new-mode", mode)
    with page.expect_response(_creates) as answered:
        page.click("#create")
    response = answered.value
    if not response.ok:
        raise AssertionError(f"not created: {response.status} {response.text()} {errors}")
    page.wait_for_url(re.compile(r".*/s/[^/]+$"))
    page.locator("body[data-connected=true]").wait_for(state="attached")
    page.errors = errors
    return page


def _prompt(page: Any, text: str) -> None:
    page.fill("#prompt", text)
    page.click("#send")


def _turn_ended(page: Any, count: int = 1) -> None:
    """Wait for the page to show the end of its ``count``-th turn; if it does not, fail
    with what the page shows (its errors, its connection, the end of its transcript)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.locator(".turn-end").nth(count - 1).wait_for()
    except PlaywrightTimeout:
        state = page.evaluate("({...document.body.dataset})")
        shown = page.inner_text("#transcript")[-1500:]
        errors = getattr(page, "errors", [])
        raise AssertionError(
            f"turn {count} did not end on the page; page state {state}, errors {errors}, "
            f"the transcript ends with:\n{shown}"
        ) from None


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
    page.clock.install()  # the page's timers run when the test says, not after seconds
    listings: list[str] = []
    page.on("request", lambda r: "/api/sessions?" in r.url and listings.append(r.url))
    page.goto(server.base + "/")
    page.wait_for_function("() => document.body.dataset.listed !== undefined")
    first = len(listings)
    with page.expect_request(lambda r: "/api/sessions?" in r.url):
        page.clock.run_for(3_100)
    assert len(listings) == first + 1  # one read every 3 s
    page.evaluate(
        """() => {
            Object.defineProperty(document, "hidden", {value: true, configurable: true});
            document.dispatchEvent(new Event("visibilitychange"));
        }"""
    )
    hidden_from = len(listings)
    page.clock.run_for(9_100)
    page.evaluate("() => fetch('/static/common.js')")  # whatever was asked has been sent
    assert len(listings) == hidden_from  # a tab in the background asks nothing
    with page.expect_request(lambda r: "/api/sessions?" in r.url, timeout=300):
        page.evaluate(  # shown again: read at once, not at the next tick
            """() => {
                Object.defineProperty(document, "hidden", {value: false, configurable: true});
                document.dispatchEvent(new Event("visibilitychange"));
            }"""
        )
    page.close()


def test_the_sessions_page_searches_prompts_filters_sorts_and_shows_cost_and_context(
    context: Any, server: Server, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    page = _new_session(context, server, elsewhere)
    _prompt(page, "$ echo first-prompt")
    _turn_ended(page)
    _prompt(page, "and then a question about albatrosses")
    _turn_ended(page, 2)
    session_id = page.url.rsplit("/", 1)[1]
    page.goto(server.base + "/")
    row = page.locator(f"#sessions tbody tr[data-id='{session_id}']")
    row.wait_for()
    assert re.fullmatch(r"[\d,]+", row.locator("td.context").inner_text()), row.inner_text()
    assert row.locator("td.cost").inner_text() == "-"  # the offline model has no prices
    assert row.locator("td.live-cell").inner_text() == "live"
    listed_for = "(query) => new RegExp(query).test(document.body.dataset.listedFor)"
    page.fill("#filter", "ALBATROSS")  # in the second prompt, not in the title
    page.wait_for_function(listed_for, arg="q=ALBATROSS")
    assert page.get_attribute("body", "data-listed") == "1"
    assert page.locator("#sessions tbody tr").get_attribute("data-id") == session_id
    assert page.inner_text("#shown") == "1 session"
    page.fill("#filter", "")
    page.select_option("#filter-cwd", str(elsewhere))
    page.wait_for_function(listed_for, arg="^cwd=[^&]*elsewhere&sort")
    assert page.get_attribute("body", "data-listed") == "1"
    assert page.locator("#sessions tbody tr").get_attribute("data-id") == session_id
    page.select_option("#filter-state", "idle")
    page.wait_for_function(listed_for, arg="state=idle")
    assert page.get_attribute("body", "data-listed") == "0"
    assert page.locator("#empty").is_visible()
    page.select_option("#filter-cwd", "")
    page.select_option("#filter-state", "live")
    page.select_option("#sort", "turns")
    page.wait_for_function(listed_for, arg="^state=live&sort=turns")
    turns = [int(t) for t in page.locator("#sessions tbody td.turns").all_inner_texts()]
    assert turns == sorted(turns, reverse=True)
    page.close()


def test_calls_are_shown_as_their_tools_declare_a_write_and_an_edit_as_diffs(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    _prompt(page, "write notes.txt: first-line")
    _turn_ended(page)
    write = page.locator(".tool-call", has=page.locator(".tool-name", has_text="write"))
    assert write.locator(".args .path").inner_text() == "notes.txt"
    assert write.locator(".diff .add .code").all_inner_texts() == ["+ first-line"]
    assert write.locator(".diff .del").count() == 0 and write.locator(".json").count() == 0
    _prompt(page, "edit notes.txt: first-line => second-line")
    _turn_ended(page, 2)
    edit = page.locator(".tool-call", has=page.locator(".tool-name", has_text="edit"))
    assert edit.locator(".diff .del .code").all_inner_texts() == ["- first-line"]
    assert edit.locator(".diff .add .code").all_inner_texts() == ["+ second-line"]
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


def test_an_edit_question_shows_the_changed_line_with_context_and_allow_in_view(
    context: Any, server: Server, tmp_path: Path
) -> None:
    (tmp_path / "big.txt").write_text("".join(f"line {n}\n" for n in range(1, 301)))
    page = _new_session(context, server, tmp_path, mode="ask")
    _prompt(page, "edit big.txt: line 150 => line 150 changed")
    question = page.locator(".question", has_text="Allow edit")
    question.wait_for()
    rows = question.locator(".diff .row")
    assert rows.count() == 8  # three lines of context each side: not 600 lines
    assert question.locator(".diff .fold").inner_text() == "⋯ 146 unchanged lines"
    removed = question.locator(".diff .row.del")
    assert removed.locator(".ln").all_inner_texts() == ["150", ""]
    assert removed.locator(".code").inner_text() == "- line 150"
    assert question.locator(".diff .row.add .code").inner_text() == "+ line 150 changed"
    assert rows.first.locator(".ln").all_inner_texts() == ["147", "147"]
    allow = question.locator("button.allow")
    box = allow.bounding_box()
    assert box is not None and box["y"] + box["height"] <= 800  # in view, not far below
    allow.click()
    _turn_ended(page)
    edit = page.locator(".tool-call", has=page.locator(".tool-name", has_text="edit"))
    assert edit.locator(".diff .row.del .ln").all_inner_texts() == ["150", ""]
    assert page.errors == []


MARKDOWN_ANSWER = (
    "# Rendered heading\n"
    "**bold** and `tick` [bad](javascript:window.pwned=1) <img src=x onerror=window.pwned=1>\n"
    "```python\n"
    "def f(): return '<script>window.pwned=1</script>'\n"
    "```\n"
)


def test_an_answer_is_rendered_markdown_with_highlighted_code_and_a_copy_button(
    context: Any, server: Server, tmp_path: Path
) -> None:
    (tmp_path / "answer.md").write_text(MARKDOWN_ANSWER)
    page = _new_session(context, server, tmp_path)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.base)
    _prompt(page, "$ cat answer.md")
    _turn_ended(page)
    answer = page.locator(".assistant.markdown", has_text="Rendered heading")
    assert answer.locator("h1").inner_text() == "Rendered heading"
    assert answer.locator("strong").inner_text() == "bold"
    assert answer.locator("p code").inner_text() == "tick"
    code = answer.locator(".code-block pre code")
    assert "monospace" in code.evaluate("e => getComputedStyle(e).fontFamily")
    assert code.locator("span.k").first.inner_text() == "def"  # highlighted by Pygments
    assert answer.locator("img, script").count() == 0
    assert answer.locator("a").count() == 0  # the javascript: link stayed text
    assert page.evaluate("window.pwned") is None
    answer.locator("button.copy").click()
    answer.locator("button.copy", has_text="Copied").wait_for()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.strip() == "def f(): return '<script>window.pwned=1</script>'"
    assert page.errors == []


# -- any screen, accessible, the small things --------------------------------------------

SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"
"""Where the layout test writes what it saw at each width (ignored by git), to open."""

WIDTHS = {"phone": 390, "tablet": 768, "desktop": 1280}


@pytest.fixture(scope="module")
def busy_session(browser: Any, server: Server, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The URL of a session with a bit of everything: an answer in Markdown, a write and
    an edit shown as diffs, a background task."""
    work = tmp_path_factory.mktemp("busy")
    (work / "answer.md").write_text(MARKDOWN_ANSWER)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(WAIT_MS)
    try:
        page = context.new_page()
        page.goto(server.url)
        page = _new_session(context, server, work)
        for turn, text in enumerate(
            [
                "$ cat answer.md",
                "write notes.txt: tether keeps every session",
                "edit notes.txt: every => each",
                "& echo panel-task; sleep 60",
            ],
            start=1,
        ):
            _prompt(page, text)
            _turn_ended(page, turn)
        page.locator(".task.running").wait_for()
        return f"{page.url}?token={server.token}"
    finally:
        context.close()


def _open(browser: Any, url: str, width: int, **options: Any) -> tuple[Any, Any]:
    """A new tab of ``url`` (the token kept in the session URL's query) at ``width``."""
    context = browser.new_context(viewport={"width": width, "height": 800}, **options)
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    page.goto(url)
    page.locator("body[data-connected=true]").wait_for(state="attached")
    page.locator(".assistant.markdown h1").wait_for()
    return context, page


@pytest.mark.parametrize("name", list(WIDTHS))
def test_the_session_page_is_usable_at_each_width_and_its_screenshot_is_written(
    browser: Any, server: Server, busy_session: str, name: str
) -> None:
    width = WIDTHS[name]
    context, page = _open(browser, busy_session, width)
    try:
        page.locator(".task.running").wait_for()
        overflow = page.evaluate("document.documentElement.scrollWidth")
        assert overflow <= width, f"the page is {overflow} px wide at {width} px"
        prompt = page.locator("#prompt").bounding_box()
        assert prompt is not None and prompt["width"] >= min(width - 140, 360)
        transcript = page.locator("#transcript").bounding_box()
        panel = page.locator("aside").bounding_box()
        assert transcript is not None and panel is not None
        if width < 760:  # one column: the panel below the transcript and the prompt
            assert panel["y"] >= prompt["y"] + prompt["height"]
            assert panel["width"] >= width - 20
        else:
            assert panel["x"] >= transcript["x"] + transcript["width"] - 1
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shot = SCREENSHOTS / f"session-{name}-{width}.png"  # what the screen shows
        page.screenshot(path=str(shot))
        whole = SCREENSHOTS / f"session-{name}-{width}-full.png"  # the whole page
        page.screenshot(path=str(whole), full_page=True)
        assert shot.stat().st_size > 10_000 and whole.stat().st_size > 10_000
        page.goto(server.base + "/")
        page.locator("#sessions tbody tr").first.wait_for()
        page.wait_for_function("() => document.getElementById('new-cwd').value !== ''")
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        create = page.locator("#create").bounding_box()
        assert create is not None and create["x"] + create["width"] <= width
        page.screenshot(path=str(SCREENSHOTS / f"sessions-{name}-{width}.png"), full_page=True)
    finally:
        context.close()


def _serious(page: Any) -> list[str]:
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    return [
        f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes']][:5]}"
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [390, 1280])
def test_every_page_has_no_serious_accessibility_violation(
    browser: Any, server: Server, busy_session: str, scheme: str, width: int
) -> None:
    context, page = _open(browser, busy_session, width, color_scheme=scheme)
    try:
        page.locator(".task.running summary").click()  # an open task with its tail
        page.locator(".task-tail", has_text="panel-task").wait_for()
        page.locator(".turn-label button", has_text="Diff").first.click()
        page.locator(".turn-diff").wait_for()
        assert _serious(page) == []
        page.goto(server.base + "/")
        page.locator("#sessions tbody tr").first.wait_for()
        assert _serious(page) == []
    finally:
        context.close()


def test_the_dark_theme_follows_the_system(browser: Any, busy_session: str) -> None:
    def background(scheme: str) -> str:
        context, page = _open(browser, busy_session, 1280, color_scheme=scheme)
        try:
            return str(page.evaluate("getComputedStyle(document.body).backgroundColor"))
        finally:
            context.close()

    light, dark = background("light"), background("dark")
    assert light == "rgb(247, 247, 245)"
    red, green, blue = (int(c) for c in re.findall(r"\d+", dark)[:3])
    assert max(red, green, blue) < 60, dark


def test_a_folded_block_shows_its_marker_and_opens_from_the_keyboard(
    context: Any, server: Server, busy_session: str
) -> None:
    page = context.new_page()
    page.goto(busy_session)
    summary = page.locator(".task.running summary")
    summary.wait_for()
    marker = "e => getComputedStyle(e, '::before').content"
    assert summary.evaluate(marker) == '"▸"'
    summary.focus()
    page.keyboard.press("Enter")
    page.locator(".task.running details[open]").wait_for()
    assert summary.evaluate(marker) == '"▾"'
    page.keyboard.press("Tab")  # Kill is next: reachable by keyboard
    assert page.evaluate("document.activeElement.className") == "kill"


def test_the_page_title_is_the_first_prompt_before_the_turn_ends(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    _prompt(page, "$ sleep 2; echo named-by-its-prompt")
    page.locator(".tool-call .tool-state", has_text="running").wait_for()
    assert page.title() == "$ sleep 2; echo named-by-its-prompt — tether"
    assert page.inner_text("#title") == "$ sleep 2; echo named-by-its-prompt"
    assert page.locator(".turn-end").count() == 0


def test_the_keys_queue_steer_and_stop_and_the_page_says_so(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    keys = page.inner_text("#keys")
    assert "Enter queues" in keys and "Ctrl+Enter steers" in keys and "Esc stops" in keys
    sent: list[Any] = []
    page.on("request", lambda r: r.url.endswith("/prompt") and sent.append(r.post_data_json))
    page.fill("#prompt", "$ sleep 30")
    page.press("#prompt", "Enter")
    page.locator(".tool-call .tool-state", has_text="running").wait_for()
    page.fill("#prompt", "steered by the keyboard")
    page.press("#prompt", "Control+Enter")
    page.wait_for_function("() => document.getElementById('prompt').value === ''")
    assert [s["steer"] for s in sent] == [False, True]
    page.locator("#transcript").click()
    page.keyboard.press("Escape")
    page.locator(".turn-end.aborted", has_text="cancelled (user)").wait_for()


def test_usage_has_thousands_separators(context: Any, server: Server, tmp_path: Path) -> None:
    page = _new_session(context, server, tmp_path)
    _prompt(page, "word " * 1500)
    _turn_ended(page)
    usage = page.locator("#usage", has_text="turn 1:")
    usage.wait_for()
    tokens = re.search(r"turn 1: ([\d,]+) in", usage.inner_text())
    assert tokens is not None and re.fullmatch(r"\d{1,3}(,\d{3})+", tokens[1]), usage.inner_text()


def test_a_new_session_is_made_in_the_servers_directory_by_default(
    context: Any, server: Server
) -> None:
    page = context.new_page()
    page.goto(server.base + "/")
    page.wait_for_function("() => document.getElementById('new-cwd').value !== ''")
    assert page.input_value("#new-cwd") == os.getcwd()  # the server runs where the tests do


def test_a_refused_new_session_keeps_its_error_when_the_listing_is_read_again(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = context.new_page()
    page.goto(server.base + "/")
    page.fill("#new-cwd", str(tmp_path / "not-there"))
    with page.expect_response(_creates) as answered:
        page.click("#create")
    assert answered.value.status == 400
    said = page.locator("#error", has_text="cwd must be an existing absolute directory")
    said.wait_for()
    page.fill("#filter", "a-filter")  # the listing is read again, and succeeds
    page.locator("body[data-listed-for*='q=a-filter']").wait_for(state="attached")
    assert said.is_visible()


def test_a_failed_turn_ends_with_what_failed_and_what_to_do(browser: Any, tmp_path: Path) -> None:
    nothing_there = "http://127.0.0.1:9/v1"  # the discard port: nothing listens
    model = ["--model", "openai:gpt-4o-mini", "--base-url", nothing_there]
    with served(tmp_path / "home", *model, env={"OPENAI_API_KEY": "sk-test"}) as failing:
        context = browser.new_context()
        context.set_default_timeout(30_000)
        try:
            page = context.new_page()
            page.goto(failing.url)
            page = _new_session(context, failing, tmp_path)
            _prompt(page, "hello")
            end = page.locator(".turn-end.error")
            end.wait_for()
            said = end.inner_text()
            assert said.startswith("error: openai: cannot connect to http://127.0.0.1:9/v1")
            assert said.endswith(
                "— nothing answers there; check --base-url and that the server is running"
            )
        finally:
            context.close()


def test_a_long_change_scrolls_in_the_question_with_allow_in_view(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path, mode="ask")
    _prompt(page, "write long.txt: " + "\n".join(f"row {n}" for n in range(1, 1001)))
    question = page.locator(".question", has_text="Allow write")
    question.wait_for()
    rows = question.locator(".diff .row")
    assert rows.count() == 400
    assert rows.last.locator(".ln").all_inner_texts() == ["", "400"]
    allow = question.locator("button.allow").bounding_box()
    assert allow is not None and allow["y"] + allow["height"] <= 800
    more = question.locator("button.more")
    assert more.inner_text() == "Show 600 more lines"
    more.click()
    assert rows.count() == 1000
    question.locator("button.allow").click()
    _turn_ended(page)
    assert (tmp_path / "long.txt").read_text().count("\n") == 1000


def test_the_model_and_the_mode_switch_in_the_header_with_context_and_cost_in_view(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    session_id = page.url.rsplit("/", 1)[1]
    _prompt(page, "$ echo before-the-switch")
    _turn_ended(page)
    page.locator("#usage-now", has_text=re.compile(r"^context [\d,]+ tokens$")).wait_for()
    with page.expect_response(lambda r: r.url.endswith("/config")):
        page.select_option("#mode", "ask")
    assert server.api(f"/api/sessions/{session_id}")["mode"] == "ask"
    _prompt(page, "$ echo after-the-switch")
    page.locator(".question").wait_for()  # ask mode: the call waits for Allow
    page.locator(".question .allow").click()
    _turn_ended(page, 2)
    with page.expect_response(lambda r: r.url.endswith("/config")):
        page.fill("#model", "offline:second")
        page.press("#model", "Enter")
    assert server.api(f"/api/sessions/{session_id}")["model"] == "offline:second"
    page.fill("#model", "nowhere:model")
    page.press("#model", "Enter")
    page.locator("#error", has_text="model: model 'nowhere:model'").wait_for()
    page.wait_for_function("() => document.getElementById('model').value === 'offline:second'")
    assert not [e for e in page.errors if "Failed to load resource" not in e]  # only the 400


def test_the_todo_list_is_a_checklist(context: Any, server: Server, tmp_path: Path) -> None:
    page = _new_session(context, server, tmp_path)
    tasks = [
        {"content": "Read the code", "status": "completed", "priority": "high"},
        {"content": "Write the fix", "status": "in_progress", "priority": "high"},
        {"content": "Run the tests", "status": "pending", "priority": "medium"},
    ]
    _prompt(page, "/tool todo " + json.dumps({"tasks": tasks}))
    _turn_ended(page)
    plan = page.locator(".plan")
    assert plan.locator(".plan-title").inner_text() == "Plan (1 of 3 done)"
    ticks = plan.locator("input[type=checkbox]")
    assert [ticks.nth(i).is_checked() for i in range(3)] == [True, False, False]
    assert all(ticks.nth(i).is_disabled() for i in range(3))
    assert plan.locator(".plan-in_progress .plan-state").inner_text() == "in progress"
    assert plan.locator(".plan-content").all_inner_texts() == [t["content"] for t in tasks]
    assert _serious(page) == []


def test_a_subagent_is_nested_under_its_task_call_with_its_live_transcript_a_click_away(
    context: Any, server: Server, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    page = _new_session(context, server, tmp_path)
    task = {
        "description": "wait for the gate",
        "prompt": f"$ while [ ! -e {gate} ]; do sleep 0.02; done; echo child-done",
    }
    _prompt(page, "/tool task " + json.dumps(task))
    link = page.locator(".tool-call .subagent a.child")
    link.wait_for()  # while the subagent runs: from its first event, not its end
    assert page.locator(".tool-call .tool-state").first.inner_text() == "running"
    assert page.locator("#children a").inner_text() == "wait for the gate"
    with context.expect_page() as opened:
        link.click()
    child = opened.value
    child.locator("body[data-connected=true]").wait_for(state="attached")
    child.locator(".tool-call .tool-progress, .tool-call .command").first.wait_for()
    gate.touch()
    child.locator(".tool-output", has_text="child-done").wait_for()
    _turn_ended(page)
    child.close()


def test_a_mode_chosen_before_the_defaults_arrive_is_kept(context: Any, server: Server) -> None:
    held: list[Any] = []

    def hold(route: Any) -> None:  # the defaults are held back until let go
        held.append(route)

    page = context.new_page()
    page.route("**/api/models", hold)
    page.goto(server.base + "/")
    page.wait_for_function("() => document.readyState === 'complete'")
    page.select_option("#new-mode", "ask")  # the server's default is auto
    while not held:  # Playwright hands over the held request while it waits
        page.wait_for_timeout(10)
    (route,) = held
    route.continue_()
    page.locator("#providers option").first.wait_for(state="attached")
    assert page.input_value("#new-mode") == "ask"
    page.close()


def test_a_prompt_typed_while_the_last_one_is_stored_stays_in_the_box(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    held: list[Any] = []

    def hold(route: Any) -> None:  # the first prompt is held back until let go
        if held:
            route.continue_()
        else:
            held.append(route)

    page.route("**/prompt", hold)
    _prompt(page, "first prompt")
    while not held:  # Playwright hands over the held request while it waits
        page.wait_for_timeout(10)
    page.fill("#prompt", "second prompt")  # typed before the first one's answer comes
    with page.expect_response(lambda r: r.url.endswith("/prompt")):
        held[0].continue_()
    page.wait_for_timeout(100)  # the answer is handled
    assert page.input_value("#prompt") == "second prompt"
    page.click("#send")
    _turn_ended(page, 2)
    said = page.locator("#transcript .user").all_inner_texts()
    assert said == ["first prompt", "second prompt"]


def test_a_model_name_typed_while_a_switch_is_answered_stays_in_the_field(
    context: Any, server: Server, tmp_path: Path
) -> None:
    page = _new_session(context, server, tmp_path)
    held: list[Any] = []

    def hold(route: Any) -> None:  # the first switch is held back until let go
        if held:
            route.continue_()
        else:
            held.append(route)

    page.route("**/config", hold)
    page.fill("#model", "offline:second")
    page.press("#model", "Enter")
    while not held:  # Playwright hands over the held request while it waits
        page.wait_for_timeout(10)
    page.fill("#model", "nowhere:model")  # typed before the answer comes
    with page.expect_response(lambda r: r.url.endswith("/config")):
        held[0].continue_()
    page.wait_for_timeout(100)  # the answer is handled
    assert page.input_value("#model") == "nowhere:model"
    page.press("#model", "Enter")
    page.locator("#error", has_text="model: model 'nowhere:model'").wait_for()
