"""``sessions tail`` of a submitted run that no worker took yet.

Its session is created by the first take; the follower started right after
``submit`` waits for it and then prints every event, from seq 0.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.persist.test_run_queue import Fleet, stop


@pytest.mark.timeout(120)
def test_tail_of_a_queued_run_waits_for_its_session_and_prints_it_all(
    fleet: Fleet, tmp_path: Path
) -> None:
    sid = fleet.submit("append a line")
    out, err = tmp_path / "tail.jsonl", tmp_path / "tail.err"
    with out.open("w") as sink, err.open("w") as errors:
        follower = subprocess.Popen(
            fleet.argv("sessions", "tail", sid),
            stdout=sink,
            stderr=errors,
            env=fleet.env("follower", 0),
        )
    try:
        fleet.wait_for(lambda: "waiting for its session" in err.read_text(), "the wait")
        assert follower.poll() is None
        worker = fleet.worker("w1")
        try:
            fleet.wait_for(lambda: fleet.run(sid).state == "done", "the run done")
        finally:
            stop(worker)
        stored = fleet.records(sid)
        fleet.wait_for(lambda: out.read_text().count("\n") == len(stored), "every event")
    finally:
        follower.terminate()
        follower.wait(timeout=30)
    assert err.read_text().splitlines()[-1] == f"run {sid} is queued; waiting for its session"
    assert [json.loads(line) for line in out.read_text().splitlines()] == stored


@pytest.mark.timeout(60)
def test_tail_of_a_run_cancelled_while_queued_says_so(fleet: Fleet) -> None:
    sid = fleet.submit("never")
    assert fleet.tether("sessions", "cancel", sid).returncode == 0
    done = fleet.tether("sessions", "tail", sid)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"tether: run {sid} is cancelled (cancelled while queued); it never stored a session"
    )
