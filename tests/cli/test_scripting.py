"""Scripts drive ``tether run``: the task on stdin, JSON results, and finding sessions to resume.

Real subprocesses on the offline model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.cli.test_commands import env_for, session_id, tether


def run_bytes(home: Path, *args: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "run", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        env=env_for(home),
        check=False,
    )


def stored_prompts(home: Path, sid: str) -> list[str]:
    exported = tether(home, "sessions", "export", sid).stdout.splitlines()
    records = [json.loads(line) for line in exported[1:]]
    return [
        block["text"]
        for record in records
        if record["type"] == "user/message"
        for block in record["data"]["content"]
    ]


def errors(stderr: str) -> list[str]:
    """What ``stderr`` says, the offline model's notice aside."""
    return [line for line in stderr.splitlines() if not line.startswith("tether: no model")]


def test_the_task_is_read_from_stdin_with_a_dash_or_no_argument(tmp_path: Path) -> None:
    dashed = run_bytes(tmp_path, "-", stdin=b"from a pipe\n")
    assert dashed.returncode == 0, dashed.stderr
    assert b'You said: "from a pipe' in dashed.stdout
    bare = run_bytes(tmp_path, stdin=b"caf\xe9 and more")
    assert bare.returncode == 0, bare.stderr
    assert stored_prompts(tmp_path, session_id(bare.stderr.decode())) == ["caf\ufffd and more"]


def test_an_empty_stdin_is_an_empty_task(tmp_path: Path) -> None:
    empty = run_bytes(tmp_path, "-", stdin=b"  \n")
    assert empty.returncode == 2
    assert errors(empty.stderr.decode()) == ["tether: error: run: the task is empty"]


def test_json_output_is_one_result_with_the_answer_and_the_tool_calls(tmp_path: Path) -> None:
    result = tether(tmp_path, "run", "--output-format", "json", "$ echo scripted")
    assert result.returncode == 0, result.stderr
    [line] = result.stdout.splitlines()
    parsed = json.loads(line)
    assert parsed["type"] == "result" and parsed["version"] == 1
    assert parsed["session_id"] == session_id(result.stderr)
    assert parsed["stop_reason"] == "completed" and parsed["cause"] is None
    assert parsed["is_error"] is False and parsed["error"] is None
    assert parsed["exit_code"] == 0 and parsed["stored"] is True
    [call] = parsed["tool_calls"]
    assert call["name"] == "bash" and call["arguments"]["command"] == "echo scripted"
    assert call["is_error"] is False and "scripted" in call["output"]
    assert parsed["answer"] and "scripted" in parsed["answer"]


def test_stream_json_prints_every_event_then_the_result(tmp_path: Path) -> None:
    result = tether(tmp_path, "run", "--output-format", "stream-json", "hello stream")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    *events, last = lines
    assert all("/" in event["type"] for event in events)
    assert [event["seq"] for event in events] == list(range(len(events)))
    assert events[-1]["type"] == "turn/end" and last["type"] == "result"
    sid = session_id(result.stderr)
    exported = tether(tmp_path, "sessions", "export", sid).stdout.splitlines()
    assert [json.loads(line) for line in exported[1:]] == events
    assert 'You said: "hello stream"' in last["answer"]


def test_resume_takes_a_unique_prefix_and_continue_takes_the_latest_of_the_cwd(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    first = session_id(tether(tmp_path, "run", "--cwd", str(work), "one").stderr)
    second = session_id(tether(tmp_path, "run", "--cwd", str(work), "two").stderr)
    elsewhere = session_id(tether(tmp_path, "run", "three").stderr)
    assert len({first, second, elsewhere}) == 3

    by_prefix = tether(tmp_path, "run", "--resume", first[:-3], "again")
    assert by_prefix.returncode == 0, by_prefix.stderr
    assert session_id(by_prefix.stderr) == first
    continued = tether(tmp_path, "run", "--cwd", str(work), "--continue", "and again")
    assert continued.returncode == 0, continued.stderr
    # ``first`` was resumed last, so it is the most recently active one there.
    assert session_id(continued.stderr) == first
    assert stored_prompts(tmp_path, first) == ["one", "again", "and again"]


def test_a_session_that_is_not_there_is_a_bad_argument_in_one_line(tmp_path: Path) -> None:
    session_id(tether(tmp_path, "run", "one").stderr)
    session_id(tether(tmp_path, "run", "two").stderr)
    unknown = tether(tmp_path, "run", "--resume", "19990101-000000-00000000", "x")
    assert unknown.returncode == 2
    assert errors(unknown.stderr) == [
        "tether: error: no stored session '19990101-000000-00000000' (see: tether sessions list)"
    ]
    ambiguous = tether(tmp_path, "run", "--resume", "2", "x")
    assert ambiguous.returncode == 2
    assert "matches 2 sessions" in ambiguous.stderr and "usage:" not in ambiguous.stderr
    invalid = tether(tmp_path, "run", "--resume", "../etc", "x")
    assert invalid.returncode == 2 and "is not a session id" in invalid.stderr
    nothing = tether(tmp_path, "run", "--cwd", str(tmp_path), "--continue", "x")
    assert nothing.returncode == 2
    assert f"no stored session in {tmp_path} to continue" in nothing.stderr
