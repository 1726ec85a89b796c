"""``tether run --mode ask`` in a real pseudo-terminal: each tool call is put to the person."""

from __future__ import annotations

import json
import os
import pty
import sys
from pathlib import Path

from tests.cli.test_chat_terminal import expect
from tests.cli.test_commands import env_for, session_id, tether


def run_on_a_terminal(home: Path, cwd: Path, *args: str) -> tuple[int, int]:
    argv = [sys.executable, "-m", "tether.cli.main", "run", "--mode", "ask", *args]
    pid, fd = pty.fork()
    if pid == 0:  # the child: tether run on the terminal
        os.chdir(cwd)
        os.execve(sys.executable, argv, env_for(home))
    return pid, fd


def exit_status(pid: int) -> int:
    _pid, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def results(home: Path, sid: str) -> list[dict[str, object]]:
    exported = tether(home, "sessions", "export", sid).stdout.splitlines()
    records = [json.loads(line) for line in exported[1:]]
    return [r["data"] for r in records if r["type"] == "tool/result"]


def test_a_refused_call_does_not_run_and_the_model_is_told(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    pid, fd = run_on_a_terminal(tmp_path / "home", work, "$ touch made-it")
    seen: list[str] = []
    shown = expect(fd, "allow this bash call? [y]es / [n]o / [a]lways: ", seen)
    assert "[ask] bash touch made-it" in shown
    os.write(fd, b"n\n")
    assert exit_status(pid) == 0
    os.close(fd)
    assert not (work / "made-it").exists()
    sid = session_id(shown)
    [result] = results(tmp_path / "home", sid)
    assert result["is_error"] is True and "did not allow" in str(result["content"])


def test_an_allowed_edit_shows_its_diff_first_and_runs(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("hello world\n")
    pid, fd = run_on_a_terminal(tmp_path / "home", work, "edit notes.txt: world => tether")
    seen: list[str] = []
    # The offline model reads the file first, then edits it: two questions.
    expect(fd, "allow this read call?", seen)
    os.write(fd, b"y\n")
    shown = expect(fd, "allow this edit call?", seen)
    assert "-hello world" in shown and "+hello tether" in shown
    os.write(fd, b"a\n")
    assert exit_status(pid) == 0
    os.close(fd)
    assert (work / "notes.txt").read_text() == "hello tether\n"


def test_ask_mode_without_a_terminal_refuses_in_one_line(tmp_path: Path) -> None:
    refused = tether(tmp_path, "run", "--mode", "ask", "$ true", input="")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        "tether: error: run: --mode ask asks on the terminal, and stdin is not one; "
        "give --mode auto"
    )
