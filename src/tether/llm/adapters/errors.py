"""Provider failures, normalized: one small vocabulary of codes for every adapter.

An adapter never lets a provider's error shape leak to the loop. It ends its
stream with ``Finish("error", error=<message>, error_code=<code>,
retry_after=<seconds>)``, where the code is one of :data:`ERROR_CODES`:

============================  =========================================  =========
code                          meaning                                    retryable
============================  =========================================  =========
``auth``                      missing, wrong or unentitled API key       no
``rate-limit``                the provider asks to slow down (HTTP 429)  yes
``server``                    the provider failed or is overloaded (5xx) yes
``timeout``                   connect or read timed out                  yes
``transport``                 the connection dropped or was cut          yes
``unreachable``               nothing answers at the base URL            no
``endpoint``                  the base URL is missing, invalid, or       no
                              answers but not as the provider's API
``context-overflow``          the conversation exceeds the context       no
``bad-request``               the provider rejected the request          no
============================  =========================================  =========

``unreachable`` is not retried: a refused connection, an unknown host or no
route says at once that the base URL is wrong or its server is not running,
where retries would only delay saying so.

The message keeps the provider's own words (its ``error.message`` when the
body has one) and never contains the API key: :func:`redact` scrubs it.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from typing import Literal, get_args

from tether.masking import mask_credentials

__all__ = [
    "ERROR_CODES",
    "RETRYABLE",
    "ErrorCode",
    "ProviderError",
    "classify_status",
    "error_message",
    "parse_retry_after",
    "redact",
]

ErrorCode = Literal[
    "auth",
    "rate-limit",
    "server",
    "timeout",
    "transport",
    "unreachable",
    "endpoint",
    "context-overflow",
    "bad-request",
]
"""A normalized provider failure; see the module docstring."""

ERROR_CODES: tuple[ErrorCode, ...] = get_args(ErrorCode)

RETRYABLE: frozenset[str] = frozenset({"rate-limit", "server", "timeout", "transport"})
"""The codes a retry may cure."""

REDACTED = "[redacted]"

_MESSAGE_CHARS = 500

# How providers say "the conversation is too long": OpenAI and vLLM ("maximum
# context length"), DeepSeek (the same), Anthropic ("prompt is too long"),
# llama.cpp ("exceeds the available context size").
_CONTEXT_OVERFLOW = re.compile(
    r"context[_ ]length|context window|context size|prompt is too long|too many tokens"
    r"|maximum context",
    re.IGNORECASE,
)

# Error types some providers put in the body (OpenAI ``error.code``/``type``,
# Anthropic ``error.type``), for the cases the status alone gets wrong.
_TYPED: Mapping[str, ErrorCode] = {
    "context_length_exceeded": "context-overflow",
    "exceed_context_size_error": "context-overflow",
    "insufficient_quota": "auth",
    "authentication_error": "auth",
    "permission_error": "auth",
    "rate_limit_error": "rate-limit",
    "overloaded_error": "server",
    "api_error": "server",
    "request_too_large": "context-overflow",
    "invalid_request_error": "bad-request",
    "not_found_error": "bad-request",
}


class ProviderError(Exception):
    """A failed request, normalized; adapters turn it into their stream's :class:`Finish`.

    ``message`` may quote the provider: scrub the key from it before it goes
    anywhere (:func:`tether.llm.adapters.endpoint.failure` does).
    """

    def __init__(self, code: ErrorCode, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.retry_after = retry_after


def classify_status(status: int, message: str = "", error_type: str | None = None) -> ErrorCode:
    """The code of an HTTP error response.

    ``error_type`` is the provider's own error code or type from the body, when
    it sent one; it decides where the status is ambiguous (a 429 that is an
    exhausted quota, a 400 that is a context overflow). Without one, a 400
    whose message reads like a context overflow is one.
    """
    typed = _TYPED.get(error_type or "")
    if typed is not None and typed != "bad-request":
        return typed
    if status in (400, 413, 422) and _CONTEXT_OVERFLOW.search(message):
        return "context-overflow"
    if status in (401, 402, 403):
        return "auth"
    if status == 408:
        return "timeout"
    if status == 413:
        return "context-overflow"
    if status == 429:
        return "rate-limit"
    if status == 409 or status >= 500:
        return "server"
    return "bad-request"


def error_message(body: bytes | str) -> tuple[str, str | None]:
    """The provider's message in an error body, and its error code or type if it gave one.

    Understands ``{"error": {"message", "code", "type"}}`` (OpenAI, DeepSeek,
    Anthropic), ``{"error": "text"}`` and ``{"message": ...}``; any other body
    is returned as text, shortened.
    """
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        parsed: object = json.loads(text)
    except ValueError:
        return _shorten(text.strip()) or "no error message", None
    return _message_of(parsed, text)


def _message_of(parsed: object, text: str) -> tuple[str, str | None]:
    if isinstance(parsed, Mapping):
        error = parsed.get("error", parsed)
        if isinstance(error, str):
            return _shorten(error), None
        if isinstance(error, Mapping):
            message = error.get("message")
            kind = error.get("code") or error.get("type")
            if isinstance(message, str) and message:
                return _shorten(message), kind if isinstance(kind, str) else None
    return _shorten(text.strip()) or "no error message", None


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait before retrying, from ``retry-after-ms`` or ``Retry-After``.

    ``Retry-After`` is either a number of seconds or an HTTP date. Returns
    ``None`` when neither header holds a usable value; never negative.
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        seconds = _number(millis)
        if seconds is not None:
            return seconds / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    import email.utils  # only a date needs it: keep it off the import path

    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def _number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced by ``[redacted]``, and the
    credentials of every URL in it masked."""
    text = mask_credentials(text)
    if not secret:
        return text
    return text.replace(secret, REDACTED)


def _shorten(text: str) -> str:
    if len(text) <= _MESSAGE_CHARS:
        return text
    return text[:_MESSAGE_CHARS].rstrip() + " …"
