"""The Anthropic adapter against a fake Messages API server."""

from __future__ import annotations

import contextlib

import pytest

from tests.adapters.fake_server import FakeServer, error, stream
from tests.adapters.support import (
    KEY,
    WEATHER,
    anthropic_text,
    ask,
    block_delta,
    block_start,
    block_stop,
    collect,
    message_end,
    message_start,
    mount_anthropic,
)
from tether.content import (
    AssistantMessage,
    ImageRef,
    ReasoningBlock,
    RedactedReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolMessage,
    UserRoleMessage,
)
from tether.llm.assemble import assemble
from tether.llm.chunks import Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from tether.llm.service import LLM
from tether.runtime import CancelSignal, Runtime

MODEL = "anthropic:claude-test"

CACHED = {"type": "ephemeral"}


async def test_text_streams_as_deltas_then_usage_then_stop(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_anthropic(runtime, server)
    server.queue(stream(anthropic_text("Hello!")))

    chunks = await collect(llm, ask(model=MODEL))

    assert chunks == [TextDelta("Hello!"), Usage(10, 7), Finish("stop")]


async def test_request_carries_headers_system_tools_and_max_tokens(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_anthropic(runtime, server, max_tokens=1000)
    server.queue(stream(anthropic_text("ok")))

    await collect(llm, ask("weather?", model=MODEL, tools=[WEATHER], system="Be brief."))

    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert request.json == {
        "model": "claude-test",
        "max_tokens": 1000,
        "stream": True,
        # Breakpoints of the prompt cache: the system prompt (after the tools), and
        # the end of the conversation.
        "system": [{"type": "text", "text": "Be brief.", "cache_control": CACHED}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "weather?", "cache_control": CACHED}],
            }
        ],
        "tools": [
            {
                "name": "weather",
                "description": "Look up the weather.",
                "input_schema": dict(WEATHER.parameters),
            }
        ],
    }


async def test_tool_use_input_streams_in_fragments_and_assembles(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_anthropic(runtime, server)
    server.queue(
        stream(
            [
                message_start(),
                block_start(0, {"type": "text", "text": ""}),
                block_delta(0, {"type": "text_delta", "text": "Checking."}),
                block_stop(0),
                block_start(
                    1, {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}
                ),
                block_delta(1, {"type": "input_json_delta", "partial_json": ""}),
                block_delta(1, {"type": "input_json_delta", "partial_json": '{"city": '}),
                block_delta(1, {"type": "input_json_delta", "partial_json": '"Oslo"}'}),
                block_stop(1),
                *message_end("tool_use"),
            ]
        )
    )

    chunks = await collect(llm, ask(model=MODEL, tools=[WEATHER]))

    assert ToolCallDelta(1, "toolu_1", "weather", "") in chunks
    result = assemble(chunks)
    assert result.message.content == (
        TextBlock("Checking."),
        ToolCallBlock("toolu_1", "weather", {"city": "Oslo"}),
    )
    assert result.finish == Finish("tool-calls")


async def test_thinking_streams_as_reasoning_with_its_signature(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_anthropic(runtime, server, thinking_budget=2048)
    server.queue(
        stream(
            [
                message_start(input_tokens=4, cache_read_input_tokens=6),
                block_start(0, {"type": "thinking", "thinking": ""}),
                block_delta(0, {"type": "thinking_delta", "thinking": "Hmm, "}),
                block_delta(0, {"type": "thinking_delta", "thinking": "easy."}),
                block_delta(0, {"type": "signature_delta", "signature": "sig-1"}),
                block_stop(0),
                block_start(1, {"type": "text", "text": ""}),
                block_delta(1, {"type": "text_delta", "text": "42"}),
                block_stop(1),
                *message_end("end_turn", output_tokens=12),
            ]
        )
    )

    chunks = await collect(llm, ask(model=MODEL))

    assert chunks[:3] == [
        ReasoningDelta("Hmm, "),
        ReasoningDelta("easy."),
        ReasoningDelta("", "sig-1"),
    ]
    assert chunks[-2] == Usage(10, 12, cached_tokens=6)
    assert assemble(chunks).message.content == (
        ReasoningBlock("Hmm, easy.", "sig-1"),
        TextBlock("42"),
    )
    assert server.requests[0].json["thinking"] == {"type": "enabled", "budget_tokens": 2048}


async def test_redacted_and_whole_thinking_blocks_keep_their_data_and_signature(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_anthropic(runtime, server, thinking_budget=2048)
    server.queue(
        stream(
            [
                message_start(),
                block_start(0, {"type": "redacted_thinking", "data": "opaque=="}),
                block_stop(0),
                block_start(1, {"type": "thinking", "thinking": "whole", "signature": "sig-w"}),
                block_stop(1),
                block_start(2, {"type": "text", "text": "done"}),
                block_stop(2),
                *message_end("end_turn"),
            ]
        )
    )

    chunks = await collect(llm, ask(model=MODEL))

    assert assemble(chunks).message.content == (
        RedactedReasoningBlock("opaque=="),
        ReasoningBlock("whole", "sig-w"),
        TextBlock("done"),
    )


async def test_history_maps_tool_results_thinking_and_images(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_anthropic(runtime, server)
    server.queue(stream(anthropic_text("ok")))
    history = (
        UserRoleMessage((TextBlock("what is this?"), ImageRef("data:image/png;base64,AAAA"))),
        AssistantMessage(
            (
                ReasoningBlock("signed", "sig-9"),
                ReasoningBlock("unsigned"),
                TextBlock(""),
                ToolCallBlock("toolu_1", "weather", {"city": "Oslo"}),
                ToolCallBlock("toolu_2", "weather", {"city": "Rome"}),
            )
        ),
        ToolMessage("toolu_1", "weather", "snow", is_error=False),
        ToolMessage("toolu_2", "weather", "no such city", is_error=True),
    )

    await collect(llm, ask("thanks", model=MODEL, messages=history))

    assert server.requests[0].json["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "signed", "signature": "sig-9"},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
                {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "snow",
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "no such city",
                    "is_error": True,
                },
                {"type": "text", "text": "thanks", "cache_control": CACHED},
            ],
        },
    ]


async def test_a_tool_result_with_images_holds_its_text_and_image_blocks(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_anthropic(runtime, server)
    server.queue(stream(anthropic_text("a cat")))
    history = (
        AssistantMessage((ToolCallBlock("toolu_1", "read", {"path": "cat.png"}),)),
        ToolMessage(
            "toolu_1",
            "read",
            "cat.png: image/png, 3 bytes (the image is attached)",
            is_error=False,
            images=(ImageRef.inline("image/png", b"cat"),),
        ),
    )

    await collect(llm, ask("", model=MODEL, messages=history))

    assert server.requests[0].json["messages"][1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [
                    {"type": "text", "text": "cat.png: image/png, 3 bytes (the image is attached)"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "Y2F0"},
                    },
                ],
                "is_error": False,
                "cache_control": CACHED,
            }
        ],
    }


@pytest.mark.parametrize(
    ("status", "provider_error", "code"),
    [
        (401, ("authentication_error", "invalid x-api-key"), "auth"),
        (403, ("permission_error", "no access"), "auth"),
        (429, ("rate_limit_error", "slow down"), "rate-limit"),
        (529, ("overloaded_error", "Overloaded"), "server"),
        (500, ("api_error", "internal"), "server"),
        (
            400,
            ("invalid_request_error", "prompt is too long: 210000 tokens > 200000"),
            "context-overflow",
        ),
        (400, ("invalid_request_error", "messages: field required"), "bad-request"),
        (413, ("request_too_large", "too large"), "context-overflow"),
    ],
)
async def test_error_statuses_map_to_codes(
    server: FakeServer,
    runtime: Runtime,
    status: int,
    provider_error: tuple[str, str],
    code: str,
) -> None:
    error_type, message = provider_error
    llm, _ = await mount_anthropic(runtime, server)
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    server.queue(error(status, body, {"retry-after": "3"}))

    (finish,) = await collect(llm, ask(model=MODEL))

    assert isinstance(finish, Finish)
    assert (finish.reason, finish.error_code, finish.retry_after) == ("error", code, 3.0)
    assert finish.error is not None and message in finish.error


async def test_error_event_mid_stream_ends_with_its_code(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_anthropic(runtime, server)
    server.queue(
        stream(
            [
                message_start(),
                block_start(0, {"type": "text", "text": ""}),
                block_delta(0, {"type": "text_delta", "text": "Par"}),
                (
                    "error",
                    {
                        "type": "error",
                        "error": {"type": "overloaded_error", "message": "Overloaded"},
                    },
                ),
            ]
        )
    )

    chunks = await collect(llm, ask(model=MODEL))

    assert chunks[0] == TextDelta("Par")
    finish = chunks[-1]
    assert isinstance(finish, Finish) and finish.error_code == "server"


async def test_disconnect_mid_stream_is_a_transport_error(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_anthropic(runtime, server)
    server.queue(stream(anthropic_text("cut")[:3], end=False))

    finish = (await collect(llm, ask(model=MODEL)))[-1]

    assert isinstance(finish, Finish) and finish.error_code == "transport"


async def test_max_tokens_and_refusal_stop_reasons(server: FakeServer, runtime: Runtime) -> None:
    llm, _ = await mount_anthropic(runtime, server)
    server.queue(stream([message_start(), *message_end("max_tokens")]))
    server.queue(stream([message_start(), *message_end("refusal")]))

    truncated = (await collect(llm, ask(model=MODEL)))[-1]
    refused = (await collect(llm, ask(model=MODEL)))[-1]

    assert truncated == Finish("max-tokens")
    assert refused == Finish("refusal")


async def test_missing_key_is_an_auth_error(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.llm import service as llm_plugin
    from tether.llm.adapters import anthropic as anthropic_plugin

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("TETHER_API_KEY", raising=False)
    await runtime.ctx.plugin(llm_plugin)
    await runtime.ctx.plugin(anthropic_plugin)

    finish = (await collect(runtime.ctx.get(LLM), ask(model="anthropic")))[-1]

    assert isinstance(finish, Finish) and finish.error_code == "auth"
    assert finish.error is not None and "ANTHROPIC_API_KEY" in finish.error


async def test_cancel_mid_stream_closes_the_connection(
    server: FakeServer, runtime: Runtime
) -> None:
    import asyncio

    llm, _ = await mount_anthropic(runtime, server)
    events = anthropic_text("streaming")[:4]
    server.queue(stream(events, hold=asyncio.Event()))
    signal = CancelSignal()
    chunks = []

    async with contextlib.aclosing(llm.stream(ask(model=MODEL), signal)) as answer:
        async for chunk in answer:
            chunks.append(chunk)
            if isinstance(chunk, TextDelta):
                signal.cancel("user")

    assert chunks == [TextDelta("streaming"), Finish("aborted")]
    await server.all_closed()


async def test_message_delta_nulls_keep_the_message_start_figures(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_anthropic(runtime, server)
    ending = message_end("end_turn", output_tokens=12)
    ending[0][1]["usage"] = {
        "input_tokens": None,
        "cache_read_input_tokens": None,
        "cache_creation_input_tokens": None,
        "output_tokens": 12,
    }
    start = message_start(4, cache_read_input_tokens=30, cache_creation_input_tokens=6)
    server.queue(stream([start, *anthropic_text("Hi")[1:-2], *ending]))

    chunks = await collect(llm, ask(model=MODEL))

    usage = chunks[-2]
    assert usage == Usage(40, 12, cached_tokens=30, cache_creation_tokens=6)
    assert isinstance(usage, Usage) and usage.figures() == {
        "input_tokens": 40,
        "output_tokens": 12,
        "cached_input_tokens": 30,
        "cache_creation_input_tokens": 6,
    }
