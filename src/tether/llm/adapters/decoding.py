"""What the wire decoders share: the decoder protocol, event data, token counts, the close.

A decoder turns one answer's server-sent events into normalized chunks. Both
wire formats hold back the :class:`~tether.llm.chunks.Usage` and the
:class:`~tether.llm.chunks.Finish` until the stream is over (the usage comes
after the stop reason), and both report failures the same ways: an error
event, a stop reason that is really an error, or a stream that ends early.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from tether.llm.adapters.errors import ErrorCode, ProviderError, classify_status
from tether.llm.chunks import Finish, FinishReason, StreamChunk, Usage

if TYPE_CHECKING:
    from httpx_sse import ServerSentEvent

__all__ = [
    "Decoder",
    "closing_chunks",
    "event_data",
    "optional_count",
    "stream_error",
    "token_count",
]


class Decoder(Protocol):
    """Turns one wire format's events into stream chunks."""

    @property
    def done(self) -> bool:
        """True once the provider said the answer is complete."""
        ...

    def feed(self, event: ServerSentEvent) -> list[StreamChunk]:
        """The chunks one event carries.

        Raises:
            ProviderError: the event reports an error, or is malformed.
        """
        ...

    def end(self) -> list[StreamChunk]:
        """The closing chunks: the usage (if reported), then the finish.

        Raises:
            ProviderError: the stream ended before the model finished, or it
                finished with a stop reason that reports a failure.
        """
        ...


def event_data(provider: str, data: str) -> object:
    """The JSON value of an event's data (``{}`` when it has none).

    Raises:
        ProviderError: the data is not JSON (``server``: the provider broke
            its own protocol).
    """
    if not data:
        return {}
    try:
        return json.loads(data)
    except ValueError:
        raise ProviderError(
            "server", f"{provider}: the stream sent malformed data: {data[:200]!r}"
        ) from None


def stream_error(provider: str, error: object) -> ProviderError:
    """The failure an error event reports (``{"message", "type" or "code"}`` or text).

    A numeric ``code`` is the HTTP status the provider would have answered
    with (llama.cpp: ``{"code": 400, "type": "exceed_context_size_error",
    …}``) and classifies the error as that status would; without one, the
    error counts as a server failure unless its type or message says more.
    """
    kind: str | None = None
    status = 500
    text = str(error)
    if isinstance(error, Mapping):
        message = error.get("message")
        for field in ("code", "type"):
            value = error.get(field)
            if isinstance(value, str) and value and kind is None:
                kind = value
            elif isinstance(value, int) and not isinstance(value, bool) and 400 <= value < 600:
                status = value
        if isinstance(message, str) and message:
            text = message
    # An error inside a stream that had started: the request itself was fine.
    return ProviderError(
        classify_status(status, text, kind), f"{provider}: error in the stream: {text}"
    )


def token_count(value: object) -> int:
    """A token count as reported, or 0 for anything that is not a count."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def optional_count(value: object) -> int | None:
    """A count the provider may leave out: ``None`` when absent or ``null``, not zero."""
    return None if value is None else token_count(value)


def closing_chunks(
    provider: str,
    reason: str | None,
    *,
    finishes: Mapping[str, FinishReason],
    failures: Mapping[str, tuple[ErrorCode, str]],
    called_tools: bool,
    usage: Usage | None,
) -> list[StreamChunk]:
    """The usage and the finish for the provider's stop ``reason``.

    ``finishes`` maps stop reasons to finish reasons (others are ``"stop"``);
    ``failures`` maps those that report a failure to its code and message. A
    ``"stop"`` after tool calls is ``"tool-calls"`` (some servers say
    ``stop`` there).

    Raises:
        ProviderError: ``reason`` is ``None`` (``transport``: the stream was
            cut before the model finished) or one of ``failures``.
    """
    if reason is None:
        raise ProviderError("transport", f"{provider}: the stream ended before the model finished")
    failure = failures.get(reason)
    if failure is not None:
        code, message = failure
        raise ProviderError(code, f"{provider}: {message}")
    finish = finishes.get(reason, "stop")
    if finish == "stop" and called_tools:
        finish = "tool-calls"
    chunks: list[StreamChunk] = [] if usage is None else [usage]
    chunks.append(Finish(finish))
    return chunks
