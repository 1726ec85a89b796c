"""``/init``: the agent is asked to write (or improve) the project's AGENTS.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.cli.test_commands import env_for
from tether.plugins.init_command import init_prompt


def test_the_prompt_asks_to_write_a_new_file_or_improve_the_one_there(tmp_path: Path) -> None:
    assert init_prompt(tmp_path, "").startswith("Write AGENTS.md: ")
    assert "Keep what the existing file says" not in init_prompt(tmp_path, "")
    (tmp_path / "AGENTS.md").write_text("# notes\n")
    improving = init_prompt(tmp_path, "  focus on the tests ")
    assert improving.startswith("Improve AGENTS.md: ")
    assert improving.endswith(
        "Keep what the existing file says that is still true.\nfocus on the tests"
    )


def test_init_in_the_chat_queues_the_prompt_as_a_turn_of_the_session(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "chat"],
        input="/init\n/quit\n",
        capture_output=True,
        text=True,
        cwd=work,
        env=env_for(tmp_path),
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert f"Asked the agent to write {work / 'AGENTS.md'}." in result.stdout + result.stderr
    [log] = (tmp_path / "sessions").glob("*.jsonl")
    records = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    prompts = [
        message["content"][0]["text"]
        for r in records
        if r["type"] == "agent/inbox/spliced" and r["data"]["op"] == "insert"
        for message in r["data"]["messages"]
    ]
    assert len(prompts) == 1 and prompts[0].startswith("Write AGENTS.md: ")
    assert sum(r["type"] == "turn/end" for r in records) == 1
