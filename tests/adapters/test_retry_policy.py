"""The retry policy: which errors, how long to wait, and its ``llm/retry`` event."""

from __future__ import annotations

import random

import pytest

from tether.loop.retry import RetryEvent, RetryPolicy
from tether.loop.turn import RequestError
from tether.session.attempts import retry_notice
from tether.session.errors import EventFormatError
from tether.session.events import Event
from tether.session.registry import EventRegistry


def failed(code: str | None, attempt: int = 1, retry_after: float | None = None) -> RequestError:
    return RequestError(error="boom", code=code, attempt=attempt, retry_after=retry_after)


@pytest.mark.parametrize("code", ["rate-limit", "server", "timeout", "transport"])
def test_transient_codes_are_retried(code: str) -> None:
    decision = RetryPolicy(jitter=0).decide(failed(code))
    assert decision.retry and decision.delay == 1.0


@pytest.mark.parametrize(
    "code", ["auth", "bad-request", "context-overflow", "unreachable", "endpoint", None, "mystery"]
)
def test_other_codes_are_not_retried(code: str | None) -> None:
    assert not RetryPolicy().decide(failed(code)).retry


def test_backoff_doubles_up_to_its_ceiling() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=3.0, jitter=0, max_attempts=100)
    delays = [policy.decide(failed("server", attempt)).delay for attempt in range(1, 7)]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]


def test_jitter_only_shortens_the_delay_within_its_share() -> None:
    policy = RetryPolicy(base_delay=4.0, jitter=0.5, rng=random.Random(7), max_attempts=100)
    delays = [policy.decide(failed("server", 1)).delay for _ in range(200)]
    assert all(2.0 <= delay <= 4.0 for delay in delays)
    assert len(set(delays)) > 100


def test_policies_compare_hash_and_show_by_their_settings_not_their_random_state() -> None:
    one = RetryPolicy(max_attempts=3, rng=random.Random(1))
    other = RetryPolicy(max_attempts=3, rng=random.Random(2))
    assert one == other and hash(one) == hash(other)
    assert len({one, other}) == 1
    assert one != RetryPolicy(max_attempts=4, rng=one.rng)
    assert "rng" not in repr(one) and "max_attempts=3" in repr(one)
    assert repr(one) == repr(other)


def test_attempts_are_capped() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert policy.decide(failed("server", 2)).retry
    assert not policy.decide(failed("server", 3)).retry


def test_a_timeout_is_retried_only_while_the_step_has_made_fewer_than_timeout_attempts() -> None:
    policy = RetryPolicy(max_attempts=5)
    first = policy.decide(failed("timeout", 1))
    assert first.retry and first.max_attempts == 2
    assert not policy.decide(failed("timeout", 2)).retry
    assert policy.decide(failed("server", 2)).retry
    assert policy.decide(failed("timeout", 3)).retry is False
    assert RetryPolicy(timeout_attempts=4).decide(failed("timeout", 3)).retry


def test_retry_after_is_a_floor_on_the_delay() -> None:
    policy = RetryPolicy(base_delay=1.0, jitter=0)
    assert policy.decide(failed("rate-limit", retry_after=12.0)).delay == 12.0
    assert policy.decide(failed("rate-limit", attempt=3, retry_after=0.5)).delay == 4.0


def test_retry_after_beyond_the_limit_gives_up() -> None:
    decision = RetryPolicy(max_retry_after=60).decide(failed("rate-limit", retry_after=3600))
    assert not decision.retry


def test_retry_event_round_trips_through_the_core_registry() -> None:
    payload = RetryEvent(attempt=2, code="server", error="busy", delay=1.5, retry_after=None)

    event = Event.from_payload(payload, seq=0, time=1.0)
    back = Event.from_record(event.to_record(), EventRegistry())

    assert back.payload == payload


def test_the_attempts_a_policy_allows_are_recorded_and_shown_in_the_notice() -> None:
    decision = RetryPolicy(max_attempts=4, jitter=0.0).decide(failed("server"))
    assert decision.retry and decision.max_attempts == 4
    payload = RetryEvent(
        attempt=1, code="server", error="busy", delay=1.0, max_attempts=decision.max_attempts
    )

    stored = Event.from_payload(payload, seq=0, time=1.0).to_record()
    back = Event.from_record(stored, EventRegistry())

    assert back.payload == payload
    assert retry_notice(stored["data"]) == "[retrying: busy, attempt 2/4]"
    unknown = RetryEvent(attempt=1, code="server", error="busy", delay=1.0)
    assert "max_attempts" not in Event.from_payload(unknown, seq=0, time=1.0).to_record()["data"]
    assert retry_notice(unknown.to_data()) == "[retrying: busy, attempt 2]"
    with pytest.raises(EventFormatError):
        RetryEvent(attempt=1, code="server", error="x", delay=1.0, max_attempts=0)


def test_retry_event_rejects_bad_fields() -> None:
    with pytest.raises(EventFormatError):
        RetryEvent(attempt=0, code="server", error="x", delay=1.0)
    with pytest.raises(EventFormatError):
        RetryEvent(attempt=1, code="server", error="x", delay=-1.0)


def test_stored_retry_events_load_without_the_plugin() -> None:
    record = {
        "type": "llm/retry",
        "seq": 0,
        "time": 1.0,
        "data": {"attempt": 1, "code": "server", "error": "x", "delay": 0.0, "retry_after": None},
    }

    event = Event.from_record(record, EventRegistry())

    assert event.payload == RetryEvent(attempt=1, code="server", error="x", delay=0.0)
