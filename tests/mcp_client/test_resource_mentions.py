"""``@server:uri`` in a chat prompt attaches the MCP server's resource."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.cli.test_commands import env_for
from tests.mcp_client.support import SDK_SERVER


def test_the_chat_sends_a_mentioned_resource_and_says_why_another_is_not_attached(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    config = tmp_path / "servers.yml"
    server = {"command": sys.executable, "args": [SDK_SERVER]}
    config.write_text(
        f"plugins:\n  - id: mcp\n    config:\n      servers: {json.dumps({'t': server})}\n"
    )
    prompt = "compare @t:notes://today, @t:notes://nothing, @t:notes://logo and @x:y://z"
    result = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "--config", str(config), "chat"],
        input=prompt + "\n",
        capture_output=True,
        text=True,
        cwd=work,
        env=env_for(tmp_path),
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "(attached @t:notes://today (1 line))" in result.stderr
    assert "(@t:notes://nothing not attached: Unknown resource: notes://nothing)" in result.stderr
    assert "(@t:notes://logo not attached: not text (image/png))" in result.stderr
    assert "@x:y://z" not in result.stderr.replace(prompt, "")
    [log] = (tmp_path / "sessions").glob("*.jsonl")
    records = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    [inserted] = [r for r in records if r["type"] == "agent/inbox/spliced"][:1]
    content = inserted["data"]["messages"][0]["content"]
    assert content == [
        {"type": "text", "text": prompt},
        {"type": "text", "text": '<resource uri="notes://today">\nbuy milk\n</resource>'},
    ]
