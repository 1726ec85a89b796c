"""``task`` with ``isolation: worktree`` from the command line: real ``tether`` processes,
real git. A child's diff comes back in the run; Ctrl-C of the parent kills the child's
processes and keeps its changed worktree, named in the stop receipt and ``sessions show``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_commands import env_for, session_id, tether
from tests.plugins.test_worktrees import git, make_repo
from tether.rewind.worktree import WORKTREES_DIR


def task(prompt: str) -> str:
    arguments = {"description": "edit", "prompt": prompt, "isolation": "worktree"}
    return "/tool task " + json.dumps(arguments)


def test_a_run_gets_its_childs_diff_and_sessions_show_names_the_worktree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    home = tmp_path / "home"
    done = tether(home, "run", "--mode", "auto", task("$ echo child >> a.txt"), cwd=repo)
    assert done.returncode == 0, done.stderr
    [kept] = sorted((repo / ".git" / WORKTREES_DIR).iterdir())
    assert (kept / "a.txt").read_text() == "committed\nuncommitted\nchild\n"
    parent = session_id(done.stderr)
    shown = tether(home, "sessions", "show", parent).stdout
    assert f"[worktree kept: {kept} (branch tether/{kept.name})" in shown
    assert "+child" in shown
    child = tether(home, "sessions", "show", kept.name).stdout
    assert f"(works in git worktree {kept}, branch tether/{kept.name}: kept)" in child


@pytest.mark.timeout(90)
def test_ctrl_c_of_the_parent_kills_the_childs_processes_and_keeps_its_worktree(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    home = tmp_path / "home"
    prompt = "$ echo changed >> a.txt; echo $$ > shell.pid; sleep 600"
    process = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.main", "run", "--mode", "auto", task(prompt)],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env_for(home),
    )
    place = repo / ".git" / WORKTREES_DIR
    deadline = time.monotonic() + 60
    while not list(place.glob("*/shell.pid")) and time.monotonic() < deadline:
        time.sleep(0.05)
    [pid_file] = list(place.glob("*/shell.pid"))
    while not pid_file.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    shell = int(pid_file.read_text())
    process.send_signal(signal.SIGINT)
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    with pytest.raises(ProcessLookupError):
        os.killpg(shell, 0)
    kept = pid_file.parent
    assert (kept / "a.txt").read_text().endswith("changed\n")
    assert git(repo, "branch", "--format=%(refname:short)", "--list", "tether/*").split() == [
        f"tether/{kept.name}"
    ]
    parent = session_id(err)
    records = [json.loads(line) for line in (home / "sessions" / f"{parent}.jsonl").open()]
    [receipt] = [r["data"] for r in records if r.get("type") == "tool/stopped"]
    [stopped] = receipt["agents"]
    assert stopped["id"] == kept.name and stopped["cause"] == "parent"
    assert stopped["worktree"] == str(kept) and stopped["branch"] == f"tether/{kept.name}"
    shown = tether(home, "sessions", "show", parent).stdout
    assert f"its worktree is kept at {kept} (branch tether/{kept.name})" in shown


def test_an_unchanged_childs_worktree_is_shown_removed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    home = tmp_path / "home"
    done = tether(home, "run", "--mode", "auto", task("$ cat a.txt"), cwd=repo)
    assert done.returncode == 0, done.stderr
    assert not (repo / ".git" / WORKTREES_DIR).exists() or not any(
        (repo / ".git" / WORKTREES_DIR).iterdir()
    )
    shown = tether(home, "sessions", "show", session_id(done.stderr)).stdout
    [line] = [line for line in shown.splitlines() if "no changes; removed with branch" in line]
    child = line.split("branch tether/", 1)[1].rstrip("]")
    child_shown = tether(home, "sessions", "show", child).stdout
    assert f"branch tether/{child}: removed)" in child_shown
