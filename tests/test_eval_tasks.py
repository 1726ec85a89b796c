"""The evaluation's checkers (bench/eval_tasks.py) judge the work, not the claim.

Each task's checker must fail on the repository as the task leaves it and
pass once the reference solution is applied: a checker that passes on the
untouched repository would count a model that did nothing as a success.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "bench" / "eval_tasks.py"
_SPEC = importlib.util.spec_from_file_location("eval_tasks", _PATH)
assert _SPEC and _SPEC.loader
eval_tasks = importlib.util.module_from_spec(_SPEC)
sys.modules["eval_tasks"] = eval_tasks
_SPEC.loader.exec_module(eval_tasks)

NAMES = [task.name for task in eval_tasks.TASKS]


def test_there_are_a_dozen_tasks_with_distinct_names() -> None:
    assert len(NAMES) >= 12
    assert len(set(NAMES)) == len(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_a_checker_fails_untouched_and_passes_solved(name: str, tmp_path: Path) -> None:
    task = next(task for task in eval_tasks.TASKS if task.name == name)
    untouched, why = eval_tasks.reference_outcome(task, tmp_path / "before", solved=False)
    assert not untouched, f"{name} passes with nothing done: {why}"
    solved, why = eval_tasks.reference_outcome(task, tmp_path / "after", solved=True)
    assert solved, f"{name} fails on its reference solution: {why}"


def test_the_report_counts_successes_and_cache_share() -> None:
    outcomes = [
        eval_tasks.Outcome("a", True, "", steps=2, input_tokens=1000, cached_tokens=900),
        eval_tasks.Outcome("b", False, "", steps=1, input_tokens=1000, cached_tokens=0),
    ]
    text = eval_tasks.report(outcomes, runs=1)
    assert "1/2" in text.splitlines()[-2]
    assert text.endswith("cache: 45%")


def test_an_unknown_task_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        eval_tasks.main(["--model", "m", "--base-url", "u", "--tasks", "fix-bug,nope"])
    assert exit_info.value.code == 2
    assert "unknown task(s) nope" in capsys.readouterr().err
