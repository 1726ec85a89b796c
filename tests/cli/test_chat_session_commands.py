"""Chat's `/model`, `/clear`, `/new`, `/diff`, `/rewind`, `/fork` and `!command`, on a real
pseudo-terminal."""

from __future__ import annotations

import time
from pathlib import Path

from tests.cli.terminal import CTRL_C, Terminal
from tests.cli.test_chat_editor import events_of, started


def test_a_command_run_with_a_bang_is_shown_and_goes_with_the_next_prompt(
    tmp_path: Path,
) -> None:
    chat = Terminal(tmp_path)
    try:
        session_id = started(chat)
        chat.send(b"!echo hi; exit 3\r")
        shown = chat.expect("(its output goes with your next prompt)")
        assert "← $ echo hi; exit 3 failed (exit code 3, 1 line) #1" in shown
        assert "│ hi" in shown
        chat.send(b"what did I run?\r")
        chat.expect("tokens: ")
        chat.expect("you>")
        chat.send(b"and now?\r")  # the output went with one prompt only
        chat.expect("tokens: ")
        chat.expect("you>")
        chat.send(b"/quit\r")
        assert chat.finish() == 0
    finally:
        chat.close()
    sent = [
        [block["text"] for block in event["data"]["content"]]
        for event in events_of(tmp_path, session_id)
        if event["type"] == "user/message"
    ]
    assert sent[0][0].startswith("I ran this shell command myself")
    assert "$ echo hi; exit 3\nhi" in sent[0][0] and "exit code 3" in sent[0][0]
    assert sent[0][1:] == ["what did I run?"]
    assert sent[1] == ["and now?"]


def test_ctrl_c_stops_a_bang_command_and_everything_it_started(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    chat = Terminal(tmp_path)
    try:
        started(chat)
        chat.send(f"!sleep 60 & echo $! > {pids}; sleep 60\r".encode())
        written(pids)
        chat.send(CTRL_C)
        shown = chat.expect("(its output goes with your next prompt)")
        assert "(stopping the command)" in shown and "stopped" in shown
        chat.send(b"/quit\r")
        assert chat.finish() == 0
    finally:
        chat.close()
    orphan = int(pids.read_text())
    assert ended(orphan), f"process {orphan} outlived the stopped command"


def written(path: Path, within: float = 10) -> None:
    """Wait (bounded) until a command has written its pid to ``path``."""
    deadline = time.monotonic() + within
    while not (path.exists() and path.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)


def ended(pid: int, within: float = 5) -> bool:
    """Whether ``pid`` ends within ``within`` seconds."""
    deadline = time.monotonic() + within
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not running(pid)


def running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def test_model_switches_the_next_request_and_refuses_what_it_cannot_reach(
    tmp_path: Path,
) -> None:
    chat = Terminal(tmp_path)
    try:
        session_id = started(chat)
        chat.send(b"/model nope:x\r")
        chat.expect("cannot switch to 'nope:x', whose provider is not configured here")
        chat.send(b"/model offline:two\r")
        chat.expect("(the next request goes to offline:two)")
        chat.send(b"/model\r")
        chat.expect("* offline:two (the next request's)")
        chat.send(b"/new\r")  # the new session goes on with the model in use
        banner = chat.expect("lists the commands)")
        chat.expect("you>")
        assert "· offline:two" in banner
        new_id = banner.rsplit("session ", 1)[1].split()[0]
        chat.send(b"/quit\r")
        assert chat.finish() == 0
    finally:
        chat.close()
    assert new_id != session_id
    configs = [
        event["data"]
        for event in events_of(tmp_path, session_id)
        if event["type"] == "session/config"
    ]
    assert configs == [{"option": "model", "value": "offline:two"}]
    assert (tmp_path / "sessions" / f"{new_id}.jsonl").exists()


def test_clear_is_logged_and_diff_shows_file_tool_and_shell_changes(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "g.txt").write_text("one\ntwo\nthree\n")
    chat = Terminal(tmp_path, cwd=work)
    try:
        session_id = started(chat)
        chat.send(b"/diff\r")
        chat.expect("(no file was changed by the agent's file tools")
        chat.send(b"edit g.txt: two => TWO\r")
        chat.expect("tokens: ")
        chat.expect("you>")
        chat.send(b"$ echo made > made.txt\r")
        chat.expect("tokens: ")
        chat.expect("you>")
        chat.send(b"/diff\r")
        chat.expect("diff --git a/g.txt b/g.txt")
        assert "+TWO" in chat.expect(" one\n-two\n+TWO")
        chat.expect("diff --git a/made.txt b/made.txt")
        chat.expect("+made")
        chat.send(b"/diff 2\r")
        chat.expect("diff --git a/made.txt b/made.txt")
        chat.send(b"/diff 9\r")
        chat.expect("the session has no turn 9")
        chat.send(b"/clear\r")
        chat.expect("(the conversation is cleared")
        chat.send(b"/quit\r")
        assert chat.finish() == 0
    finally:
        chat.close()
    types = [event["type"] for event in events_of(tmp_path, session_id)]
    assert types[-1] == "history/cleared"


def test_rewind_lists_turns_restores_the_files_and_goes_on_in_a_branch(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "g.txt").write_text("one\n")
    chat = Terminal(tmp_path, cwd=work)
    try:
        session_id = started(chat)
        chat.send(b"$ echo two >> g.txt\r")
        chat.expect("tokens: ")
        chat.expect("you>")
        chat.send(b"/rewind\r")
        chat.expect("1  $ echo two >> g.txt")
        chat.expect("pick: TURN")
        chat.send(b"\r")
        chat.expect("(no rewind)")
        chat.send(b"/rewind\r")
        chat.expect("pick: TURN")
        chat.send(b"1\r")
        shown = chat.expect("(its first ")
        # The workspace line is longer than the terminal (100 columns): it wraps there.
        assert all(len(line) <= 100 for line in shown.splitlines())
        unwrapped = " ".join(shown.split())
        assert ": back to the start of turn 1 (1 file(s) written back" in unwrapped
        assert f"a branch of {session_id} before turn 1" in unwrapped
        branch = shown.split("session ")[-1].split(":")[0]
        chat.expect("you>")
        assert (work / "g.txt").read_text() == "one\n"
        chat.send(b"/fork\r")
        chat.expect(f"a branch of {branch} at its end")
        chat.expect("you>")
        chat.send(b"/quit\r")
        assert chat.finish() == 0
    finally:
        chat.close()
    parent = events_of(tmp_path, session_id)
    assert [e["type"] for e in parent].count("turn/start") == 1
    first_line = (tmp_path / "sessions" / f"{branch}.jsonl").open().readline()
    assert f'"parent":"{session_id}"' in first_line.replace(" ", "")


def test_a_bang_command_dies_with_a_killed_chat(tmp_path: Path) -> None:
    import os
    import signal

    pids = tmp_path / "pids"
    chat = Terminal(tmp_path)
    try:
        started(chat)
        chat.send(f"!echo $$ > {pids}; sleep 60\r".encode())
        written(pids)
        os.kill(chat.pid, signal.SIGKILL)  # no handler runs: the parent-death signal must
        chat.finish()
    finally:
        chat.close()
    shell = int(pids.read_text())
    if not ended(shell):
        os.killpg(shell, signal.SIGKILL)
        raise AssertionError(f"the command's shell {shell} outlived the killed chat")


def test_a_bang_command_s_long_output_is_kept_whole(tmp_path: Path) -> None:
    chat = Terminal(tmp_path)
    try:
        started(chat)
        # 1.5 MB: more than the executor keeps in memory, so it comes back from its spill file.
        chat.send(b"!yes abcdefgh | head -c 1500000; echo; echo the-end\r")
        shown = chat.expect("(its output goes with your next prompt)")
        assert "done (exit code 0, 166668 lines)" in shown
        assert "│ the-end" in shown
        chat.send(b"/quit\r")
        assert chat.finish() == 0
    finally:
        chat.close()
