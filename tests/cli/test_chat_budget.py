"""The spend budget in ``tether chat`` on a real pseudo-terminal: the receipt and the stop."""

from __future__ import annotations

import os
import pty
import sys
from pathlib import Path

from tests.cli.test_chat_compact import events_of, quit_chat
from tests.cli.test_chat_terminal import expect
from tests.cli.test_commands import env_for


def test_chat_says_which_budget_ran_out_and_stays_usable(tmp_path: Path) -> None:
    # Every request reserves its output (8,192 tokens) at least: none fits in 50.
    argv = [sys.executable, "-m", "tether.cli.main", "chat", "--model", "offline"]
    argv += ["--max-budget-tokens", "50"]
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(sys.executable, argv, env_for(tmp_path))
    seen: list[str] = []
    try:
        session_id = expect(fd, "lists the commands)", seen).split("session ", 1)[1].split()[0]
        expect(fd, "you>", seen)
        os.write(fd, b"hello\r")
        expect(fd, "so it was not sent", seen)
        expect(fd, "stopped: the spend budget is exhausted", seen)
        expect(fd, "you>", seen)
        os.write(fd, b"/cost\r")
        expect(fd, "budget: 0 tokens of 50 tokens this session", seen)
        expect(fd, "you>", seen)
        quit_chat(pid, fd)
    finally:
        os.close(fd)
    events = events_of(tmp_path, session_id)
    (receipt,) = [e["data"] for e in events if e["type"] == "budget/exhausted"]
    assert (receipt["budget"], receipt["unit"], receipt["limit"]) == ("session", "tokens", 50)
    assert not [e for e in events if e["type"] == "assistant/message"]
    assert [e["data"]["reason"]["kind"] for e in events if e["type"] == "turn/end"] == ["budget"]
