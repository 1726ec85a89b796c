"""Normalized stream chunks: what every model adapter yields, whatever its wire format.

An adapter turns its provider's stream into these values so that the agent loop
and the :class:`~tether.llm.assemble.Assembler` deal with one vocabulary:

* :class:`TextDelta` and :class:`ReasoningDelta` carry text as it streams;
* :class:`RedactedReasoning` carries a reasoning block the provider sent
  encrypted, whole;
* :class:`ToolCallDelta` carries one fragment of a tool call, keyed by the
  call's ``index`` within the answer;
* :class:`Usage` reports token counts (the last one of a stream wins);
* :class:`Finish` ends the stream, and says why.

A well-formed stream ends with exactly one :class:`Finish` and has nothing
after it; :meth:`tether.llm.service.LlmService.stream` guarantees that shape to
its callers whatever the adapter did.
"""

from __future__ import annotations

from typing import Literal, get_args

import msgspec

__all__ = [
    "FINISH_REASONS",
    "Finish",
    "FinishReason",
    "ReasoningDelta",
    "RedactedReasoning",
    "StreamChunk",
    "TextDelta",
    "ToolCallDelta",
    "Usage",
]


class TextDelta(msgspec.Struct, frozen=True):
    """A piece of the answer's text."""

    text: str


class ReasoningDelta(msgspec.Struct, frozen=True):
    """A piece of the model's reasoning.

    ``signature`` is the provider's opaque replay token for the reasoning block
    this delta belongs to; providers send it once, usually on the last delta.
    """

    text: str
    signature: str | None = None


class RedactedReasoning(msgspec.Struct, frozen=True):
    """A whole reasoning block the provider sent encrypted: ``data`` is its opaque form.

    It becomes a :class:`~tether.content.RedactedReasoningBlock` of the answer,
    which the provider wants back unchanged in the requests that continue it.
    """

    data: str


class ToolCallDelta(msgspec.Struct, frozen=True):
    """A fragment of the tool call at position ``index`` of the answer.

    ``id`` and ``name`` arrive on the first fragment of an index (later ones
    usually carry ``None``); ``args_delta`` is the next piece of the call's
    arguments, a JSON text that is only complete once the stream has moved on.

    Raises:
        ValueError: ``index`` is negative.
    """

    index: int
    id: str | None
    name: str | None
    args_delta: str

    def __post_init__(self) -> None:
        if self.index < 0:
            raise ValueError(f"ToolCallDelta.index must be >= 0, got {self.index}")


class Usage(msgspec.Struct, frozen=True):
    """Token counts of one request, as the provider reported them.

    ``input_tokens`` counts the whole prompt, cached parts included;
    ``cached_tokens`` is the part read from the provider's prompt cache and
    ``cache_creation_tokens`` the part written to it (Anthropic reports it;
    it is billed apart). ``output_tokens`` includes ``reasoning_tokens``.
    The optional counts are ``None`` when the provider does not report them
    (not zero: zero is a report).
    """

    input_tokens: int
    output_tokens: int
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    cache_creation_tokens: int | None = None

    def figures(self) -> dict[str, int]:
        """Every reported count by its stored name (``assistant/message`` ``usage``)."""
        figures = {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}
        if self.reasoning_tokens is not None:
            figures["reasoning_tokens"] = self.reasoning_tokens
        if self.cached_tokens is not None:
            figures["cached_input_tokens"] = self.cached_tokens
        if self.cache_creation_tokens is not None:
            figures["cache_creation_input_tokens"] = self.cache_creation_tokens
        return figures


FinishReason = Literal["stop", "tool-calls", "max-tokens", "refusal", "error", "aborted"]
"""Why a stream ended: the model stopped, it called tools, it ran out of output
tokens, the provider refused to answer (the model declined, or a content
filter stopped the answer), the request failed, or the caller cancelled it."""

FINISH_REASONS: tuple[FinishReason, ...] = get_args(FinishReason)


class Finish(msgspec.Struct, frozen=True):
    """The end of a stream.

    ``error`` (a human-readable message) and ``error_code`` (a short code, such
    as the normalized ``"rate-limit"`` of :mod:`tether.llm.adapters.errors`)
    describe an ``"error"`` finish; they are ``None`` otherwise.
    ``retry_after`` is the provider's hint, in seconds, of when a retry may
    succeed (HTTP ``Retry-After``), or ``None`` when it gave none.

    Raises:
        ValueError: ``reason`` is not one of :data:`FINISH_REASONS`.
    """

    reason: FinishReason
    error: str | None = None
    error_code: str | None = None
    retry_after: float | None = None

    def __post_init__(self) -> None:
        # The loop branches on the reason; a misspelt one must not pass as "stop".
        if self.reason not in FINISH_REASONS:
            raise ValueError(
                f"Finish.reason must be one of {', '.join(FINISH_REASONS)}; got {self.reason!r}"
            )


StreamChunk = TextDelta | ReasoningDelta | RedactedReasoning | ToolCallDelta | Usage | Finish
"""Any chunk of a normalized model stream."""
