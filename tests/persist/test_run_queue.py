"""Runs submitted to the PostgreSQL queue and taken by ``tether worker`` processes.

Workers are real processes, killed with SIGKILL at the worst moment (right
after a tool's effect, before its result is stored) or stopped with SIGTERM.
Leases last 1 s, so a dead worker's runs are free a second later.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import postgres
from tests.cli.test_commands import ROOT
from tether.persist.backends.postgres import PostgresBackend
from tether.persist.backends.postgres_runs import RunRequest
from tether.session.repair import OUTCOME_UNKNOWN

OVERLAY = "plugins:\n  - id: effect\n    plugin: tests.persist.effect_tool\n"


class Fleet:
    """Hosts (submitters and workers) sharing one schema; ``db`` looks at the queue."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.overlay = tmp_path / "overlay.yml"
        self.overlay.write_text(OVERLAY + postgres.persistence_row(tmp_path))
        self.db = PostgresBackend(
            postgres.URL, schema=postgres.schema_of(tmp_path), host_id="observer"
        )
        self.effects = tmp_path / "effects.txt"
        self.effects.touch()

    def env(self, host: str, pause: float) -> dict[str, str]:
        home = self.tmp_path / host
        home.mkdir(exist_ok=True)
        return {
            **os.environ,
            "TETHER_HOME": str(home),
            "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
            "TETHER_HOST_ID": host,
            "TETHER_TEST_EFFECTS": str(self.effects),
            "TETHER_TEST_EFFECT_PAUSE": str(pause),
        }

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "tether.cli.main", "--config", str(self.overlay), *args]

    def tether(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            capture_output=True,
            text=True,
            env=self.env("cli", 0),
            timeout=60,
            check=False,
        )

    def submit(self, task: str, *options: str) -> str:
        done = self.tether("submit", "--model", "effect", *options, task)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def worker(self, host: str, *options: str, pause: float = 0.0) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            self.argv("worker", *options),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env(host, pause),
        )
        assert process.stderr is not None
        said = ""
        while "takes runs" not in said:  # after the notice about the default model
            line = process.stderr.readline()
            assert line, said + process.stderr.read()
            said += line
        return process

    def run(self, sid: str) -> RunRequest:
        run = self.db.runs.get(sid)
        assert run is not None
        return run

    def records(self, sid: str) -> list[dict[str, object]]:
        return [event.to_record() for event in self.db.load(sid).events]

    @staticmethod
    def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.02)


def stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    _out, err = process.communicate(timeout=60)
    return err


def turn_ends(records: list[dict[str, object]]) -> list[object]:
    return [r["data"]["reason"]["kind"] for r in records if r["type"] == "turn/end"]  # type: ignore[index]


@pytest.mark.timeout(120)
def test_submit_prints_the_session_id_at_once_and_a_worker_runs_it_to_done(fleet: Fleet) -> None:
    sid = fleet.submit("append a line")
    assert fleet.run(sid).state == "queued"
    listed = fleet.tether("sessions", "list", "--queued")
    assert listed.stdout.split("\t")[:3] == [sid, "queued", "0/3"], listed.stdout
    worker = fleet.worker("w1")
    try:
        fleet.wait_for(lambda: fleet.run(sid).state == "done", "the run to be done")
    finally:
        err = stop(worker)
    assert worker.returncode == 0, err
    run = fleet.run(sid)
    assert (run.attempts, run.outcome, run.worker) == (1, "completed", f"w1:{worker.pid}")
    assert turn_ends(fleet.records(sid)) == ["completed"]
    assert fleet.effects.read_text().splitlines() == [f"{sid}/" + _call_ids(fleet, sid)[0]]
    assert fleet.tether("sessions", "list", "--running").stdout == ""


@pytest.mark.timeout(180)
def test_workers_taking_at_once_run_every_run_exactly_once(fleet: Fleet) -> None:
    sids = [fleet.submit(f"run {n}", "--priority", str(n % 3)) for n in range(12)]
    workers = [fleet.worker(f"w{n}", "--concurrency", "2") for n in range(3)]
    try:
        fleet.wait_for(
            lambda: all(fleet.run(sid).state == "done" for sid in sids), "every run done", 120
        )
    finally:
        for worker in workers:
            stop(worker)
    assert all(worker.returncode == 0 for worker in workers)
    for sid in sids:
        assert fleet.run(sid).attempts == 1
        assert turn_ends(fleet.records(sid)) == ["completed"]
    lines = fleet.effects.read_text().splitlines()
    assert len(lines) == len(set(lines)) == 12
    assert {line.split("/")[0] for line in lines} == set(sids)


@pytest.mark.timeout(120)
def test_a_killed_workers_run_is_taken_over_after_the_ttl_and_goes_on_from_its_log(
    fleet: Fleet,
) -> None:
    sid = fleet.submit("append a line")
    first = fleet.worker("w1", pause=30.0)
    try:
        # The worst moment: the tool's effect is on disk, its result is not.
        fleet.wait_for(lambda: fleet.effects.read_text() != "", "the effect")
        first.kill()
        first.communicate(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    assert fleet.run(sid).state == "running"
    second = fleet.worker("w2")
    try:
        fleet.wait_for(lambda: fleet.run(sid).state == "done", "the takeover to finish")
    finally:
        stop(second)
    run = fleet.run(sid)
    assert (run.attempts, run.worker) == (2, f"w2:{second.pid}")
    records = fleet.records(sid)
    assert [r["seq"] for r in records] == list(range(len(records)))
    assert turn_ends(records) == ["interrupted", "completed"]
    results = [r["data"] for r in records if r["type"] == "tool/result"]
    assert OUTCOME_UNKNOWN in results[0]["content"]  # type: ignore[index,operator]
    prompts = [r["data"] for r in records if r["type"] == "user/message"]
    assert "This run was interrupted" in str(prompts[-1])
    lines = fleet.effects.read_text().splitlines()
    assert len(lines) == len(set(lines)) == 2  # the cut-off call never ran again


@pytest.mark.timeout(180)
def test_a_run_that_keeps_killing_its_workers_is_parked(fleet: Fleet) -> None:
    sid = fleet.submit("append a line", "--max-attempts", "2")
    for attempt in (1, 2):
        worker = fleet.worker(f"w{attempt}", pause=30.0)
        fleet.wait_for(
            lambda n=attempt: fleet.effects.read_text().count("\n") == n,  # type: ignore[misc]
            f"attempt {attempt}'s effect",
        )
        worker.kill()
        worker.communicate(timeout=30)
    last = fleet.worker("w3")
    try:
        fleet.wait_for(lambda: fleet.run(sid).state == "parked", "the run to be parked")
    finally:
        stop(last)
    run = fleet.run(sid)
    assert run.attempts == 3
    assert run.outcome == "parked after 2 attempts that never settled"
    assert fleet.effects.read_text().count("\n") == 2  # the parked run never ran again


@pytest.mark.timeout(120)
def test_sigterm_finishes_the_runs_under_way_and_takes_no_new_one(fleet: Fleet) -> None:
    sid = fleet.submit("append a line")
    worker = fleet.worker("w1", pause=1.0)
    fleet.wait_for(lambda: fleet.effects.read_text() != "", "the run to be under way")
    worker.send_signal(signal.SIGTERM)
    later = fleet.submit("after the stop")
    _out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert fleet.run(sid).state == "done"
    assert fleet.run(later).state == "queued"


def _call_ids(fleet: Fleet, sid: str) -> list[str]:
    return [
        str(r["data"]["id"])  # type: ignore[index]
        for r in fleet.records(sid)
        if r["type"] == "tool/call"
    ]


@pytest.mark.timeout(120)
def test_a_queued_run_cancelled_is_never_taken(fleet: Fleet) -> None:
    sid = fleet.submit("never")
    cancelled = fleet.tether("sessions", "cancel", sid)
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"run {sid} cancelled before any worker took it" in cancelled.stderr
    worker = fleet.worker("w1")
    after = fleet.submit("after it")
    try:
        fleet.wait_for(lambda: fleet.run(after).state == "done", "the next run")
    finally:
        stop(worker)
    assert (fleet.run(sid).state, fleet.run(sid).attempts) == ("cancelled", 0)
    assert not fleet.db.exists(sid)


@pytest.mark.timeout(120)
def test_a_paused_worker_whose_run_was_taken_over_never_settles_or_writes_it(
    fleet: Fleet,
) -> None:
    sid = fleet.submit("append a line")
    paused = fleet.worker("w1", pause=3.0)
    try:
        fleet.wait_for(lambda: fleet.effects.read_text() != "", "the effect")
        paused.send_signal(signal.SIGSTOP)
        fleet.wait_for(
            lambda: (info := fleet.db.lease_info(sid)) is not None and not info.live,
            "the paused worker's lease to expire",
        )
        taker = fleet.worker("w2")
        try:
            fleet.wait_for(lambda: fleet.run(sid).state == "done", "the takeover to finish")
            before = fleet.records(sid)
            paused.send_signal(signal.SIGCONT)
            # Its tool ends, its agent stops: nothing of its is stored or settled.
            err = stop(paused)
        finally:
            stop(taker)
    finally:
        paused.send_signal(signal.SIGCONT)
        if paused.poll() is None:
            paused.kill()
    assert "was taken over by host w2" in err, err
    run = fleet.run(sid)
    assert (run.state, run.worker, run.attempts) == ("done", f"w2:{taker.pid}", 2)
    assert fleet.records(sid) == before
    assert turn_ends(before) == ["interrupted", "completed"]


@pytest.mark.timeout(120)
def test_a_worker_takes_higher_priorities_first_then_the_oldest(fleet: Fleet) -> None:
    low = fleet.submit("low")
    old = fleet.submit("urgent, older", "--priority", "5")
    new = fleet.submit("urgent, newer", "--priority", "5")
    worker = fleet.worker("w1")  # one at a time
    try:
        fleet.wait_for(lambda: fleet.run(low).state == "done", "every run")
    finally:
        stop(worker)
    order = [line.split("/")[0] for line in fleet.effects.read_text().splitlines()]
    assert order == [old, new, low]


@pytest.mark.timeout(180)
def test_a_queues_limit_holds_across_workers(fleet: Fleet) -> None:
    limited = [fleet.submit(f"gpu {n}", "--queue", "gpu") for n in range(3)]
    free = [fleet.submit(f"cpu {n}") for n in range(2)]
    workers = [fleet.worker("w1", "--concurrency", "3", "--limit-queue", "gpu=1", pause=0.3)]
    workers.append(fleet.worker("w2", "--concurrency", "3", pause=0.3))
    most = 0
    try:
        deadline = time.monotonic() + 120
        while not all(fleet.run(sid).state == "done" for sid in limited + free):
            running = fleet.db.runs.list(["running"])
            most = max(most, sum(run.queue == "gpu" for run in running))
            assert time.monotonic() < deadline, "the runs never finished"
            time.sleep(0.01)
    finally:
        for worker in workers:
            stop(worker)
    assert most == 1
    assert bad_limit(fleet).returncode == 2


def bad_limit(fleet: Fleet) -> subprocess.CompletedProcess[str]:
    return fleet.tether("worker", "--limit-queue", "gpu")
