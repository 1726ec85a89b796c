"""``tether chat`` in a real pseudo-terminal: a prompt, a queued follow-up, Ctrl-C."""

import json
import os
import pty
import select
import sys
import time
from pathlib import Path

from tests.cli.test_commands import env_for


def expect(fd: int, text: str, seen: list[str], timeout: float = 30) -> str:
    """Read the terminal until ``text`` has appeared (fail after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while text not in "".join(seen):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{text!r} never appeared in {''.join(seen)!r}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            seen.append(chunk.decode(errors="replace"))
    output = "".join(seen)
    seen.clear()
    seen.append(output[output.index(text) + len(text) :])
    return output


def test_chat_prompt_queued_followup_and_ctrl_c(tmp_path: Path) -> None:
    overlay = tmp_path / "slow.yml"
    overlay.write_text("plugins:\n  - id: slow\n    plugin: tests.cli.slow_model\n")
    argv = [
        sys.executable,
        "-m",
        "tether.cli.main",
        "--config",
        str(overlay),
        "chat",
        "--model",
        "slow",
    ]
    env = env_for(tmp_path)
    pid, fd = pty.fork()
    if pid == 0:  # the child: tether chat on the terminal
        os.execve(sys.executable, argv, env)
    seen: list[str] = []
    try:
        # The prompt is drawn while tether starts; the banner names the session.
        session_line = expect(fd, "lists the commands)", seen)
        session_id = session_line.split("session ", 1)[1].split()[0]
        expect(fd, "you>", seen)
        os.write(fd, b"first prompt\r")
        expect(fd, "thinking about it", seen)
        os.write(fd, b"queued follow-up\r")
        expect(fd, "(queued", seen)
        os.write(fd, b"\x03")  # Ctrl-C: cancels the running turn, stays in the chat
        expect(fd, "(cancelled)", seen)
        expect(fd, "you>", seen)
        os.write(fd, b"/quit\r")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        os.close(fd)
    records = [json.loads(line) for line in (tmp_path / "sessions" / f"{session_id}.jsonl").open()]
    events = records[1:]
    ends = [e["data"]["reason"] for e in events if e["type"] == "turn/end"]
    assert ends == [{"kind": "aborted", "cause": "user"}]
    cancelled = [
        e for e in events if e["type"] == "agent/inbox/spliced" and e["data"]["op"] == "cancel"
    ]
    assert cancelled, "the queued follow-up was cancelled with the turn"
    prompts = [
        block["text"]
        for e in events
        if e["type"] == "user/message"
        for block in e["data"]["content"]
    ]
    assert prompts == ["first prompt"]
