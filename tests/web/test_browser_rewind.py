"""A turn's Diff, Rewind and Fork buttons in a real browser: Debian's Chromium driven by
Playwright against a real `tether web` process on the offline model, real files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.web import test_browser as page_tests

server = page_tests.server
browser = page_tests.browser
context = page_tests.context


def _turn_button(page: Any, turn: int, name: str) -> Any:
    return page.locator(f'section.turn[data-turn="{turn}"] .turn-actions button', has_text=name)


def _changed_in_one_turn(context: Any, server: page_tests.Server, work: Path) -> Any:
    """A session in ``work`` whose first turn changed app.py and created made.txt."""
    work.mkdir()
    (work / "app.py").write_text("value = 1\n")
    page = page_tests._new_session(context, server, work)
    page_tests._prompt(page, "$ sed -i s/1/2/ app.py && echo made > made.txt")
    page_tests._turn_ended(page)
    assert (work / "app.py").read_text() == "value = 2\n"
    return page


def test_diff_shows_what_the_turn_changed_and_hides_on_a_second_click(
    context: Any, server: page_tests.Server, tmp_path: Path
) -> None:
    page = _changed_in_one_turn(context, server, tmp_path / "work")
    _turn_button(page, 1, "Diff").click()
    diff = page.locator('section.turn[data-turn="1"] .turn-diff')
    diff.wait_for()
    assert diff.locator(".row.del", has_text="- value = 1").count() == 1
    assert diff.locator(".row.add", has_text="+ value = 2").count() == 1
    assert diff.locator(".row.add", has_text="+ made").count() == 1
    _turn_button(page, 1, "Diff").click()
    diff.wait_for(state="detached")
    assert page.errors == []


def test_rewind_code_restores_the_files_and_says_what_it_did(
    context: Any, server: page_tests.Server, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    page = _changed_in_one_turn(context, server, work)
    dialogs: list[tuple[str, str]] = []

    def answer(dialog: Any) -> None:
        dialogs.append((dialog.type, dialog.message))
        if dialog.type == "prompt":
            dialog.accept("code")
        else:
            dialog.accept()

    page.on("dialog", answer)
    with page.expect_event("dialog", lambda dialog: dialog.type == "alert"):
        _turn_button(page, 1, "Rewind").click()
    assert [kind for kind, _ in dialogs] == ["prompt", "alert"]
    assert "turn 1" in dialogs[0][1]
    assert (work / "app.py").read_text() == "value = 1\n"
    assert not (work / "made.txt").exists()
    assert "back to the start of turn 1 (1 file(s) written back, 1 deleted)" in dialogs[1][1]
    assert page.errors == []


def test_fork_opens_the_branch_made_before_the_turn(
    context: Any, server: page_tests.Server, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    page = _changed_in_one_turn(context, server, work)
    parent = page.url.rsplit("/", 1)[1]
    _turn_button(page, 1, "Fork").click()
    page.wait_for_url(re.compile(r".*/s/(?!" + re.escape(parent) + r"$)[^/]+$"))
    page.locator("body[data-connected=true]").wait_for(state="attached")
    branch = page.url.rsplit("/", 1)[1]
    stored = server.api(f"/api/sessions/{branch}")
    assert stored["id"] == branch and stored["cwd"] == str(work)
    assert stored["events"] < server.api(f"/api/sessions/{parent}")["events"]
    assert page.locator("section.turn").count() == 0  # made before turn 1: no turn copied
    assert (work / "app.py").read_text() == "value = 2\n"  # a fork leaves the files
    assert page.errors == []
