"""The Anthropic Messages wire format (streaming), both ways.

* :func:`request_body` maps a :class:`~tether.llm.request.ModelRequest` to the
  JSON body of ``POST {base_url}/messages`` with ``stream: true``.
* :class:`StreamDecoder` maps the named events of the answer
  (``message_start``, ``content_block_start``, ``content_block_delta``,
  ``message_delta``, ``message_stop``, ``error``; ``ping`` is ignored) to
  normalized :mod:`~tether.llm.chunks`.

Field names are the protocol's. How tether's messages map:

* tool results are ``tool_result`` blocks of a ``user`` message (a result
  with images holds its text and ``image`` blocks), and consecutive messages
  of one role are merged (the API wants the roles to alternate);
* reasoning goes back as ``thinking`` blocks with their ``signature``; a
  reasoning block without one (another provider's, or one cut off before its
  signature arrived) is left out, as the API rejects unsigned thinking;
* a ``redacted_thinking`` block is kept as a
  :class:`~tether.content.RedactedReasoningBlock` and goes back as it came,
  its ``data`` unchanged, in its place among the answer's blocks;
* empty text blocks are left out, and so is a message left with no content;
* the prompt cache: the system prompt and the last block of the last
  message carry ``cache_control`` breakpoints (``ephemeral``), so the tools
  and the system prompt (the same all session, see
  :mod:`tether.loop.prompt`) and then the conversation up to the last
  request are read from the cache (the API caches the prefix up to each
  breakpoint and finds the longest one cached).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.content import (
    AssistantMessage,
    ImageRef,
    ReasoningBlock,
    RedactedReasoningBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolMessage,
    UserRoleMessage,
)
from tether.llm.adapters.decoding import (
    closing_chunks,
    event_data,
    optional_count,
    stream_error,
)
from tether.llm.adapters.http import dumps
from tether.llm.chunks import (
    FinishReason,
    ReasoningDelta,
    RedactedReasoning,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from tether.llm.request import ModelRequest

if TYPE_CHECKING:
    from httpx_sse import ServerSentEvent

__all__ = ["ANTHROPIC_VERSION", "StreamDecoder", "request_body"]

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header this mapping follows."""

_USAGE_FIGURES = (
    "input_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "output_tokens",
)
"""The usage figures of the Messages API, each reported in ``message_start``
or ``message_delta`` (``input_tokens`` excludes the cached parts)."""

_FINISH: Mapping[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool-calls",
    "max_tokens": "max-tokens",
    "model_context_window_exceeded": "max-tokens",
    "refusal": "refusal",
}


def request_body(
    request: ModelRequest,
    *,
    model: str,
    max_tokens: int,
    thinking_budget: int | None = None,
) -> dict[str, object]:
    """The Messages API request for ``request``, sent to ``model``.

    ``max_tokens`` applies when the request sets none (the API requires one).
    With ``thinking_budget``, extended thinking is enabled with that budget.
    """
    system = [request.system] if request.system else []
    messages: list[dict[str, Any]] = []
    for message in request.messages:
        if isinstance(message, SystemMessage):
            system.append(message.text)
            continue
        role, content = _wire(message)
        if not content:
            continue
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(content)
        else:
            messages.append({"role": role, "content": content})
    _cache_breakpoint(messages)
    body: dict[str, object] = {
        "model": model,
        "max_tokens": request.max_tokens or max_tokens,
        "messages": messages,
        "stream": True,
    }
    if system:
        body["system"] = [{"type": "text", "text": "\n\n".join(system), "cache_control": _CACHED}]
    if request.tools:
        body["tools"] = [
            {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
            for tool in request.tools
        ]
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if thinking_budget is not None:
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget}
    return body


_CACHED = {"type": "ephemeral"}
_CACHEABLE = frozenset({"text", "image", "tool_result", "tool_use"})
"""The blocks that may carry ``cache_control`` (thinking blocks may not)."""


def _cache_breakpoint(messages: list[dict[str, Any]]) -> None:
    """Mark the last block of the last message as a cache breakpoint, when it may be one."""
    if not messages:
        return
    last = messages[-1]["content"][-1]
    if last.get("type") in _CACHEABLE:
        # The block may be shared by the next request's body: mark a copy.
        messages[-1]["content"][-1] = {**last, "cache_control": _CACHED}


def _wire(
    message: UserRoleMessage | AssistantMessage | ToolMessage,
) -> tuple[str, list[dict[str, object]]]:
    if isinstance(message, ToolMessage):
        content: str | list[dict[str, object]] = message.content
        if message.images:
            parts: list[dict[str, object]] = []
            if message.content:
                parts.append({"type": "text", "text": message.content})
            content = parts + [_image_block(image) for image in message.images]
        return "user", [
            {
                "type": "tool_result",
                "tool_use_id": message.call_id,
                "content": content,
                "is_error": message.is_error,
            }
        ]
    if isinstance(message, UserRoleMessage):
        return "user", [_user_block(block) for block in message.content if _has_content(block)]
    blocks: list[dict[str, object]] = []
    for block in message.content:
        if isinstance(block, ReasoningBlock):
            if block.signature:
                blocks.append(
                    {"type": "thinking", "thinking": block.text, "signature": block.signature}
                )
        elif isinstance(block, RedactedReasoningBlock):
            blocks.append({"type": "redacted_thinking", "data": block.data})
        elif isinstance(block, ToolCallBlock):
            blocks.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": block.arguments}
            )
        elif block.text:
            blocks.append({"type": "text", "text": block.text})
    return "assistant", blocks


def _has_content(block: TextBlock | ImageRef) -> bool:
    return isinstance(block, ImageRef) or bool(block.text)


def _user_block(block: TextBlock | ImageRef) -> dict[str, object]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    return _image_block(block)


def _image_block(block: ImageRef) -> dict[str, object]:
    if block.url.startswith("data:"):
        header, _, data = block.url.partition(",")
        media_type = header[len("data:") :].partition(";")[0] or block.mime_type or "image/png"
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }
    return {"type": "image", "source": {"type": "url", "url": block.url}}


class StreamDecoder:
    """Folds the events of one answer into stream chunks.

    The :class:`Usage` and :class:`Finish` come from :meth:`end`, once the
    stream is over.
    """

    __slots__ = (
        "_figures",
        "_stop_reason",
        "_tool_blocks",
        "_usage_seen",
        "done",
        "provider",
    )

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.done = False
        """True once ``message_stop`` arrived."""
        self._stop_reason: str | None = None
        self._figures: dict[str, int] = {}
        """The usage figures reported so far, by their wire names."""
        self._usage_seen = False
        self._tool_blocks: set[int] = set()

    def feed(self, event: ServerSentEvent) -> list[StreamChunk]:
        """The chunks one event carries.

        Raises:
            ProviderError: an ``error`` event, or data that is not JSON.
        """
        data = event_data(self.provider, event.data)
        if not isinstance(data, dict):
            return []
        kind = data.get("type") or event.event
        if kind == "content_block_delta":
            return self._delta(data)
        if kind == "content_block_start":
            return self._block_start(data)
        if kind == "message_start":
            message = data.get("message")
            if isinstance(message, dict) and isinstance(message.get("usage"), dict):
                self._read_usage(message["usage"])
        elif kind == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self._stop_reason = delta["stop_reason"]
            if isinstance(data.get("usage"), dict):
                self._read_usage(data["usage"])
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise stream_error(self.provider, data.get("error"))
        return []

    def end(self) -> list[StreamChunk]:
        """The closing chunks: the usage (if reported), then the finish.

        Raises:
            ProviderError: the stream ended before a stop reason
                (``transport``), or with one that reports a failure.
        """
        figures = self._figures
        read = figures.get("cache_read_input_tokens")
        written = figures.get("cache_creation_input_tokens")
        usage = Usage(
            figures.get("input_tokens", 0) + (read or 0) + (written or 0),
            figures.get("output_tokens", 0),
            cached_tokens=read,
            cache_creation_tokens=written,
        )
        return closing_chunks(
            self.provider,
            self._stop_reason,
            finishes=_FINISH,
            failures={},
            called_tools=bool(self._tool_blocks),
            usage=usage if self._usage_seen else None,
        )

    def _block_start(self, data: dict[str, Any]) -> list[StreamChunk]:
        index = data.get("index")
        block = data.get("content_block")
        if not isinstance(index, int) or index < 0 or not isinstance(block, dict):
            return []
        kind = block.get("type")
        if kind == "tool_use":
            self._tool_blocks.add(index)
            call_id, name, given = block.get("id"), block.get("name"), block.get("input")
            return [
                ToolCallDelta(
                    index,
                    call_id if isinstance(call_id, str) else None,
                    name if isinstance(name, str) else None,
                    # The API streams the input as deltas and starts with {};
                    # a server that sends it whole here is taken at its word.
                    dumps(given) if isinstance(given, dict) and given else "",
                )
            ]
        if kind == "text" and isinstance(block.get("text"), str) and block["text"]:
            return [TextDelta(block["text"])]
        if kind == "thinking":
            # The API streams thinking and its signature as deltas and starts
            # empty; a server that sends the block whole here is taken at its word.
            thinking, signature = block.get("thinking"), block.get("signature")
            text = thinking if isinstance(thinking, str) else ""
            signed = signature if isinstance(signature, str) and signature else None
            return [ReasoningDelta(text, signed)] if text or signed else []
        if kind == "redacted_thinking" and isinstance(block.get("data"), str):
            return [RedactedReasoning(block["data"])]
        return []

    def _delta(self, data: dict[str, Any]) -> list[StreamChunk]:
        delta = data.get("delta")
        if not isinstance(delta, dict):
            return []
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            return [TextDelta(text)] if isinstance(text, str) and text else []
        if kind == "thinking_delta":
            thinking = delta.get("thinking")
            return [ReasoningDelta(thinking)] if isinstance(thinking, str) and thinking else []
        if kind == "signature_delta":
            signature = delta.get("signature")
            return [ReasoningDelta("", signature)] if isinstance(signature, str) else []
        if kind == "input_json_delta":
            index = data.get("index")
            partial = delta.get("partial_json")
            if isinstance(index, int) and index in self._tool_blocks and isinstance(partial, str):
                return [ToolCallDelta(index, None, None, partial)] if partial else []
        return []

    def _read_usage(self, usage: dict[str, Any]) -> None:
        """Fold one usage report in: ``message_start`` has the input figures,
        ``message_delta`` the cumulative output (and, from some servers, the
        input again). A figure that is absent or ``null`` keeps what an earlier
        report said; it is not a report of zero."""
        self._usage_seen = True
        for name in _USAGE_FIGURES:
            count = optional_count(usage.get(name))
            if count is not None:
                # The output is reported cumulatively: the last report is the total.
                self._figures[name] = count
