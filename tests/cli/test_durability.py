"""The command line's promises at the process boundary, tried as a user would.

Real subprocesses: two terminals on one session, a full or read-only disk, a
damaged database, a closed stdout, bytes that are not UTF-8, termination
signals. Every failure is one line on stderr and a nonzero exit, and nothing
stored earlier is damaged.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests import postgres
from tests.cli.test_commands import SLOW, env_for, session_id, slow_run, tether
from tests.mounts import fill, remount, tmpfs
from tether.persist.backends import JsonlBackend

SQLITE = "plugins:\n  - id: persistence\n    plugin: tether.persist.sqlite\n"


def overlay(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.yml"
    path.write_text(text)
    return str(path)


def only_line(stderr: str) -> str:
    """The one line a failure prints (the offline model's notice aside)."""
    lines = [line for line in stderr.splitlines() if not line.startswith("tether: no model")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def log_lines(home: Path, sid: str) -> list[dict[str, object]]:
    """Every line of the session's file, each checked to be UTF-8 JSON."""
    raw = (home / "sessions" / f"{sid}.jsonl").read_bytes()
    return [json.loads(line.decode("utf-8")) for line in raw.splitlines()]


def run_to(home: Path, stdout: int) -> subprocess.CompletedProcess[str]:
    """``tether run hello`` with its stdout on file descriptor ``stdout``."""
    return subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "run", "hello"],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=env_for(home),
        check=False,
    )


def last_reason(home: Path, sid: str) -> object:
    records = log_lines(home, sid)
    assert records[-1]["type"] == "turn/end"
    return records[-1]["data"]["reason"]  # type: ignore[index]


# -- acknowledgement --------------------------------------------------------------


def backend_args(tmp_path: Path, backend: str) -> list[str]:
    """The options that store sessions with ``backend`` (JSONL: none, the default)."""
    if backend == "sqlite":
        return ["--config", overlay(tmp_path, "sqlite", SQLITE)]
    if backend == "postgres":
        rows = "plugins:\n" + postgres.persistence_row(tmp_path)
        return ["--config", overlay(tmp_path, "postgres", rows)]
    return []


@pytest.mark.parametrize("backend", ["jsonl", "sqlite", "postgres"])
def test_run_exits_zero_only_with_the_completed_turn_stored(tmp_path: Path, backend: str) -> None:
    args = backend_args(tmp_path, backend)
    result = tether(tmp_path, *args, "run", "hello")
    assert result.returncode == 0, result.stderr
    sid = session_id(result.stderr)
    shown = tether(tmp_path, *args, "sessions", "show", sid)
    assert shown.returncode == 0, shown.stderr
    assert "you: hello" in shown.stdout and "turn ended" not in shown.stdout


@pytest.mark.parametrize("backend", ["jsonl", "sqlite", "postgres"])
def test_a_script_that_has_the_answer_has_a_stored_answer(tmp_path: Path, backend: str) -> None:
    args = backend_args(tmp_path, backend)
    for attempt in range(5):
        home = tmp_path / f"home-{attempt}"
        run = subprocess.Popen(
            [sys.executable, "-m", "tether.cli.main", *args, "run", "hello"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env_for(home),
        )
        assert run.stdout is not None
        first = run.stdout.read(1)  # the answer's first byte: SIGKILL at once
        run.kill()
        _out, err = run.communicate()
        assert first, err
        sid = session_id(err.decode())
        shown = tether(home, *args, "sessions", "show", sid)
        assert shown.returncode == 0, shown.stderr
        assert "you: hello" in shown.stdout and "turn ended" not in shown.stdout, shown.stdout


def read_until(stream: Any, marker: str) -> str:
    """Characters of ``stream`` up to and including the next ``marker``."""
    seen = ""
    while not seen.endswith(marker):
        char = stream.read(1)
        assert char, f"ended before {marker!r}: {seen!r}"
        seen += char
    return seen


@pytest.mark.timeout(60)
def test_chat_shows_the_next_prompt_only_once_the_turn_is_stored_and_never_runs_a_refused_one(
    tmp_path: Path,
) -> None:
    with tmpfs(tmp_path / "home", size="512k") as home:
        chat = subprocess.Popen(
            [sys.executable, "-m", "tether.cli.main", "chat"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env_for(home),
        )
        assert chat.stdin is not None and chat.stderr is not None
        try:
            read_until(chat.stderr, "you> ")
            chat.stdin.write("hello\n")
            chat.stdin.flush()
            assert "could not be stored" not in read_until(chat.stderr, "you> ")
            filler = fill(home)
            chat.stdin.write("full " + "x" * 8000 + "\n")
            chat.stdin.flush()
            before_prompt = read_until(chat.stderr, "you> ")
            assert "the prompt could not be stored: No space left on device" in before_prompt
            filler.unlink()
            chat.stdin.write("/quit\n")
            chat.stdin.flush()
            rest = chat.stderr.read()
            chat.wait(timeout=30)
        finally:
            chat.kill()
        assert chat.returncode == 0, rest
        stored = list((home / "sessions").glob("*.jsonl"))
        assert len(stored) == 1
        records = [json.loads(line) for line in stored[0].read_bytes().splitlines()]
        # The refused prompt never ran: one turn, and the log withdraws it.
        assert [r.get("type") for r in records].count("turn/end") == 1
        ops = [r["data"]["op"] for r in records if r.get("type") == "agent/inbox/spliced"]
        assert ops == ["insert", "claim", "insert", "discard"]


# -- one live owner ---------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_second_run_of_an_open_session_is_refused_and_the_first_keeps_its_turn(
    tmp_path: Path,
) -> None:
    slow = overlay(tmp_path, "slow", SLOW)
    started, sid = slow_run(tmp_path, slow)
    started.send_signal(signal.SIGINT)
    assert started.wait(timeout=30) == 130
    first, _ = slow_run(tmp_path, slow, "--resume", sid)
    try:
        second = tether(tmp_path, "run", "--resume", sid, "second")
        assert second.returncode == 1
        expected = f"tether: session {sid} is open in another process (pid {first.pid})"
        assert only_line(second.stderr) == expected
        path = tmp_path / "sessions" / f"{sid}.jsonl"
        live = (path.read_bytes(), path.stat().st_mtime_ns)
        shown = tether(tmp_path, "sessions", "show", sid)
        assert shown.returncode == 0 and "you: take your time" in shown.stdout
        # A reader of a live session shows its turn running, and writes nothing.
        assert "turn ended: interrupted" not in shown.stdout
        assert only_line(shown.stderr) == (
            f"tether: session {sid} is open in process {first.pid}; turn 2 is still running"
        )
        exported = tether(tmp_path, "sessions", "export", sid).stdout.splitlines()
        assert [json.loads(line) for line in exported[1:]] == log_lines(tmp_path, sid)[1:]
        assert (path.read_bytes(), path.stat().st_mtime_ns) == live
    finally:
        first.send_signal(signal.SIGINT)
        first.wait(timeout=30)
    assert first.returncode == 130
    # The reader repaired nothing: the live turn closed as its owner closed it.
    assert last_reason(tmp_path, sid) == {"kind": "aborted", "cause": "user"}
    assert [r.get("type") for r in log_lines(tmp_path, sid)].count("turn/end") == 2
    # Its owner gone, the session can be taken again.
    JsonlBackend(tmp_path).acquire_lease(sid).release()


# -- never run unpersisted ----------------------------------------------------------


def test_run_chat_and_acp_refuse_to_start_on_a_corrupt_database(tmp_path: Path) -> None:
    (tmp_path / "sessions.sqlite3").write_bytes(b"this is not a database" * 100)
    config = overlay(tmp_path, "sqlite", SQLITE)
    initialize = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
    for command in (["run", "hello"], ["chat"], ["acp"]):
        result = tether(tmp_path, "--config", config, *command, input=initialize)
        assert result.returncode == 1, (command, result.stderr)
        line = only_line(result.stderr)
        assert line.startswith("tether: sessions cannot be stored (") and "not a database" in line
    listed = tether(tmp_path, "--config", config, "sessions", "list")
    assert listed.returncode == 1
    assert only_line(listed.stderr).startswith("tether: stored sessions cannot be read (")


def test_run_refuses_to_start_on_a_read_only_or_full_home(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "home", size="256k") as home:
        remount(home, read_only=True)
        read_only = tether(home, "run", "hello")
        assert read_only.returncode == 1
        assert "Read-only file system" in only_line(read_only.stderr)
        remount(home, read_only=False)
        fill(home)
        full = tether(home, "run", "hello")
        assert full.returncode == 1
        assert "the disk is full" in only_line(full.stderr)


def as_root_bound_by_permissions() -> list[str]:
    """An argv prefix that runs a command as root without the capabilities
    that let root ignore file permissions, so a file mode gives a real EACCES.

    Skips the test (printing why) where that cannot be arranged.
    """
    if os.geteuid() != 0:
        reason = "not root: a file mode cannot be made to refuse this user's own files"
    elif shutil.which("setpriv") is None:
        reason = "setpriv (util-linux) is not installed"
    else:
        return ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    print(reason)
    pytest.skip(reason)


def tether_denied(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*as_root_bound_by_permissions(), sys.executable, "-m", "tether.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env_for(home),
        check=False,
    )


def test_a_home_without_write_permission_refuses_to_start_in_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o500)
    refused = tether_denied(home, "run", "hello")
    assert refused.returncode == 1
    line = only_line(refused.stderr)
    assert "refusing to run unpersisted" in line and "Permission denied" in line


def test_a_log_without_write_permission_fails_the_turn_in_one_line_and_keeps_the_log(
    tmp_path: Path,
) -> None:
    first = tether(tmp_path, "run", "first")
    assert first.returncode == 0, first.stderr
    sid = session_id(first.stderr)
    log_file = tmp_path / "sessions" / f"{sid}.jsonl"
    before = log_file.read_bytes()
    log_file.chmod(0o400)

    denied = tether_denied(tmp_path, "run", "--resume", sid, "second")

    assert denied.returncode == 1
    line = only_line(denied.stderr.replace(f"session {sid} · offline\n", ""))
    assert line == f"tether: session {sid} could not be stored: permission denied: {log_file}"
    assert log_file.read_bytes() == before
    log_file.chmod(0o600)
    shown = tether(tmp_path, "sessions", "show", sid)
    assert shown.returncode == 0 and 'You said: "first"' in shown.stdout
    assert "second" not in shown.stdout


def test_run_prints_nothing_of_a_turn_it_could_not_store(tmp_path: Path) -> None:
    """A log that refuses writes, then a disk with too little room for the turn:
    stdout (a pipe) stays empty, stderr says why in one line, exit 1."""
    first = tether(tmp_path, "run", "first")
    assert first.returncode == 0, first.stderr
    sid = session_id(first.stderr)
    log_file = tmp_path / "sessions" / f"{sid}.jsonl"
    log_file.chmod(0o400)
    denied = tether_denied(tmp_path, "run", "--resume", sid, "second")
    as_json = tether_denied(tmp_path, "run", "--output-format", "json", "--resume", sid, "third")
    log_file.chmod(0o600)
    assert (denied.returncode, denied.stdout) == (1, ""), denied.stderr
    result = json.loads(as_json.stdout)
    assert (as_json.returncode, result["stored"], result["answer"]) == (1, False, "")
    assert only_line(denied.stderr.replace(f"session {sid} · offline\n", "")) == (
        f"tether: session {sid} could not be stored: permission denied: {log_file}"
    )

    with tmpfs(tmp_path / "home", size="256k") as home:
        earlier = session_id(tether(home, "run", "earlier").stderr)
        filler = fill(home)
        os.truncate(filler, filler.stat().st_size - 4096)  # room for the start-up probe only
        full = tether(home, "run", "--resume", earlier, "long " + "x" * 8000)
    assert (full.returncode, full.stdout) == (1, ""), full.stderr
    assert only_line(full.stderr.replace(f"session {earlier} · offline\n", "")) == (
        f"tether: session {earlier} could not be stored: the disk is full"
    )


def test_run_prints_a_session_id_only_once_the_session_is_on_disk(tmp_path: Path) -> None:
    slow = overlay(tmp_path, "slow", SLOW)
    for attempt in range(5):
        home = tmp_path / f"home-{attempt}"
        run = subprocess.Popen(
            [
                *(sys.executable, "-m", "tether.cli.main", "--config", slow),
                *("run", "--model", "slow", "take your time"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env_for(home),
        )
        assert run.stderr is not None
        said = ""
        while not said.startswith("session "):
            said = read_until(run.stderr, "\n")
        run.kill()  # the moment the id is printed
        run.communicate()
        sid = session_id(said)
        assert JsonlBackend(home).load(sid).header["id"] == sid


# -- any input is stored ------------------------------------------------------------


def test_bytes_that_are_not_utf8_in_arguments_stdin_and_tool_output_are_stored(
    tmp_path: Path,
) -> None:
    argument = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "run", b"caf\xe9"],
        capture_output=True,
        env=env_for(tmp_path),
        check=False,
    )
    assert argument.returncode == 0, argument.stderr
    sid = session_id(argument.stderr.decode())
    assert "caf\ufffd" in json.dumps(log_lines(tmp_path, sid), ensure_ascii=False)

    tool = tether(tmp_path, "run", "$ printf 'caf\\351 au lait'")
    assert tool.returncode == 0, tool.stderr
    stored = log_lines(tmp_path, session_id(tool.stderr))
    results = [r for r in stored if r.get("type") == "tool/result"]
    assert "caf\ufffd au lait" in str(results[0]["data"])

    chat = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "chat"],
        input=b"th\xe9\n/quit\n",
        capture_output=True,
        env=env_for(tmp_path),
        check=False,
    )
    assert chat.returncode == 0, chat.stderr
    typed = log_lines(tmp_path, session_id(chat.stderr.decode()))
    assert "th\ufffd" in json.dumps(typed, ensure_ascii=False)


# -- disk and pipe errors -------------------------------------------------------------


def test_an_answer_written_to_a_full_device_or_a_closed_pipe_fails_in_one_line(
    tmp_path: Path,
) -> None:
    with open("/dev/full", "w") as full:
        result = run_to(tmp_path, full.fileno())
    assert result.returncode == 1
    line = [
        ln for ln in result.stderr.splitlines() if not ln.startswith(("session ", "tether: no"))
    ]
    assert line == ["tether: the answer could not be written: the disk is full"], result.stderr
    sid = session_id(result.stderr)
    assert log_lines(tmp_path, sid)[-1]["type"] == "turn/end"

    read, write = os.pipe()
    os.close(read)
    try:
        closed = run_to(tmp_path, write)
    finally:
        os.close(write)
    assert closed.returncode == 1
    assert "tether: the answer could not be written: the output was closed" in closed.stderr
    assert "Traceback" not in closed.stderr


@pytest.mark.timeout(60)
def test_a_disk_that_fills_mid_turn_fails_the_run_in_one_line_and_damages_nothing(
    tmp_path: Path,
) -> None:
    slow = overlay(tmp_path, "slow", SLOW)
    with tmpfs(tmp_path / "home", size="512k") as home:
        before = session_id(tether(home, "run", "earlier work").stderr)
        kept = (home / "sessions" / f"{before}.jsonl").read_bytes()
        process, sid = slow_run(home, slow)
        filler = fill(home)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 1
        assert "Traceback" not in stderr
        assert (
            stderr.strip()
            .splitlines()[-1]
            .startswith(f"tether: session {sid} could not be stored: the disk is full")
        )
        assert (home / "sessions" / f"{before}.jsonl").read_bytes() == kept
        filler.unlink()
        JsonlBackend(home).load(before)
        again = tether(home, "run", "--resume", before, "later")
        assert again.returncode == 0, again.stderr


def test_a_damaged_database_page_is_one_line(tmp_path: Path) -> None:
    config = overlay(tmp_path, "sqlite", SQLITE)
    for n in range(3):
        assert (
            tether(tmp_path, "--config", config, "run", f"fill a page {n} " * 200).returncode == 0
        )
    database = tmp_path / "sessions.sqlite3"
    data = bytearray(database.read_bytes())
    page = 4096
    data[page:] = b"\xff" * (len(data) - page)
    database.write_bytes(bytes(data))
    listed = tether(tmp_path, "--config", config, "sessions", "list")
    assert listed.returncode == 1
    assert only_line(listed.stderr) == (
        "tether: the session database failed: database disk image is malformed"
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_close_the_turn_like_ctrl_c(
    tmp_path: Path, signum: signal.Signals, status: int
) -> None:
    process, sid = slow_run(tmp_path, overlay(tmp_path, "slow", SLOW))
    process.send_signal(signum)
    _out, err = process.communicate(timeout=30)
    assert process.returncode == status
    assert last_reason(tmp_path, sid) == {"kind": "aborted", "cause": "user"}
    # The log says the user stopped it; the person is told which signal did.
    assert f"tether: stopped by {signum.name}" in err


# -- read-only loads and private logs --------------------------------------------------


def test_show_and_export_work_read_only_and_report_a_torn_tail(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "home", size="256k") as home:
        sid = session_id(tether(home, "run", "keep me").stderr)
        path = home / "sessions" / f"{sid}.jsonl"
        with path.open("ab") as file:
            file.write(b'{"type":"assistant/chu')
        torn = path.read_bytes()
        remount(home, read_only=True)
        shown = tether(home, "sessions", "show", sid)
        exported = tether(home, "sessions", "export", sid)
        remount(home, read_only=False)
    assert shown.returncode == 0 and "you: keep me" in shown.stdout
    assert "torn" in shown.stderr and "Traceback" not in shown.stderr
    assert exported.returncode == 0
    assert json.loads(exported.stdout.splitlines()[-1])["type"] == "turn/end"
    assert torn.endswith(b'{"type":"assistant/chu')


def test_sqlite_sessions_are_listed_and_shown_from_a_read_only_home(tmp_path: Path) -> None:
    config = overlay(tmp_path, "sqlite", SQLITE)
    with tmpfs(tmp_path / "home", size="1m") as home:
        sid = session_id(tether(home, "--config", config, "run", "keep me").stderr)
        remount(home, read_only=True)
        listed = tether(home, "--config", config, "sessions", "list")
        shown = tether(home, "--config", config, "sessions", "show", sid)
        refused = tether(home, "--config", config, "run", "--resume", sid, "more")
        remount(home, read_only=False)
    assert listed.returncode == 0 and sid in listed.stdout, listed.stderr
    assert shown.returncode == 0 and "you: keep me" in shown.stdout, shown.stderr
    assert refused.returncode == 1
    assert only_line(refused.stderr).startswith("tether: sessions cannot be stored (")


def test_logs_are_private_whatever_the_umask(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = overlay(tmp_path, "sqlite", SQLITE)
    script = "import os, sys; os.umask(0); from tether.cli.main import main; sys.exit(main())"
    for args in (["run", "private"], ["--config", config, "run", "private"]):
        result = subprocess.run(
            [sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            env=env_for(home),
            check=False,
        )
        assert result.returncode == 0, result.stderr
    paths = [home, *home.rglob("*")]
    snapshots = home / "workspaces"  # workspace snapshots: git's objects are read-only
    modes = {str(p): p.stat().st_mode & 0o777 for p in paths if not p.is_dir()}
    logs = {path: mode for path, mode in modes.items() if not path.startswith(str(snapshots))}
    assert logs and set(logs.values()) == {0o600}, logs
    assert {mode & 0o077 for mode in modes.values()} == {0}, modes
    folders = {str(p): p.stat().st_mode & 0o777 for p in paths if p.is_dir()}
    assert set(folders.values()) == {0o700}, folders


def test_sqlite_on_a_read_only_home_shows_what_a_killed_writer_left_in_its_wal(
    tmp_path: Path,
) -> None:
    config = overlay(tmp_path, "slow-sqlite", SLOW + SQLITE.removeprefix("plugins:\n"))
    with tmpfs(tmp_path / "home", size="4m") as home:
        process, sid = slow_run(home, config)
        database = sqlite3.connect(f"file:{home / 'sessions.sqlite3'}?mode=ro", uri=True)
        query = (
            "SELECT count(*) FROM batches WHERE session_id = ?"
            ' AND instr(lines, CAST(\'"type":"user/message"\' AS BLOB))'
        )
        for _ in range(500):  # until the turn's prompt is committed (at most 5 s)
            if database.execute(query, (sid,)).fetchone()[0]:
                break
            time.sleep(0.01)
        database.close()
        process.kill()  # mid-turn: nothing was merged from the write-ahead log
        process.communicate()
        assert (home / "sessions.sqlite3-wal").stat().st_size > 0
        remount(home, read_only=True)
        listed = tether(home, "--config", config, "sessions", "list")
        shown = tether(home, "--config", config, "sessions", "show", sid)
        remount(home, read_only=False)
    assert listed.returncode == 0 and sid in listed.stdout, listed.stderr
    assert shown.returncode == 0 and "take your time" in shown.stdout, shown.stderr
