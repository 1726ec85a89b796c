"""``tether drain`` of a worker with N live runs: lost or doubled events, the pause; prints figures.

Usage: python bench/bench_drain.py [--sessions N] [--rounds N] [--grace S] [--ttl S]
                                   [--takers N]

Each round, in a schema of its own: N runs are submitted, one ``tether
worker`` (concurrency N) takes them all and holds each in a tool call (the
``effect`` model of the tests, its tool paused), ``--takers`` other workers
start (default 1), and ``tether drain w1 --grace S`` hands every run to them. Then the database
is checked, per session: seqs 0..n-1 without a gap or a duplicate, one
``session/handed-off``, turn ends ``[aborted handoff, completed]``, the run
``done`` on a taker with one attempt; and one ``sessions tail``
follower, started before the drain, must have printed exactly the stored
events.

Figures, per round (ranges over rounds):

* lost / duplicated events (stored seqs, and the follower's);
* the **client-visible pause** of each session: from the stored time of its
  last event before the hand-off (the ``handoff`` stop, seen by a follower)
  to the stored time of the first event of the worker that took it over
  (median and max over the sessions); the grace period is not in it;
* of that pause, the part until the drained worker's hand-off record;
* the whole drain: the ``tether drain`` command started until every run is done
  (with when the command returned and when the drained worker exited);
* whether the drain command's exit status was 0 and the drained worker exited.

The lease TTL is ``--ttl`` (default 15 s, the default of a deployment), so a
hand-off that waited for a lease to expire would show a pause of about the TTL.

The server is ``$TETHER_BENCH_DATABASE_URL`` (default: the local one).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

from tether.persist.backends.postgres import PostgresBackend  # noqa: E402
from tether.session.store import new_session_id  # noqa: E402

URL = os.environ.get("TETHER_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
OVERLAY = """plugins:
  - id: effect
    plugin: tests.persist.effect_tool
  - id: persistence
    plugin: tether.persist.postgres
    config:
      url: {url}
      db_schema: {schema}
      lease_ttl_s: {ttl}
"""


class Round(NamedTuple):
    lost: int
    doubled: int
    follower_ok: bool
    pauses: list[float]
    releases: list[float]
    drain_s: float
    command_s: float
    exit_s: float
    drained_ok: bool


class Hosts:
    """Worker processes and CLI calls against one schema."""

    def __init__(self, tmp: Path, schema: str, ttl: float) -> None:
        self.tmp = tmp
        self.overlay = tmp / "overlay.yml"
        self.overlay.write_text(OVERLAY.format(url=json.dumps(URL), schema=schema, ttl=ttl))
        self.effects = tmp / "effects.txt"
        self.effects.touch()

    def env(self, host: str, pause: float) -> dict[str, str]:
        home = self.tmp / host
        home.mkdir(exist_ok=True)
        return {
            **os.environ,
            "TETHER_HOME": str(home),
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
            "TETHER_HOST_ID": host,
            "TETHER_TEST_EFFECTS": str(self.effects),
            "TETHER_TEST_EFFECT_PAUSE": str(pause),
        }

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "tether.cli.main", "--config", str(self.overlay), *args]

    def worker(self, host: str, concurrency: int, pause: float) -> subprocess.Popen[str]:
        """A started worker; what it says goes to ``HOST.err`` (a pipe nobody reads
        could fill and stop it)."""
        said = self.tmp / f"{host}.err"
        with said.open("w") as sink:
            process = subprocess.Popen(
                self.argv("worker", "--concurrency", str(concurrency), "--model", "effect"),
                stdout=subprocess.DEVNULL,
                stderr=sink,
                text=True,
                env=self.env(host, pause),
            )
        wait_for(lambda: "takes runs" in said.read_text() or process.poll() is not None, host)
        if process.poll() is not None:
            raise SystemExit(f"worker {host} did not start: {said.read_text()}")
        return process


def wait_for(condition: Any, what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def one_round(sessions: int, grace: float, ttl: float, takers: int) -> Round:
    schema = f"bench_drain_{os.getpid()}_{time.monotonic_ns() % 10**9}"
    with tempfile.TemporaryDirectory() as tmp:
        hosts = Hosts(Path(tmp), schema, ttl)
        db = PostgresBackend(URL, schema=schema, host_id="bench")
        try:
            return _measure(hosts, db, sessions, grace, takers)
        finally:
            db.close()
            with psycopg.connect(URL, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def _measure(hosts: Hosts, db: PostgresBackend, sessions: int, grace: float, takers: int) -> Round:
    sids = [new_session_id() for _ in range(sessions)]
    work = hosts.tmp / "work"  # apart from the hosts' homes, which a snapshot would copy
    work.mkdir()
    for n, sid in enumerate(sids):
        db.runs.submit(sid, f"run {n}", cwd=str(work), model="effect")
    first = hosts.worker("w1", sessions, pause=600.0)
    wait_for(lambda: hosts.effects.read_text().count("\n") == sessions, "every run under way")
    others = [hosts.worker(f"w{2 + n}", sessions, pause=0.0) for n in range(takers)]
    sink = (hosts.tmp / "tail.jsonl").open("w")
    follower = subprocess.Popen(
        hosts.argv("sessions", "tail", sids[0]),
        stdout=sink,
        stderr=subprocess.DEVNULL,
        env=hosts.env("follower", 0),
    )
    try:
        started = time.monotonic()
        drained = subprocess.run(
            hosts.argv("drain", "w1", "--grace", str(grace)),
            capture_output=True,
            text=True,
            env=hosts.env("cli", 0),
            check=False,
        )
        command_s = time.monotonic() - started
        try:
            first.wait(timeout=120)
        except subprocess.TimeoutExpired:
            raise SystemExit(
                f"the drained worker is still running: {drained.stderr}\n"
                + (hosts.tmp / "w1.err").read_text()[-3000:]
            ) from None
        exit_s = time.monotonic() - started
        wait_for(lambda: all(_run_done(db, sid) for sid in sids), "every run done")
        drain_s = time.monotonic() - started
        stored = _records(db, sids[0])
        tail_file = hosts.tmp / "tail.jsonl"
        wait_for(lambda: tail_file.read_text().count("\n") >= len(stored), "the follower", 30)
    finally:
        follower.terminate()
        follower.wait(timeout=30)
        sink.close()
        for process in (first, *others):
            if process.poll() is None:
                process.kill()  # a failed round: its runs are left as they are
                process.wait(timeout=60)
    followed = [json.loads(line) for line in tail_file.read_text().splitlines()]
    lost = doubled = 0
    pauses: list[float] = []
    releases: list[float] = []
    for sid in sids:
        records = _records(db, sid)
        seqs = [r["seq"] for r in records]
        lost += len(set(range(max(seqs) + 1)) - set(seqs))
        doubled += len(seqs) - len(set(seqs))
        pause, release = _pause(records)
        pauses.append(pause)
        releases.append(release)
    drained_ok = drained.returncode == 0 and first.returncode == 0
    return Round(
        lost, doubled, followed == stored, pauses, releases, drain_s, command_s, exit_s, drained_ok
    )


def _run_done(db: PostgresBackend, sid: str) -> bool:
    run = db.runs.get(sid)
    if run is None or run.state != "done":
        return False
    if run.attempts != 1 or (run.worker or "").startswith("w1:"):
        raise SystemExit(f"run {sid}: {run.attempts} attempts, done on {run.worker}")
    return True


def _records(db: PostgresBackend, sid: str) -> list[dict[str, Any]]:
    return [dict(event.to_record()) for event in db.load(sid).events]


def _pause(records: list[dict[str, Any]]) -> tuple[float, float]:
    """From the ``handoff`` stop to the new owner's first event (stored times), and of
    that, the part until the hand-off record, in seconds."""
    kinds = [r["data"]["reason"] for r in records if r["type"] == "turn/end"]
    offs = [n for n, r in enumerate(records) if r["type"] == "session/handed-off"]
    if kinds[:1] != [{"kind": "aborted", "cause": "handoff"}] or len(offs) != 1:
        raise SystemExit(f"unexpected log: turn ends {kinds}, {len(offs)} hand-off records")
    stop = max(n for n, r in enumerate(records[: offs[0]]) if r["type"] == "turn/end")
    stopped = records[stop]["time"]
    return records[offs[0] + 1]["time"] - stopped, records[offs[0]]["time"] - stopped


def span(values: list[float], scale: float = 1.0, unit: str = "") -> str:
    return f"{min(values) * scale:.0f}-{max(values) * scale:.0f}{unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--grace", type=float, default=0.0)
    parser.add_argument("--ttl", type=float, default=15.0)
    parser.add_argument("--takers", type=int, default=1)
    args = parser.parse_args()
    rounds: list[Round] = []
    for number in range(1, args.rounds + 1):
        result = one_round(args.sessions, args.grace, args.ttl, args.takers)
        rounds.append(result)
        print(
            f"round {number}: {args.sessions} sessions, lost {result.lost}, doubled "
            f"{result.doubled}, follower {'exact' if result.follower_ok else 'WRONG'}, "
            f"pause median {statistics.median(result.pauses) * 1000:.0f} ms, max "
            f"{max(result.pauses) * 1000:.0f} ms (of which until the hand-off record: median "
            f"{statistics.median(result.releases) * 1000:.0f} ms), drain "
            f"{result.drain_s:.2f} s (the command returned at {result.command_s:.2f} s, "
            f"the drained worker exited at {result.exit_s:.2f} s), "
            f"drain command and worker {'exit 0' if result.drained_ok else 'FAILED'}",
            flush=True,
        )
    medians = [statistics.median(r.pauses) for r in rounds]
    worst = [max(r.pauses) for r in rounds]
    print(
        f"over {len(rounds)} rounds (load average {os.getloadavg()[0]:.1f}): lost "
        f"{sum(r.lost for r in rounds)}, doubled {sum(r.doubled for r in rounds)}, "
        f"pause median {span(medians, 1000, ' ms')}, max {span(worst, 1000, ' ms')}, "
        f"drain {min(r.drain_s for r in rounds):.2f}-{max(r.drain_s for r in rounds):.2f} s"
    )


if __name__ == "__main__":
    main()
