"""Scripts drive ``tether run``: the task on stdin, JSON results, and finding sessions to resume.

Real subprocesses on the offline model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.cli import broken_model
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
    init, *events, last = lines
    assert init["type"] == "init"
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


# -- finding sessions -------------------------------------------------------------


def listed_ids(home: Path, *args: str) -> list[str]:
    result = tether(home, "sessions", "list", *args)
    assert result.returncode == 0, result.stderr
    return [line.split("\t")[0] for line in result.stdout.splitlines()]


def test_sessions_list_filters_by_cwd_and_text_and_is_ordered_by_last_activity(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    old = session_id(tether(tmp_path, "run", "--cwd", str(work), "about penguins").stderr)
    new = session_id(tether(tmp_path, "run", "--cwd", str(work), "about otters").stderr)
    other = session_id(tether(tmp_path, "run", "about walruses").stderr)
    assert listed_ids(tmp_path) == [other, new, old]
    # A later prompt makes the oldest session the most recently active.
    assert tether(tmp_path, "run", "--resume", old, "and PUFFINS").returncode == 0
    assert listed_ids(tmp_path) == [old, other, new]
    assert listed_ids(tmp_path, "--cwd", str(work)) == [old, new]
    assert listed_ids(tmp_path, "--limit", "2") == [old, other]
    assert listed_ids(tmp_path, "--search", "OTTERS") == [new]  # the title
    assert listed_ids(tmp_path, "--search", "puffins") == [old]  # a later prompt
    assert listed_ids(tmp_path, "--search", "nothing like it") == []
    bad_limit = tether(tmp_path, "sessions", "list", "--limit", "0")
    assert bad_limit.returncode == 2 and "must be at least 1" in bad_limit.stderr


def test_an_exported_session_imports_into_another_home_as_it_was(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    sid = session_id(tether(source, "run", "$ echo moved").stderr)
    exported = tether(source, "sessions", "export", sid).stdout
    lines = exported.splitlines()
    # A reasoning block, shown by ``show --thinking`` only.
    message = next(i for i, line in enumerate(lines) if '"assistant/message"' in line)
    record = json.loads(lines[message])
    record["data"]["content"].insert(
        0, {"type": "reasoning", "text": "let me think", "signature": None}
    )
    lines[message] = json.dumps(record)
    export_file = tmp_path / "export.jsonl"
    export_file.write_text("\n".join(lines) + "\n")

    imported = tether(target, "sessions", "import", str(export_file))
    assert imported.returncode == 0, imported.stderr
    assert f"imported {sid}" in imported.stderr
    again = tether(target, "sessions", "export", sid).stdout.splitlines()
    assert [json.loads(line) for line in again] == [json.loads(line) for line in lines]
    plain = tether(target, "sessions", "show", sid).stdout
    thinking = tether(target, "sessions", "show", sid, "--thinking").stdout
    assert "let me think" not in plain and "thinking: let me think" in thinking
    resumed = tether(target, "run", "--resume", sid, "go on")
    assert resumed.returncode == 0, resumed.stderr

    twice = tether(target, "sessions", "import", str(export_file))
    assert twice.returncode == 1
    assert errors(twice.stderr) == [
        f"tether: session {sid} is already stored (delete it first to replace it)"
    ]


def test_a_file_that_is_not_an_export_is_refused_with_its_line(tmp_path: Path) -> None:
    sid = session_id(tether(tmp_path / "a", "run", "hello").stderr)
    lines = tether(tmp_path / "a", "sessions", "export", sid).stdout.splitlines()
    cases = {
        "empty.jsonl": ("", "empty; expected a session exported as JSON Lines"),
        "text.jsonl": ("hello\n", "line 1: not JSON"),
        "noheader.jsonl": ('{"id": 1}\n', 'line 1: expected the header line {"header": {…}}'),
        "badline.jsonl": ("\n".join([lines[0], lines[1], "{oops"]) + "\n", "line 3: not an event"),
        "gap.jsonl": ("\n".join([lines[0], lines[2]]) + "\n", "seq"),
    }
    for name, (text, reason) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        result = tether(tmp_path / "b", "sessions", "import", str(path))
        assert result.returncode == 1, (name, result.stderr)
        [line] = errors(result.stderr)
        assert line.startswith("tether: ") and reason in line, (name, line)
        assert "Traceback" not in result.stderr
    missing = tether(tmp_path / "b", "sessions", "import", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 1 and "No such file" in missing.stderr
    assert listed_ids(tmp_path / "b") == []


def test_resume_uses_the_model_given_and_says_when_the_sessions_model_is_not_here(
    tmp_path: Path,
) -> None:
    overlay = tmp_path / "broken.yml"
    overlay.write_text(broken_model.OVERLAY)
    made = tether(tmp_path, "--config", str(overlay), "run", "--model", "broken", "hello")
    sid = session_id(made.stderr)
    # Here no plugin provides the session's model.
    missing = tether(tmp_path, "run", "--resume", sid, "again")
    assert missing.returncode == 1
    assert errors(missing.stderr)[-1] == (
        f"tether: session {sid} uses model 'broken', whose provider is not configured here; "
        "configure it, or give --model to continue with another"
    )
    switched = tether(tmp_path, "run", "--resume", sid, "--model", "offline", "again")
    assert switched.returncode == 0, switched.stderr
    assert "offline model" in switched.stdout
    exported = tether(tmp_path, "sessions", "export", sid).stdout.splitlines()
    records = [json.loads(line) for line in exported[1:]]
    [switch] = [r for r in records if r["type"] == "session/config"]
    assert switch["data"] == {"option": "model", "value": "offline"}
    # The switch is logged once; the next resume continues on the new model.
    again = tether(tmp_path, "run", "--resume", sid, "once more")
    assert again.returncode == 0, again.stderr
    exported = tether(tmp_path, "sessions", "export", sid).stdout.splitlines()
    assert sum('"session/config"' in line for line in exported) == 1


def test_sessions_list_is_tab_separated_for_scripts_and_aligned_on_a_terminal(
    tmp_path: Path,
) -> None:
    from tests.cli.terminal import Terminal

    sid = session_id(tether(tmp_path, "run", "a title " + "long " * 40).stderr)
    [line] = tether(tmp_path, "sessions", "list").stdout.splitlines()
    fields = line.split("\t")
    assert fields[0] == sid and fields[3] == "1" and fields[4].startswith("a title long")

    terminal = Terminal(tmp_path, "list", command="sessions")
    try:
        assert terminal.finish() == 0
        header, row = [line for line in terminal.output().splitlines() if line.strip()]
    finally:
        terminal.close()
    assert header.split() == ["ID", "CWD", "LAST", "ACTIVE", "TURNS", "TITLE"]
    assert row.startswith(sid) and row.index("a title") == header.index("TITLE")
    assert row[header.index("TURNS") + len("TURNS") - 1] == "1"  # right-aligned under it
    assert len(row) <= 100 and row.endswith("…")


def test_stream_json_starts_with_an_init_line(tmp_path: Path) -> None:
    result = tether(tmp_path, "run", "--output-format", "stream-json", "hi")
    assert result.returncode == 0, result.stderr
    init = json.loads(result.stdout.splitlines()[0])
    assert init["type"] == "init" and init["version"] == 1
    assert init["session_id"] == session_id(result.stderr)
    assert init["model"] == "offline" and init["cwd"] == os.getcwd()
    assert {"bash", "read", "edit", "task"} <= set(init["tools"])


def test_a_task_that_never_starts_still_has_its_json_result(tmp_path: Path) -> None:
    for output in ("json", "stream-json"):
        result = tether(tmp_path, "run", "--output-format", output, "--resume", "nosuchid", "hi")
        assert result.returncode == 2
        [line] = result.stdout.splitlines()
        parsed = json.loads(line)
        assert parsed["type"] == "result" and parsed["is_error"] is True
        assert parsed["session_id"] is None and parsed["exit_code"] == 2
        assert parsed["error"] == "no stored session 'nosuchid' (see: tether sessions list)"
