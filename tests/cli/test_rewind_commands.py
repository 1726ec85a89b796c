"""``tether sessions rewind|diff`` and ``tether run --fork``: real subprocesses on the offline
model, real files and real git."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_commands import env_for, session_id, tether


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    (root / "app.py").write_text("value = 1\n")
    return root


def run(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return tether(home, "run", *args, cwd=cwd)


def events(home: Path, sid: str) -> list[dict[str, object]]:
    exported = tether(home, "sessions", "export", sid).stdout.splitlines()
    return [json.loads(line) for line in exported[1:]]


def test_rewind_code_then_diff_then_a_refusal_for_an_outside_change(
    tmp_path: Path, workspace: Path
) -> None:
    home = tmp_path / "home"
    first = run(home, workspace, "$ sed -i s/1/2/ app.py && echo made > made.txt")
    assert first.returncode == 0, first.stderr
    sid = session_id(first.stderr)
    assert (workspace / "app.py").read_text() == "value = 2\n"

    diff = tether(home, "sessions", "diff", sid, "--turn", "1")
    assert diff.returncode == 0, diff.stderr
    assert "-value = 1" in diff.stdout and "+value = 2" in diff.stdout
    assert "+made" in diff.stdout

    (workspace / "made.txt").write_text("edited by hand\n")
    refused = tether(home, "sessions", "rewind", sid, "--to", "1", "--code")
    assert refused.returncode == 1
    assert "made.txt" in refused.stderr and "--force" in refused.stderr
    assert (workspace / "app.py").read_text() == "value = 2\n"

    forced = tether(home, "sessions", "rewind", sid, "--to", "1", "--code", "--force")
    assert forced.returncode == 0, forced.stderr
    assert (workspace / "app.py").read_text() == "value = 1\n"
    assert not (workspace / "made.txt").exists()
    assert events(home, sid)[-1]["data"]["moment"] == "rewound"  # type: ignore[index]


def test_rewind_both_branches_the_conversation_and_run_fork_resumes_a_branch(
    tmp_path: Path, workspace: Path
) -> None:
    home = tmp_path / "home"
    sid = session_id(run(home, workspace, "$ echo one > one.txt").stderr)
    again = run(home, workspace, "--resume", sid, "$ echo two > two.txt")
    assert again.returncode == 0, again.stderr
    stored = events(home, sid)

    both = tether(home, "sessions", "rewind", sid, "--to", "2")
    assert both.returncode == 0, both.stderr
    assert (workspace / "one.txt").exists() and not (workspace / "two.txt").exists()
    branch = both.stdout.split("session ")[1].split(":")[0]
    assert events(home, sid) == stored  # the parent keeps every event
    shown = tether(home, "sessions", "show", branch)
    assert f"a branch of session {sid}" in shown.stdout

    forked = run(home, workspace, "--fork", f"{sid}@2", "$ echo three > three.txt")
    assert forked.returncode == 0, forked.stderr
    fork_id = session_id(forked.stderr)
    assert fork_id not in (sid, branch)
    header = json.loads(tether(home, "sessions", "export", fork_id).stdout.splitlines()[0])
    assert header["header"]["lineage"]["parent"] == sid
    listed = tether(home, "sessions", "list").stdout
    assert fork_id in listed and branch in listed


def test_a_sigkill_during_a_snapshot_leaves_the_session_loadable(
    tmp_path: Path, workspace: Path
) -> None:
    home = tmp_path / "home"
    for index in range(2000):  # enough files that the first snapshot takes a while
        (workspace / f"f{index}.txt").write_text(f"{index}\n")
    child = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.main", "run", "$ echo hi > hi.txt"],
        cwd=workspace,
        env=env_for(home),
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stderr is not None
    line = ""
    while not line.startswith("session "):
        line = child.stderr.readline()
        assert line, "tether ended before it named its session"
    sid = session_id(line)  # the session is stored: its first snapshot is being taken
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    loaded = tether(home, "sessions", "show", sid)
    assert loaded.returncode == 0, loaded.stderr
    again = run(home, workspace, "--resume", sid, "$ echo after > after.txt")
    assert again.returncode == 0, again.stderr
    assert (workspace / "after.txt").exists()
    last = sum(record["type"] == "turn/start" for record in events(home, sid))
    rewound = tether(home, "sessions", "rewind", sid, "--to", str(last), "--code")
    assert rewound.returncode == 0, rewound.stderr
    assert not (workspace / "after.txt").exists()
