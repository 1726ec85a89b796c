"""A child agent's work is shown nested under the `task` call that started it, as it runs."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_commands import tether


def test_each_delegation_s_calls_show_a_level_deeper_before_the_task_ends(tmp_path: Path) -> None:
    inner = json.dumps({"description": "inner", "prompt": "$ echo deep"})
    outer = json.dumps({"description": "outer", "prompt": f"/tool task {inner}"})
    done = tether(tmp_path, "run", "--mode", "auto", f"/tool task {outer}")
    assert done.returncode == 0, done.stderr
    shown = done.stderr.splitlines()
    start = next(i for i, line in enumerate(shown) if line.startswith("→ task outer"))
    assert [line for line in shown[start + 1 : start + 6]] == [
        '  → task inner {"prompt": "$ echo deep"}',
        "    → bash echo deep",
        "    ← bash done (2 lines)",
        "  ← task done (4 lines)",
        "← task done (6 lines) #1",
    ]


def test_a_background_child_is_not_shown_under_the_call_that_answered_already(
    tmp_path: Path,
) -> None:
    child = json.dumps({"description": "bg", "prompt": "$ echo away", "run_in_background": True})
    done = tether(tmp_path, "run", "--mode", "auto", f"/tool task {child}")
    assert done.returncode == 0, done.stderr
    assert "  → bash echo away" not in done.stderr
