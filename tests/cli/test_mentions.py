"""``@path`` in a chat prompt attaches the file, or a directory's listing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.cli.test_commands import env_for
from tether.cli.mentions import MAX_ATTACHED_BYTES, attach_mentions


def test_a_mentioned_file_and_directory_are_attached_once_each(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("x = 1\ny = 2\n")
    (tmp_path / "src" / "pkg").mkdir()
    attached = attach_mentions("look at @src/a.py, and @src (also @src/a.py)", tmp_path)
    uri = (tmp_path / "src" / "a.py").as_uri()
    assert [block.text for block in attached.blocks] == [
        f'<resource uri="{uri}">\nx = 1\ny = 2\n\n</resource>',
        f'<resource uri="{(tmp_path / "src").as_uri()}">\na.py\npkg/\n</resource>',
    ]
    assert attached.notes == ("attached @src/a.py (2 lines)", "attached @src (2 entries)")


def test_words_that_name_nothing_stay_prose_and_big_or_binary_files_are_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "big.log").write_bytes(b"x" * (MAX_ATTACHED_BYTES + 1))
    (tmp_path / "image.bin").write_bytes(b"\xff\xd8\xff\x00")
    attached = attach_mentions("ask @someone about @big.log and @image.bin", tmp_path)
    assert attached.blocks == ()
    assert attached.notes == (
        f"@big.log not attached: {MAX_ATTACHED_BYTES + 1:,} bytes, more than 256 KiB",
        "@image.bin not attached: not UTF-8 text",
    )


def test_the_chat_sends_a_mentioned_file_with_the_prompt(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("the secret word is plum\n")
    result = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "chat"],
        input="what is in @notes.txt?\n",
        capture_output=True,
        text=True,
        cwd=work,
        env=env_for(tmp_path),
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "(attached @notes.txt (1 line))" in result.stderr
    [log] = (tmp_path / "sessions").glob("*.jsonl")
    records = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    [inserted] = [r for r in records if r["type"] == "agent/inbox/spliced"][:1]
    content = inserted["data"]["messages"][0]["content"]
    assert content[0] == {"type": "text", "text": "what is in @notes.txt?"}
    assert "the secret word is plum" in content[1]["text"]
