"""Builders of provider wire payloads, and a runtime with an adapter pointed at the fake server."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from tests.adapters.fake_server import FakeServer
from tether.content import Message, TextBlock, UserRoleMessage
from tether.llm import service as llm_plugin
from tether.llm.adapters import anthropic as anthropic_plugin
from tether.llm.adapters import openai as openai_plugin
from tether.llm.chunks import StreamChunk
from tether.llm.request import ModelRequest, ToolSpec
from tether.llm.service import LLM, LlmView
from tether.runtime import CancelSignal, Fiber, Runtime

KEY = "sk-test-5e3c7a1f0b9d4c28"
"""The API key the tests configure; it must never show up anywhere it is not sent."""

WEATHER = ToolSpec(
    "weather",
    "Look up the weather.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def ask(
    text: str = "hi",
    *,
    model: str = "openai-compatible:test-model",
    messages: Sequence[Message] = (),
    tools: Sequence[ToolSpec] = (),
    system: str | None = None,
    max_tokens: int | None = None,
) -> ModelRequest:
    return ModelRequest(
        model=model,
        messages=(*messages, UserRoleMessage((TextBlock(text),))) if text else tuple(messages),
        tools=tuple(tools),
        system=system,
        max_tokens=max_tokens,
    )


async def collect(
    llm: LlmView, request: ModelRequest, signal: CancelSignal | None = None
) -> list[StreamChunk]:
    chunks: list[StreamChunk] = []
    async with contextlib.aclosing(llm.stream(request, signal or CancelSignal())) as stream:
        async for chunk in stream:
            chunks.append(chunk)
    return chunks


def _root(server: FakeServer | str) -> str:
    return server if isinstance(server, str) else server.url


async def mount_openai(
    runtime: Runtime,
    server: FakeServer | str,
    *,
    provider: str = "openai-compatible",
    key: str | None = KEY,
    **config: Any,
) -> tuple[LlmView, Fiber]:
    """The ``llm`` service with the OpenAI-compatible plugin; ``provider`` points at ``server``."""
    await runtime.ctx.plugin(llm_plugin)
    entry: dict[str, Any] = {"base_url": f"{_root(server)}/v1"}
    if key is not None:
        entry["api_key"] = key
    providers = {provider: entry, **config.pop("providers", {})}
    fiber = await runtime.ctx.plugin(openai_plugin, {"providers": providers, **config})
    return runtime.ctx.get(LLM), fiber


async def mount_anthropic(
    runtime: Runtime, server: FakeServer | str, **config: Any
) -> tuple[LlmView, Fiber]:
    await runtime.ctx.plugin(llm_plugin)
    fiber = await runtime.ctx.plugin(
        anthropic_plugin, {"base_url": f"{_root(server)}/v1", "api_key": KEY, **config}
    )
    return runtime.ctx.get(LLM), fiber


# -- Chat Completions payloads --------------------------------------------------------------


def delta(
    content: str | None = None,
    *,
    reasoning: str | None = None,
    calls: Sequence[dict[str, Any]] = (),
    finish: str | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with one choice."""
    body: dict[str, Any] = {}
    if content is not None:
        body["content"] = content
    if reasoning is not None:
        body["reasoning_content"] = reasoning
    if calls:
        body["tool_calls"] = list(calls)
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": body, "finish_reason": finish}],
    }


def call(
    index: int, arguments: str, *, id: str | None = None, name: str | None = None
) -> dict[str, Any]:
    """One tool-call fragment of a delta."""
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    fragment: dict[str, Any] = {"index": index, "function": function}
    if id is not None:
        fragment["id"] = id
        fragment["type"] = "function"
    return fragment


LLAMA_OVERFLOW = {
    "code": 400,
    "message": "request (9412 tokens) exceeds the available context size (8192 tokens), "
    "try increasing it",
    "type": "exceed_context_size_error",
    "n_prompt_tokens": 9412,
    "n_ctx": 8192,
}
"""The error llama.cpp's server reports for a prompt longer than its context."""


def usage(prompt: int, completion: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, **extra},
    }


def text_answer(text: str, *, pieces: int = 3) -> list[object]:
    """A whole streamed text answer: deltas, the finish, usage, ``[DONE]``."""
    size = max(1, len(text) // pieces)
    events: list[object] = [delta(text[i : i + size]) for i in range(0, len(text), size)]
    return [*events, delta(finish="stop"), usage(5, len(text.split())), "[DONE]"]


# -- Anthropic Messages events ---------------------------------------------------------------


def message_start(input_tokens: int = 10, **usage: int) -> tuple[str, dict[str, Any]]:
    return (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [],
                "usage": {"input_tokens": input_tokens, "output_tokens": 1, **usage},
            },
        },
    )


def block_start(index: int, block: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def block_delta(index: int, delta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def block_stop(index: int) -> tuple[str, dict[str, Any]]:
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


def message_end(stop_reason: str, output_tokens: int = 7) -> list[tuple[str, dict[str, Any]]]:
    return [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


def anthropic_text(text: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        ("ping", {"type": "ping"}),
        block_delta(0, {"type": "text_delta", "text": text}),
        block_stop(0),
        *message_end("end_turn"),
    ]
