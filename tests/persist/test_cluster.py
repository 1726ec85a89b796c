"""Several tether hosts on one PostgreSQL database, as separate ``tether`` processes.

Each host is its own process with its own host id and ``TETHER_HOME``; they
share one schema (private to the test). Leases are short (1 s) so takeovers
happen within the test's time. The contracts: one live owner per session
across hosts, a takeover only after the holder's lease expired, a fenced
former owner never writes again, cancel and tail from any host.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import postgres
from tests.cli.test_commands import ROOT, SLOW, session_id
from tether.persist.backends.postgres import PostgresBackend

TTL = 1.0


@dataclass
class Cluster:
    """Hosts sharing one schema; ``db`` looks at what they stored."""

    tmp_path: Path
    schema: str
    db: PostgresBackend
    overlay: Path

    def env(self, host: str) -> dict[str, str]:
        home = self.tmp_path / host
        home.mkdir(exist_ok=True)
        return {
            **os.environ,
            "TETHER_HOME": str(home),
            "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
            "TETHER_DATABASE_URL": postgres.URL,
            "TETHER_DATABASE_SCHEMA": self.schema,
            "TETHER_HOST_ID": host,
            "TETHER_LEASE_TTL": str(TTL),
        }

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "tether.cli.main", "--config", str(self.overlay), *args]

    def run(self, host: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            capture_output=True,
            text=True,
            env=self.env(host),
            timeout=timeout,
            check=False,
        )

    def start(self, host: str, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env(host),
        )

    def slow_turn(self, host: str, *run_args: str) -> tuple[subprocess.Popen[str], str]:
        """``tether run`` on host ``host`` with the slow model: once its session is live
        there (its lease is held) and its first chunk is stored."""
        process = self.start(
            host, "run", "--stream", "--model", "slow", *run_args, "take your time"
        )
        assert process.stdout is not None and process.stderr is not None
        sid = session_id(process.stderr.readline() or process.stderr.readline())
        assert process.stdout.read(len("thinking")) == "thinking"
        self.wait_for(lambda: self.holder(sid) == host, f"{host} to hold {sid}")
        self.wait_for(lambda: self.stored(sid, "assistant/chunk"), "the first chunk stored")
        return process, sid

    def stored(self, sid: str, kind: str) -> bool:
        """Whether the last stored event of ``sid`` is a ``kind``."""
        if not self.db.exists(sid):
            return False
        records = self.records(sid)
        return bool(records) and records[-1]["type"] == kind

    def holder(self, sid: str) -> str | None:
        info = self.db.lease_info(sid)
        return info.host if info is not None and info.live else None

    def records(self, sid: str) -> list[dict[str, object]]:
        return [event.to_record() for event in self.db.load(sid).events]

    @staticmethod
    def wait_for(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.02)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    schema = postgres.new_schema()
    overlay = tmp_path / "slow.yml"
    overlay.write_text(SLOW)
    db = PostgresBackend(postgres.URL, schema=schema, host_id="observer")
    try:
        yield Cluster(tmp_path, schema, db, overlay)
    finally:
        db.close()
        postgres.drop(schema)


def stop(process: subprocess.Popen[str], signum: int = signal.SIGINT) -> tuple[str, str]:
    process.send_signal(signum)
    out, err = process.communicate(timeout=30)
    return out, err


def assert_log_is_whole(records: list[dict[str, object]]) -> None:
    assert [r["seq"] for r in records] == list(range(len(records)))


def test_concurrent_creates_on_four_hosts_never_share_an_id(cluster: Cluster) -> None:
    hosts = [cluster.start(f"host{n}", "run", "hello") for n in range(4)]
    ids = []
    for process in hosts:
        _out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        ids.append(session_id(err))
    assert len(set(ids)) == 4
    listed = cluster.run("host0", "sessions", "list")
    assert sorted(line.split("\t")[0] for line in listed.stdout.splitlines()) == sorted(ids)
    assert all(line.endswith("\tnot live") for line in listed.stdout.splitlines())


def test_a_session_live_on_one_host_is_refused_on_another_in_one_line(cluster: Cluster) -> None:
    a, sid = cluster.slow_turn("hostA")
    try:
        listed = cluster.run("hostB", "sessions", "list")
        assert listed.stdout.rstrip().endswith(f"\tlive on hostA:{a.pid}")
        refused = cluster.run("hostB", "run", "--resume", sid, "hello")
        assert refused.returncode == 1
        lines = [ln for ln in refused.stderr.splitlines() if not ln.startswith("tether: no model")]
        assert lines == [f"tether: session {sid} is open on host hostA (pid {a.pid})"]
    finally:
        stop(a)
    assert a.returncode == 130
    assert cluster.records(sid)[-1]["data"] == {
        "turn": 1,
        "reason": {"kind": "aborted", "cause": "user"},
    }


def test_a_killed_hosts_session_is_taken_over_within_its_ttl_and_continues(
    cluster: Cluster,
) -> None:
    a, sid = cluster.slow_turn("hostA")
    a.kill()
    a.wait(timeout=10)
    killed = time.monotonic()
    while True:
        tried = time.monotonic()
        resumed = cluster.run(
            "hostB", "run", "--model", "offline", "--resume", sid, "after the crash"
        )
        if resumed.returncode == 0:
            break
        assert f"is open on host hostA (pid {a.pid})" in resumed.stderr, resumed.stderr
        assert tried - killed < TTL + 1.0, "no takeover within TTL + 1 s"
        time.sleep(0.05)
    # The try that took the session over began within TTL + 1 s of the kill; its own run
    # (a process start, slower on a loaded machine) is not part of the promise.
    assert tried - killed < TTL + 1.0
    records = cluster.records(sid)
    assert_log_is_whole(records)
    ends = [r["data"] for r in records if r["type"] == "turn/end"]
    assert ends == [
        {"turn": 1, "reason": {"kind": "interrupted"}},
        {"turn": 2, "reason": {"kind": "completed"}},
    ]


def test_a_paused_host_is_fenced_after_a_takeover_and_writes_nothing_more(
    cluster: Cluster,
) -> None:
    a, sid = cluster.slow_turn("hostA")
    a.send_signal(signal.SIGSTOP)
    try:
        before = cluster.records(sid)
        cluster.wait_for(lambda: cluster.holder(sid) is None, "A's lease to expire", TTL + 2)
        b, _ = cluster.slow_turn("hostB", "--resume", sid)
    finally:
        a.send_signal(signal.SIGCONT)
    try:
        _out, err = a.communicate(timeout=30)
        assert a.returncode == 1
        # One line saying so, one for the user's command; no error, no traceback.
        assert err.splitlines() == [
            f"tether: session {sid} was taken over by host hostB; its agent stops here",
            f"tether: session {sid} could not be stored: session {sid} was taken over by host"
            " hostB",
        ]
        assert cluster.holder(sid) == "hostB"  # B still owns it
    finally:
        stop(b)
    records = cluster.records(sid)
    assert_log_is_whole(records)
    assert records[: len(before)] == before
    # Everything after the takeover is B's: the repair that closed A's open
    # turn, then B's own turn. A's cancelled turn (an interrupted answer,
    # turn/end aborted) was never stored.
    after = records[len(before) :]
    second = next(i for i, r in enumerate(after) if r["type"] == "turn/start")
    # (B's prompt is queued, as an inbox splice, before its turn starts.)
    assert [r["type"] for r in after[:second]] == ["step/end", "turn/end", "agent/inbox/spliced"]
    assert after[1]["data"] == {"turn": 1, "reason": {"kind": "interrupted"}}
    assert [r["data"] for r in after if r["type"] == "turn/end"][1:] == [
        {"turn": 2, "reason": {"kind": "aborted", "cause": "user"}}
    ]


def test_cancel_from_another_host_stops_the_turn_and_tail_sees_every_event(
    cluster: Cluster,
) -> None:
    a, sid = cluster.slow_turn("hostA")
    tail = cluster.start("hostC", "sessions", "tail", sid)
    try:
        cancelled = cluster.run("hostB", "sessions", "cancel", sid)
        assert cancelled.returncode == 0, cancelled.stderr
        assert f"cancel of {sid} sent to host hostA" in cancelled.stderr
        # It returned once the stop was in the log, and says what the log says.
        records = cluster.records(sid)
        assert records[-1]["data"] == {"turn": 1, "reason": {"kind": "aborted", "cause": "user"}}
        assert cancelled.stdout == (
            f"session {sid}: turn 1 ended (aborted, cause user) on host hostA,"
            f" seq {records[-1]['seq']}\n"
        )
        _out, err = a.communicate(timeout=30)
        assert a.returncode == 130, err
        assert cluster.records(sid) == records
        assert tail.stdout is not None
        seen = [json.loads(tail.stdout.readline()) for _ in records]
    finally:
        out, _err = stop(tail, signal.SIGTERM)
    assert tail.returncode == 143  # stopped by SIGTERM
    assert out == ""  # nothing after the last stored event
    assert [(r["seq"], r["type"]) for r in seen] == [(r["seq"], r["type"]) for r in records]
    assert json.dumps(seen[-1]["data"], sort_keys=True) == json.dumps(
        records[-1]["data"], sort_keys=True
    )

    for wait in ((), ("--no-wait",)):
        not_live = cluster.run("hostB", "sessions", "cancel", *wait, sid)
        assert not_live.returncode == 1
        assert not_live.stderr.splitlines()[-1] == f"tether: session {sid} is not live on any host"
    bad = cluster.run("hostB", "sessions", "cancel", "../etc")
    assert bad.returncode == 2
    assert bad.stderr.startswith("tether: ") and len(bad.stderr.splitlines()) == 1


@pytest.mark.parametrize("lease", ["live", "expired"])
def test_cancel_says_so_when_the_holder_goes_away_without_stopping(
    cluster: Cluster, lease: str
) -> None:
    """Whether the stopped holder's lease expires before the cancel or after it, the
    answer is the same: the holder let the session go without stopping the turn."""
    a, sid = cluster.slow_turn("hostA")
    a.send_signal(signal.SIGSTOP)  # it never hears the cancel; its lease expires
    try:
        if lease == "expired":
            cluster.wait_for(
                lambda: cluster.holder(sid) is None, f"hostA's lease of {sid} to expire"
            )
        cancelled = cluster.run("hostB", "sessions", "cancel", sid)
    finally:
        a.kill()
        a.communicate(timeout=30)
    assert cancelled.returncode == 1
    assert cancelled.stderr.splitlines()[-1] == (
        f"tether: host hostA let session {sid} go without stopping turn 1;"
        " the turn is closed (interrupted) when the session is resumed"
    )
    assert cancelled.stdout == ""


def test_cancel_without_waiting_returns_once_sent(cluster: Cluster) -> None:
    a, sid = cluster.slow_turn("hostA")
    try:
        sent = cluster.run("hostB", "sessions", "cancel", "--no-wait", sid)
        assert sent.returncode == 0, sent.stderr
        assert sent.stderr.splitlines()[-1] == f"cancel of {sid} sent to host hostA"
        assert sent.stdout == ""
        _out, err = a.communicate(timeout=30)
        assert a.returncode == 130, err
    finally:
        if a.poll() is None:
            a.kill()
            a.communicate()
