"""Take the screenshots of docs/web.md: a `tether web` on the offline model, driven by
Playwright in Debian's Chromium. Usage: .venv/bin/python scripts/web_screenshots.py"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.web.chromium import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

DOCS = ROOT / "docs"


def _project(home: Path) -> Path:
    """The files the sessions of the screenshots work on."""
    work = home / "project"
    work.mkdir()
    (work / "notes.txt").write_text("tether keeps every session in a log\n")
    (work / "big.txt").write_text("".join(f"line {n}\n" for n in range(1, 301)))
    (work / "answer.md").write_text(
        "## Rendered answers\n"
        "**Markdown**, `code` and [links](https://example.org) — and code, highlighted:\n"
        "```python\n"
        "def stop(task): return task.kill(signal='TERM', then='KILL')\n"
        "```\n"
    )
    return work


class Shots:
    """One browser tab on a `tether web` at ``url``, making sessions in ``work``."""

    def __init__(self, browser: Any, url: str, work: Path) -> None:
        self.browser, self.url, self.work = browser, url, work
        self.base = url.split("/?", 1)[0]
        self.page = browser.new_page(viewport={"width": 1280, "height": 820})
        self.page.set_default_timeout(20_000)
        self.page.goto(url)

    def new_session(self, mode: str) -> None:
        page = self.page
        page.goto(self.base + "/")
        page.fill("#new-cwd", str(self.work))
        page.select_option("#new-mode", mode)
        page.click("#create")
        page.wait_for_url("**/s/*")
        page.locator("body[data-connected=true]").wait_for(state="attached")

    def prompt(self, text: str) -> None:
        self.page.fill("#prompt", text)
        self.page.click("#send")

    def session(self) -> None:
        """An answer in Markdown, a background task, a Stop with its receipt."""
        page = self.page
        self.new_session("auto")
        self.prompt("$ cat answer.md")
        page.locator(".turn-end").nth(0).wait_for()
        self.prompt("& while true; do date +%T; sleep 1; done")
        page.locator(".turn-end").nth(1).wait_for()
        self.prompt("$ sleep 30")
        page.locator(".tool-call .tool-state", has_text="running").wait_for()
        page.click("#stop")
        page.locator(".receipt").wait_for()
        page.locator(".task.running summary").click()
        page.locator(".task-tail").wait_for()
        page.wait_for_timeout(1500)
        page.screenshot(path=str(DOCS / "web-session.png"))

    def phone(self) -> None:
        """The same session at 390 px."""
        phone = self.browser.new_page(viewport={"width": 390, "height": 844})
        phone.goto(self.url)
        phone.goto(self.page.url)
        phone.locator(".task.running").wait_for()
        phone.locator(".assistant.markdown h2").scroll_into_view_if_needed()
        phone.screenshot(path=str(DOCS / "web-phone.png"))
        phone.close()

    def question(self) -> None:
        """The question of an edit of one line in a 300-line file."""
        page = self.page
        self.new_session("ask")
        self.prompt("edit big.txt: line 150 => line 150, changed")
        page.locator(".question", has_text="Allow edit").wait_for()
        page.wait_for_timeout(300)
        page.screenshot(path=str(DOCS / "web-question.png"))
        page.locator(".question button.allow").click()
        page.locator(".turn-end").nth(0).wait_for()

    def sessions(self) -> None:
        page = self.page
        page.goto(self.base + "/")
        page.locator("#sessions tbody tr").nth(1).wait_for()
        page.screenshot(path=str(DOCS / "web-sessions.png"))


def main() -> None:
    home = Path(tempfile.mkdtemp())
    work = _project(home)
    server = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.main", "--data-dir", str(home), "web"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TETHER_MODEL": "offline"},
        cwd=work,  # the new session's directory by default: the project's
    )
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            shots = Shots(browser, url, work)
            shots.session()
            shots.phone()
            shots.question()
            shots.sessions()
            browser.close()
    finally:
        server.terminate()
        server.communicate(timeout=30)


if __name__ == "__main__":
    main()
