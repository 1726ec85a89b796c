"""The todo list is shown as a checklist, from the plan the session logs."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_commands import tether

TASKS = [
    {"content": "read the code", "status": "completed", "priority": "high"},
    {"content": "fix the bug", "status": "in_progress", "priority": "high"},
    {"content": "write a test", "status": "pending", "priority": "medium"},
]


def test_the_todo_list_is_a_checklist_and_its_call_line_holds_no_json(tmp_path: Path) -> None:
    task = "/tool todo " + json.dumps({"tasks": TASKS})
    done = tether(tmp_path, "run", "--mode", "auto", task)
    assert done.returncode == 0, done.stderr
    shown = done.stderr.splitlines()
    assert "→ todo" in shown  # the list is the checklist below, not the call's JSON
    at = shown.index("  plan: 1 of 3 done")
    assert shown[at + 1 : at + 4] == ["  ✔ read the code", "  ▸ fix the bug", "  ○ write a test"]


def test_a_cleared_plan_says_so(tmp_path: Path) -> None:
    done = tether(tmp_path, "run", "--mode", "auto", '/tool todo {"tasks": []}')
    assert done.returncode == 0, done.stderr
    assert "  (the plan is cleared)" in done.stderr.splitlines()
