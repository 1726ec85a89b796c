"""An MCP server's prompts as slash commands in ``tether chat`` on a real terminal."""

from __future__ import annotations

import json
import os
import pty
import sys
from pathlib import Path

from tests.cli.test_chat_terminal import expect
from tests.cli.test_commands import env_for
from tests.mcp_client.support import SDK_SERVER


def test_the_chat_offers_a_prompt_command_runs_it_and_refuses_bad_arguments(
    tmp_path: Path,
) -> None:
    config = tmp_path / "servers.yml"
    server = {"command": sys.executable, "args": [SDK_SERVER]}
    config.write_text(
        f"plugins:\n  - id: mcp\n    config:\n      servers: {json.dumps({'t': server})}\n"
    )
    argv = [sys.executable, "-m", "tether.cli.main", "--config", str(config), "chat"]
    pid, fd = pty.fork()
    if pid == 0:  # the child: tether chat on the terminal
        os.execve(sys.executable, argv, env_for(tmp_path))
    seen: list[str] = []
    try:
        session_line = expect(fd, "lists the commands)", seen)
        session_id = session_line.split("session ", 1)[1].split()[0]
        expect(fd, "you>", seen)
        os.write(fd, b"/help\r")
        expect(fd, "/mcp__t__review topic=\u2026 [tone=\u2026]", seen)
        expect(fd, "you>", seen)
        os.write(fd, b"/mcp__t__review\r")
        expect(fd, "prompt 'review' needs topic", seen)
        expect(fd, "you>", seen)
        os.write(fd, b'/mcp__t__review "the build" terse\r')
        expect(fd, "Sent prompt 'review' of MCP server 't' (1 message(s)).", seen)
        expect(fd, "you>", seen)
        os.write(fd, b"/quit\r")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        os.close(fd)
    records = [json.loads(line) for line in (tmp_path / "sessions" / f"{session_id}.jsonl").open()]
    sent = [
        block["text"]
        for record in records[1:]
        if record["type"] == "agent/inbox/spliced"
        for message in record["data"]["messages"]
        for block in message.get("content", [])
    ]
    assert "Review the build in a terse tone." in sent
