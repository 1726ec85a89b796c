"""Take the screenshots of docs/web.md: a `tether web` on the offline model, driven by
Playwright in Debian's Chromium. Usage: .venv/bin/python scripts/web_screenshots.py"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.web.chromium import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

DOCS = ROOT / "docs"


def main() -> None:
    home = Path(tempfile.mkdtemp())
    work = home / "project"
    work.mkdir()
    (work / "notes.txt").write_text("tether keeps every session in a log\n")
    server = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.main", "--data-dir", str(home), "web"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TETHER_MODEL": "offline"},
    )
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    base = url.split("/?", 1)[0]
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 820})
            page.set_default_timeout(20_000)
            page.goto(url)

            def new_session(mode: str) -> None:
                page.goto(base + "/")
                page.fill("#new-cwd", str(work))
                page.select_option("#new-mode", mode)
                page.click("#create")
                page.wait_for_url("**/s/*")
                page.locator("body[data-connected=true]").wait_for(state="attached")

            def prompt(text: str) -> None:
                page.fill("#prompt", text)
                page.click("#send")

            new_session("auto")
            prompt("$ ls -la && wc -l notes.txt")
            page.locator(".turn-end").nth(0).wait_for()
            prompt("& while true; do date +%T; sleep 1; done")
            page.locator(".turn-end").nth(1).wait_for()
            prompt("$ sleep 30")
            page.locator(".tool-call .tool-state", has_text="running").wait_for()
            page.click("#stop")
            page.locator(".receipt").wait_for()
            page.locator(".task.running summary").click()
            page.locator(".task-tail").wait_for()
            page.wait_for_timeout(1500)
            page.locator(".task.running summary").click()
            page.locator(".task.running summary").click()
            page.wait_for_timeout(300)
            page.screenshot(path=str(DOCS / "web-session.png"))

            new_session("ask")
            prompt("edit notes.txt: log => durable log")
            page.locator(".question").wait_for()
            page.locator(".question button.allow").click()
            page.locator(".question", has_text="Allow edit").wait_for()
            page.screenshot(path=str(DOCS / "web-question.png"))
            page.locator(".question button.allow").click()
            page.locator(".turn-end").nth(0).wait_for()

            page.goto(base + "/")
            page.locator("#sessions tbody tr").nth(1).wait_for()
            page.screenshot(path=str(DOCS / "web-sessions.png"))
            browser.close()
    finally:
        server.terminate()
        server.communicate(timeout=30)


if __name__ == "__main__":
    main()
