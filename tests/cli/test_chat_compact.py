"""``/compact`` in ``tether chat`` on a real pseudo-terminal: it compacts; Ctrl-C cancels it."""

from __future__ import annotations

import json
import os
import pty
import sys
from pathlib import Path
from typing import Any

from tests.cli.test_chat_terminal import expect
from tests.cli.test_commands import env_for


def chat(tmp_path: Path, *options: str, model: str | None = None) -> tuple[int, int]:
    """Start ``tether OPTIONS chat [--model MODEL]`` on a pseudo-terminal."""
    chosen = ["--model", model] if model else []
    argv = [sys.executable, "-m", "tether.cli.main", *options, "chat", *chosen]
    env = env_for(tmp_path)
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(sys.executable, argv, env)
    return pid, fd


def events_of(tmp_path: Path, session_id: str) -> list[dict[str, Any]]:
    path = tmp_path / "sessions" / f"{session_id}.jsonl"
    return [json.loads(line) for line in path.open()][1:]


def quit_chat(pid: int, fd: int) -> None:
    os.write(fd, b"/quit\r")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_compact_summarizes_the_older_turns_and_says_so(tmp_path: Path) -> None:
    pid, fd = chat(tmp_path)
    seen: list[str] = []
    try:
        # The prompt is drawn while tether starts; the banner names the session.
        session_id = expect(fd, "lists the commands)", seen).split("session ", 1)[1].split()[0]
        expect(fd, "you>", seen)
        # The line editor draws the prompt again with each key typed: the
        # end of a turn is its usage line, and the prompt after it.
        os.write(fd, b"first question\r")
        expect(fd, "tokens: ", seen)
        expect(fd, "you>", seen)
        os.write(fd, b"second question\r")
        expect(fd, "tokens: ", seen)
        expect(fd, "you>", seen)
        os.write(fd, b"/compact\r")
        shown = expect(fd, "the log keeps them)", seen)
        assert "(compacting the conversation" in shown
        assert "(context compacted: events 0 to " in shown
        expect(fd, "you>", seen)
        quit_chat(pid, fd)
    finally:
        os.close(fd)
    events = events_of(tmp_path, session_id)
    (compacted,) = [e for e in events if e["type"] == "context/compacted"]
    assert compacted["data"]["trigger"] == "manual"
    assert compacted["data"]["first_seq"] == 0
    # The most recent turn stays verbatim; the log still holds both prompts.
    prompts = [e for e in events if e["type"] == "user/message"]
    assert len(prompts) == 2
    assert compacted["data"]["last_seq"] < prompts[1]["seq"]


def test_ctrl_c_cancels_a_compaction_and_the_chat_goes_on(tmp_path: Path) -> None:
    overlay = tmp_path / "slow.yml"
    overlay.write_text("plugins:\n  - id: slow\n    plugin: tests.cli.slow_model\n")
    pid, fd = chat(tmp_path, "--config", str(overlay), model="slow")
    seen: list[str] = []
    try:
        # The prompt is drawn while tether starts; the banner names the session.
        session_id = expect(fd, "lists the commands)", seen).split("session ", 1)[1].split()[0]
        expect(fd, "you>", seen)
        # The slow model answers only to a cancel: one cancelled turn gives a closed step.
        os.write(fd, b"first\r")
        expect(fd, "thinking about it", seen)
        os.write(fd, b"\x03")
        expect(fd, "(turn stopped: cancelled by user)", seen)
        expect(fd, "you>", seen)
        os.write(fd, b"/compact\r")
        expect(fd, "(compacting the conversation", seen)
        os.write(fd, b"\x03")
        expect(fd, "(compaction cancelled; the conversation is unchanged)", seen)
        expect(fd, "you>", seen)
        quit_chat(pid, fd)
    finally:
        os.close(fd)
    events = events_of(tmp_path, session_id)
    assert not [e for e in events if e["type"] == "context/compacted"]
