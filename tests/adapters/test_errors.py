"""Error normalization: codes, provider messages, Retry-After, key scrubbing."""

from __future__ import annotations

import email.utils

import pytest

from tether.llm.adapters.errors import (
    ERROR_CODES,
    RETRYABLE,
    classify_status,
    error_message,
    parse_retry_after,
    redact,
)


def test_retryable_codes_are_the_transient_ones() -> None:
    assert set(RETRYABLE) == {"rate-limit", "server", "timeout", "transport"}
    assert set(RETRYABLE) < set(ERROR_CODES)


@pytest.mark.parametrize(
    ("status", "message", "error_type", "code"),
    [
        (401, "", None, "auth"),
        (402, "", None, "auth"),
        (403, "", None, "auth"),
        (408, "", None, "timeout"),
        (409, "", None, "server"),
        (413, "", None, "context-overflow"),
        (429, "", None, "rate-limit"),
        (429, "", "insufficient_quota", "auth"),
        (500, "", None, "server"),
        (529, "", "overloaded_error", "server"),
        (400, "", None, "bad-request"),
        (
            400,
            "prompt is too long: 3 tokens > 2 maximum",
            "invalid_request_error",
            "context-overflow",
        ),
        (400, "the request exceeds the available context size", None, "context-overflow"),
        (400, "", "context_length_exceeded", "context-overflow"),
        (404, "", None, "bad-request"),
    ],
)
def test_status_and_provider_type_classify_into_one_code(
    status: int, message: str, error_type: str | None, code: str
) -> None:
    assert classify_status(status, message, error_type) == code


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"error": {"message": "bad key", "type": "auth_error"}}', ("bad key", "auth_error")),
        (
            b'{"error": {"message": "quota", "code": "insufficient_quota"}}',
            ("quota", "insufficient_quota"),
        ),
        (b'{"error": "plain"}', ("plain", None)),
        (b'{"message": "flat"}', ("flat", None)),
        (b"Bad Gateway", ("Bad Gateway", None)),
        (b"", ("no error message", None)),
    ],
)
def test_error_message_reads_the_common_body_shapes(
    body: bytes, expected: tuple[str, str | None]
) -> None:
    assert error_message(body) == expected


def test_error_message_shortens_a_huge_body() -> None:
    message, _ = error_message(b"x" * 10_000)
    assert len(message) < 600


def test_retry_after_reads_seconds_milliseconds_and_http_dates() -> None:
    assert parse_retry_after({"retry-after": "12"}) == 12.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "200", "retry-after": "9"}) == 0.2
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=now) == pytest.approx(30.0)
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert parse_retry_after({"retry-after": past}, now=now) == 0.0


@pytest.mark.parametrize("value", ["soon", "-3", "nan", "inf", ""])
def test_unusable_retry_after_is_none(value: str) -> None:
    assert parse_retry_after({"retry-after": value}) is None


def test_redact_scrubs_every_occurrence_of_the_key() -> None:
    assert redact("key sk-1 and sk-1 again", "sk-1") == "key [redacted] and [redacted] again"
    assert redact("nothing", None) == "nothing"
