"""``tether drain``: a worker hands its live runs to another worker without a TTL.

Real worker processes against the real PostgreSQL (leases of 1 s, as the run
queue tests): runs are under way on one worker when it is drained; each must
end on the other worker with its log continuous (no seq lost or doubled), the
hand-off stop written where the model and a reader see it, and nothing of
the drained worker left running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.persist.test_run_queue import Fleet, stop

HANDOFF = {"kind": "aborted", "cause": "handoff"}


def reasons(fleet: Fleet, sid: str) -> list[object]:
    return [r["data"]["reason"] for r in fleet.records(sid) if r["type"] == "turn/end"]  # type: ignore[index]


def handed_off(fleet: Fleet, sid: str) -> list[dict[str, object]]:
    return [r for r in fleet.records(sid) if r["type"] == "session/handed-off"]


def assert_continuous(fleet: Fleet, sid: str) -> None:
    seqs = [r["seq"] for r in fleet.records(sid)]
    assert seqs == list(range(len(seqs))), seqs


def drain(fleet: Fleet, *args: str) -> subprocess.CompletedProcess[str]:
    return fleet.tether("drain", *args)


def tail(fleet: Fleet, sid: str, out: Path) -> subprocess.Popen[str]:
    with out.open("w") as sink:
        return subprocess.Popen(
            fleet.argv("sessions", "tail", sid),
            stdout=sink,
            stderr=subprocess.DEVNULL,
            text=True,
            env=fleet.env("follower", 0),
        )


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.timeout(180)
def test_drain_hands_every_run_under_way_to_the_other_worker_without_a_lost_or_doubled_seq(
    fleet: Fleet, tmp_path: Path
) -> None:
    sids = [fleet.submit(f"run {n}") for n in range(4)]
    first = fleet.worker("w1", "--concurrency", "4", pause=60.0)
    second: subprocess.Popen[str] | None = None
    follower: subprocess.Popen[str] | None = None
    try:
        fleet.wait_for(lambda: fleet.effects.read_text().count("\n") == 4, "4 runs under way")
        second = fleet.worker("w2", "--concurrency", "4")
        follower = tail(fleet, sids[0], tmp_path / "tail.jsonl")
        drained = drain(fleet, "w1", "--grace", "0.5")
        assert drained.returncode == 0, drained.stderr
        assert "host w1: drained" in drained.stderr
        _out, err = first.communicate(timeout=30)
        assert first.returncode == 0, err
        fleet.wait_for(lambda: all(fleet.run(s).state == "done" for s in sids), "every run done")
        stored = fleet.records(sids[0])
        fleet.wait_for(
            lambda: (tmp_path / "tail.jsonl").read_text().count("\n") == len(stored),
            "the follower to print every event",
        )
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                stop(process)
        if follower is not None:
            follower.terminate()
            follower.wait(timeout=30)
    for sid in sids:
        run = fleet.run(sid)
        assert (run.state, run.worker, run.attempts) == ("done", f"w2:{second.pid}", 1), run
        assert_continuous(fleet, sid)
        assert reasons(fleet, sid) == [HANDOFF, {"kind": "completed"}]
        (record,) = handed_off(fleet, sid)
        assert record["data"] == {"host": f"w1:{first.pid}", "turn": 1, "stopped": True}
        records = fleet.records(sid)
        at = records.index(record)
        # The drained worker's last event; the taker's resume comes after it.
        assert records[at - 1]["type"] == "turn/end"
        prompts = [r["data"] for r in records[at:] if r["type"] == "user/message"]
        assert f"handed off: the worker running it (w1:{first.pid})" in str(prompts)
    followed = [json.loads(line) for line in (tmp_path / "tail.jsonl").read_text().splitlines()]
    assert [r["seq"] for r in followed] == list(range(len(stored)))
    assert followed == stored
    lines = fleet.effects.read_text().splitlines()
    assert len(lines) == len(set(lines)) == 8  # each run's call on w1, its new call on w2


@pytest.mark.timeout(180)
def test_a_drain_stops_a_running_bash_command_with_a_handoff_receipt(
    fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"  # the run's directory: its command may write there
    work.mkdir()
    pids = work / "pids"
    monkeypatch.setenv("TETHER_TEST_SHELL", "echo $$ >> pids; exec sleep 120")
    sid = fleet.submit("sleep", "--model", "shell", "--cwd", str(work))
    first = fleet.worker("w1")
    try:
        fleet.wait_for(lambda: pids.exists() and pids.read_text().strip() != "", "the command")
        sleeper = int(pids.read_text().split()[0])
        monkeypatch.setenv("TETHER_TEST_SHELL", "echo second")
        second = fleet.worker("w2")
        try:
            drained = drain(fleet, "w1", "--grace", "0")
            assert drained.returncode == 0, drained.stderr
            _out, err = first.communicate(timeout=30)
            fleet.wait_for(lambda: fleet.run(sid).state == "done", "the run done on w2")
        finally:
            stop(second)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    assert gone(sleeper), "the drained worker's command outlived it"
    records = fleet.records(sid)
    assert_continuous(fleet, sid)
    (receipt,) = [r["data"] for r in records if r["type"] == "tool/stopped"]
    assert receipt["cause"] == "handoff"  # type: ignore[index]
    assert len(receipt["stopped"]) == 1  # type: ignore[arg-type,index]
    assert reasons(fleet, sid) == [HANDOFF, {"kind": "completed"}]
    results = [str(r["data"]["content"]) for r in records if r["type"] == "tool/result"]  # type: ignore[index]
    assert "second" in results[-1]


@pytest.mark.timeout(180)
def test_a_cancel_and_a_second_drain_during_a_drain_are_safe(fleet: Fleet) -> None:
    sids = [fleet.submit(f"run {n}") for n in range(3)]
    first = fleet.worker("w1", "--concurrency", "3", pause=60.0)
    second: subprocess.Popen[str] | None = None
    try:
        fleet.wait_for(lambda: fleet.effects.read_text().count("\n") == 3, "3 runs under way")
        second = fleet.worker("w2", "--concurrency", "3")
        assert drain(fleet, "w1", "--grace", "60", "--no-wait").returncode == 0
        cancelled = fleet.tether("sessions", "cancel", sids[0])
        assert cancelled.returncode == 0, cancelled.stderr
        fleet.wait_for(lambda: fleet.run(sids[0]).state == "cancelled", "the cancel")
        again = drain(fleet, "w1", "--grace", "0")  # skips the rest of the grace period
        assert again.returncode == 0, again.stderr
        _out, err = first.communicate(timeout=30)
        assert first.returncode == 0, err
        fleet.wait_for(lambda: all(fleet.run(s).state == "done" for s in sids[1:]), "the rest")
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                stop(process)
    assert reasons(fleet, sids[0]) == [{"kind": "aborted", "cause": "user"}]
    assert handed_off(fleet, sids[0]) == []
    for sid in sids:
        assert_continuous(fleet, sid)
    for sid in sids[1:]:
        assert reasons(fleet, sid) == [HANDOFF, {"kind": "completed"}]
        assert len(handed_off(fleet, sid)) == 1


@pytest.mark.timeout(180)
def test_sigterm_drains_a_worker_started_with_drain_on_sigterm(fleet: Fleet) -> None:
    sid = fleet.submit("run")
    first = fleet.worker("w1", "--drain-on-sigterm", "--grace", "0.2", pause=60.0)
    second: subprocess.Popen[str] | None = None
    try:
        fleet.wait_for(lambda: fleet.effects.read_text() != "", "the run under way")
        second = fleet.worker("w2")
        first.send_signal(signal.SIGTERM)
        _out, err = first.communicate(timeout=30)
        assert first.returncode == 0, err
        fleet.wait_for(lambda: fleet.run(sid).state == "done", "the run done on w2")
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                stop(process)
    assert reasons(fleet, sid) == [HANDOFF, {"kind": "completed"}]
    assert_continuous(fleet, sid)


@pytest.mark.timeout(60)
def test_drain_refuses_a_host_no_lease_or_run_ever_named(fleet: Fleet) -> None:
    done = drain(fleet, "nobody")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == "tether: no lease or run ever named host nobody"
    bad = drain(fleet, "w1", "--grace", "-1")
    assert bad.returncode == 2
    assert "must be a number of seconds >= 0" in bad.stderr
