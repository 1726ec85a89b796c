"""The cluster budget in the database: a reservation is granted or refused in the
transaction of the batch that logs it, so hosts racing for the last of a day never
both get it, and a settlement gives back what its request did not use."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests import postgres
from tests.persist.factory import event, header
from tether.persist.backends.postgres import PostgresBackend

DAY = "2026-12-06"


@pytest.fixture
def schema() -> Iterator[str]:
    name = postgres.new_schema()
    yield name
    postgres.drop(name)


def reserved(seq: int, rid: str, tokens: int, limit: int) -> dict[str, object]:
    claim = {"day": DAY, "usd": None, "tokens": limit}
    data = {"id": rid, "model": "m", "tokens": tokens, "usd": None, "purpose": "step"}
    return event(seq, "budget/reserved", data={**data, "turn": 0, "cluster": claim})


def settled(seq: int, rid: str, tokens: int) -> dict[str, object]:
    return event(seq, "budget/settled", data={"id": rid, "tokens": tokens, "usd": None})


def test_hosts_racing_for_the_last_of_the_day_never_both_get_it(schema: str) -> None:
    hosts = [
        PostgresBackend(postgres.URL, schema=schema, host_id=f"h{n}", pool_size=2) for n in range(4)
    ]
    start = threading.Barrier(len(hosts))
    granted: list[str] = []

    def reserve(host: PostgresBackend, n: int) -> None:
        session = f"s{n}"
        start.wait()
        for seq in range(8):
            rid = f"{session}-{seq}"
            host.write(header(session), [reserved(seq, rid, 1_000, 10_500)])
            outcome = host.budget_outcome(session, rid)
            assert outcome is not None
            if outcome.granted:
                granted.append(rid)

    try:
        threads = [threading.Thread(target=reserve, args=(host, n)) for n, host in enumerate(hosts)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        day = hosts[0].budget_day(DAY)
    finally:
        for host in hosts:
            host.close()
    # 32 reservations of 1,000 tokens asked for; exactly the 10 that fit were granted.
    assert len(granted) == 10
    assert day.reserved_tokens == 10_000
    assert day.spent_tokens == 0


def test_a_settlement_gives_back_what_its_request_did_not_use(schema: str) -> None:
    backend = PostgresBackend(postgres.URL, schema=schema, host_id="h")
    try:
        backend.write(header("s"), [reserved(0, "a", 6_000, 10_000)])
        refused = [reserved(1, "b", 6_000, 10_000)]
        backend.write(header("s"), refused)
        first, second = backend.budget_outcome("s", "a"), backend.budget_outcome("s", "b")
        assert first is not None and first.granted
        assert second is not None and not second.granted
        assert second.day.of("tokens") == 6_000
        # Settled at what was used: 1,000 of 6,000; the refused one at nothing.
        backend.write(header("s"), [settled(2, "a", 1_000), settled(3, "b", 0)])
        assert backend.budget_outcome("s", "a") is None
        assert backend.budget_outcome("s", "b") is None
        day = backend.budget_day(DAY)
        assert (day.spent_tokens, day.reserved_tokens) == (1_000, 0)
        backend.write(header("s"), [reserved(4, "c", 6_000, 10_000)])
        third = backend.budget_outcome("s", "c")
        assert third is not None and third.granted
    finally:
        backend.close()
