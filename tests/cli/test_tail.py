"""``tether sessions tail`` on the embedded JSONL store: another process's session, live."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.cli.test_commands import SLOW, env_for, slow_run


def test_tail_prints_a_session_another_process_is_writing_then_its_end(tmp_path: Path) -> None:
    overlay = tmp_path / "slow.yml"
    overlay.write_text(SLOW)
    run, sid = slow_run(tmp_path, str(overlay))
    log = tmp_path / "sessions" / f"{sid}.jsonl"
    deadline = time.monotonic() + 10
    while not log.exists():  # its first batch is written within the batch window
        assert time.monotonic() < deadline
        time.sleep(0.01)
    tail = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.main", "sessions", "tail", sid],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env_for(tmp_path),
    )
    assert tail.stdout is not None
    try:
        seen = []
        while not seen or seen[-1]["type"] != "assistant/chunk":
            seen.append(json.loads(tail.stdout.readline()))
        run.send_signal(signal.SIGINT)  # the turn is cancelled and closes
        run.communicate(timeout=30)
        while seen[-1]["type"] != "turn/end":
            seen.append(json.loads(tail.stdout.readline()))
    finally:
        tail.send_signal(signal.SIGTERM)
        rest, err = tail.communicate(timeout=30)
    assert tail.returncode == 143, err  # stopped by SIGTERM
    assert rest == ""
    stored = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    assert seen == stored
    assert seen[-1]["data"]["reason"] == {"kind": "aborted", "cause": "user"}


def test_tail_into_a_reader_that_has_enough_ends_quietly(tmp_path: Path) -> None:
    # `tether sessions tail ID | head -2`: the session is idle, nothing new is
    # written, yet tail sees its reader go and ends without a traceback.
    from tests.cli.test_commands import session_id, tether

    sid = session_id(tether(tmp_path, "run", "hello").stderr)
    shell = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -m tether.cli.main sessions tail {sid} | head -2'],
        capture_output=True,
        text=True,
        env=env_for(tmp_path),
        timeout=30,
        check=False,
    )
    assert shell.returncode == 0
    assert [json.loads(line)["seq"] for line in shell.stdout.splitlines()] == [0, 1]
    assert shell.stderr == ""
