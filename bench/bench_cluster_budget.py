"""What the cluster budget costs a model request, and how hosts reserving at once fare.

Usage: python bench/bench_cluster_budget.py [--requests N] [--runs N] [--hosts N]

Against the PostgreSQL server of the tests (``$TETHER_TEST_DATABASE_URL``,
default the local one), in a schema of its own dropped afterwards. Each run
times ``--requests`` reservations written as a host writes them (one batch of
one ``budget/reserved`` event, then its settlement), once without a cluster
claim and once with one (the day's row taken in the batch's transaction, and
the decision read after the commit), alternating so the machine's drift falls
on both; the figures are the per-request difference, as a range over the
runs. Then ``--hosts`` backends (one thread each, each its own host) reserve
against one small day until it is spent: it prints how many reservations
were granted, and how far past the limit the day went (never, by design).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import postgres
from tests.persist.factory import event, header

from tether.persist.backends.postgres import PostgresBackend

DAY = "2026-12-06"


RACE_DAY = "2026-12-07"
"""The day the hosts race for (nothing else reserves on it)."""


def batch(
    seq: int, rid: str, claim: bool, limit: int = 10**12, day: str = DAY
) -> list[dict[str, object]]:
    data: dict[str, object] = {"id": rid, "model": "m", "tokens": 1_000, "usd": None}
    data |= {"purpose": "step", "turn": 0}
    if claim:
        data["cluster"] = {"day": day, "usd": None, "tokens": limit}
    return [event(seq, "budget/reserved", data=data)]


def settle(seq: int, rid: str) -> list[dict[str, object]]:
    return [event(seq, "budget/settled", data={"id": rid, "tokens": 400, "usd": None})]


def timed(backend: PostgresBackend, session: str, requests: int, claim: bool) -> float:
    """Milliseconds a request: reserve (and read the decision), then settle."""
    backend.write(header(session), [])
    started = time.perf_counter()
    for n in range(requests):
        rid = f"r{n}"
        backend.write(header(session), batch(2 * n, rid, claim))
        if claim:
            outcome = backend.budget_outcome(session, rid)
            assert outcome is not None and outcome.granted
        backend.write(header(session), settle(2 * n + 1, rid))
    return (time.perf_counter() - started) * 1000 / requests


def race(schema: str, hosts: int, limit: int) -> tuple[int, int]:
    """``hosts`` hosts reserve 1,000 tokens at a time until refused; granted, reserved."""
    backends = [
        PostgresBackend(postgres.URL, schema=schema, host_id=f"h{n}", pool_size=2)
        for n in range(hosts)
    ]
    start = threading.Barrier(hosts)
    granted = [0] * hosts

    def reserve(n: int) -> None:
        start.wait()
        for seq in range(10**6):
            rid = f"x{seq}"
            backends[n].write(header(f"race{n}"), batch(seq, rid, True, limit, RACE_DAY))
            outcome = backends[n].budget_outcome(f"race{n}", rid)
            assert outcome is not None
            if not outcome.granted:
                return
            granted[n] += 1

    threads = [threading.Thread(target=reserve, args=(n,)) for n in range(hosts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    day = backends[0].budget_day(RACE_DAY)
    for backend in backends:
        backend.close()
    return sum(granted), day.reserved_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hosts", type=int, default=4)
    args = parser.parse_args()
    schema = postgres.new_schema()
    try:
        backend = PostgresBackend(postgres.URL, schema=schema, host_id="bench")
        try:
            added, plains = [], []
            for run in range(args.runs):
                plain = timed(backend, f"plain{run}", args.requests, claim=False)
                claimed = timed(backend, f"claimed{run}", args.requests, claim=True)
                added.append(claimed - plain)
                plains.append(plain)
        finally:
            backend.close()
        limit = 200_500
        granted, reserved = race(schema, args.hosts, limit)
    finally:
        postgres.drop(schema)
    print(f"{args.runs} runs of {args.requests} reserve+settle pairs (interleaved)")
    print(f"  without a claim: {min(plains):.2f}-{max(plains):.2f} ms a request")
    print(
        f"  a cluster claim adds {min(added):.2f}-{max(added):.2f} ms a request "
        f"(median {statistics.median(added):.2f} ms)"
    )
    print(
        f"  {args.hosts} hosts racing for a day of {limit:,} tokens, 1,000 a reservation: "
        f"{granted} granted, {reserved:,} reserved (over the limit: {max(0, reserved - limit)})"
    )


if __name__ == "__main__":
    main()
