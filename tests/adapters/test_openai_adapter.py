"""The OpenAI-compatible adapter against a fake Chat Completions server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from typing import Any

import pytest

from tests.adapters.fake_server import FakeServer, Recorded, Reply, error, stream
from tests.adapters.support import (
    KEY,
    WEATHER,
    ask,
    call,
    collect,
    delta,
    mount_openai,
    text_answer,
    usage,
)
from tether.content import (
    AssistantMessage,
    ImageRef,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolMessage,
    UserRoleMessage,
)
from tether.llm.assemble import assemble
from tether.llm.chunks import Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from tether.llm.service import LLM
from tether.runtime import CancelSignal, Runtime


async def test_text_streams_as_deltas_then_usage_then_stop(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(stream(text_answer("Hello there, world")))

    chunks = await collect(llm, ask())

    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "Hello there, world"
    assert chunks[-2:] == [Usage(5, 3), Finish("stop")]


async def test_request_carries_model_messages_tools_stream_options_and_bearer_key(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(stream(text_answer("ok")))

    await collect(llm, ask("weather?", tools=[WEATHER], system="Be brief.", max_tokens=64))

    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["accept"] == "text/event-stream"
    body = request.json
    assert body["model"] == "test-model"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 64
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "weather?"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Look up the weather.",
                "parameters": dict(WEATHER.parameters),
            },
        }
    ]


async def test_tool_call_fragments_split_across_chunks_assemble_by_index(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(
        stream(
            [
                delta(calls=[call(0, "", id="call_a", name="weather")]),
                delta(calls=[call(0, '{"ci')]),
                delta(calls=[call(1, "", id="call_b", name="weather")]),
                delta(calls=[call(1, '{"city": "Oslo"}')]),
                delta(calls=[call(0, 'ty": "Paris"}')]),
                delta(finish="tool_calls"),
                usage(9, 4),
                "[DONE]",
            ]
        )
    )

    chunks = await collect(llm, ask(tools=[WEATHER]))

    assert chunks[0] == ToolCallDelta(0, "call_a", "weather", "")
    result = assemble(chunks)
    assert result.message.tool_calls == (
        ToolCallBlock("call_a", "weather", {"city": "Paris"}),
        ToolCallBlock("call_b", "weather", {"city": "Oslo"}),
    )
    assert result.finish == Finish("tool-calls")


async def test_tool_calls_without_ids_or_index_get_unique_ids_and_decoded_arguments_pass(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    encoded = {"function": {"name": "weather", "arguments": '{"city": "Rome"}'}}
    decoded = {"function": {"name": "weather", "arguments": {"city": "Rome"}}}
    server.queue(stream([delta(calls=[encoded]), delta(finish="stop"), "[DONE]"]))
    server.queue(stream([delta(calls=[decoded]), delta(finish="stop"), "[DONE]"]))

    first = assemble(await collect(llm, ask(tools=[WEATHER])))
    second = assemble(await collect(llm, ask(tools=[WEATHER])))

    assert first.finish == Finish("tool-calls")
    (a,) = first.message.tool_calls
    (b,) = second.message.tool_calls
    assert a.arguments == b.arguments == {"city": "Rome"}
    assert a.id != b.id


async def test_reasoning_content_streams_as_reasoning_deltas(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(
        stream(
            [
                delta(reasoning="Let me "),
                delta(reasoning="think."),
                delta("Answer."),
                delta(finish="stop"),
                usage(
                    3,
                    8,
                    completion_tokens_details={"reasoning_tokens": 5},
                    prompt_cache_hit_tokens=2,
                ),
                "[DONE]",
            ]
        )
    )

    chunks = await collect(llm, ask())

    assert chunks[:3] == [ReasoningDelta("Let me "), ReasoningDelta("think."), TextDelta("Answer.")]
    assert chunks[-2] == Usage(3, 8, reasoning_tokens=5, cached_tokens=2)
    assert assemble(chunks).message.content == (
        ReasoningBlock("Let me think."),
        TextBlock("Answer."),
    )


_TOOL_ROUND = (
    UserRoleMessage((TextBlock("weather in Paris?"),)),
    AssistantMessage(
        (
            ReasoningBlock("I should call the tool."),
            ToolCallBlock("call_1", "weather", {"city": "Paris"}),
        )
    ),
    ToolMessage("call_1", "weather", "sunny", is_error=False),
    AssistantMessage((ReasoningBlock("Easy."), TextBlock("It is sunny."))),
)


@pytest.mark.parametrize(
    ("provider", "replayed"), [("deepseek", True), ("openai-compatible", True), ("openai", False)]
)
async def test_reasoning_is_sent_back_only_on_assistant_messages_that_called_tools(
    server: FakeServer, runtime: Runtime, provider: str, replayed: bool
) -> None:
    llm, _ = await mount_openai(runtime, server, provider=provider)
    server.queue(stream(text_answer("ok")))

    await collect(llm, ask("and tomorrow?", model=f"{provider}:m", messages=_TOOL_ROUND))

    messages = server.requests[0].json["messages"]
    with_calls = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
            }
        ],
    }
    if replayed:
        with_calls["reasoning_content"] = "I should call the tool."
    assert messages == [
        {"role": "user", "content": "weather in Paris?"},
        with_calls,
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
        {"role": "user", "content": "and tomorrow?"},
    ]


async def test_openai_preset_sends_max_completion_tokens(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server, provider="openai")
    server.queue(stream(text_answer("ok")))

    await collect(llm, ask(model="openai", max_tokens=10))

    body = server.requests[0].json
    assert body["model"] == "gpt-4.1"
    assert body["max_completion_tokens"] == 10
    assert "max_tokens" not in body


@pytest.mark.parametrize(
    ("finish_reason", "expected"),
    [
        ("length", Finish("max-tokens")),
        ("content_filter", Finish("refusal")),
    ],
)
async def test_finish_reasons_map_to_normalized_finishes(
    server: FakeServer, runtime: Runtime, finish_reason: str, expected: Finish
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(stream([delta("partial"), delta(finish=finish_reason), "[DONE]"]))

    finish = (await collect(llm, ask()))[-1]

    assert isinstance(finish, Finish)
    assert (finish.reason, finish.error_code) == (expected.reason, expected.error_code)


@pytest.mark.parametrize(
    ("status", "body", "code"),
    [
        (401, {"error": {"message": "Incorrect API key", "type": "invalid_request_error"}}, "auth"),
        (403, {"error": {"message": "forbidden"}}, "auth"),
        (402, {"error": {"message": "Insufficient Balance"}}, "auth"),
        (429, {"error": {"message": "Rate limit reached", "type": "requests"}}, "rate-limit"),
        (429, {"error": {"message": "quota", "code": "insufficient_quota"}}, "auth"),
        (500, {"error": {"message": "internal"}}, "server"),
        (503, "Service Unavailable", "server"),
        (400, {"error": {"message": "Invalid parameter: tools"}}, "bad-request"),
        (404, {"error": {"message": "model not found"}}, "bad-request"),
        (422, {"error": {"message": "unprocessable"}}, "bad-request"),
        (
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 65536 tokens.",
                    "code": "context_length_exceeded",
                }
            },
            "context-overflow",
        ),
        (
            400,
            {"error": {"message": "This model's maximum context length is 65536 tokens."}},
            "context-overflow",
        ),
        (408, "timeout", "timeout"),
    ],
)
async def test_error_statuses_map_to_codes_with_the_providers_message(
    server: FakeServer, runtime: Runtime, status: int, body: object, code: str
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(error(status, body))

    chunks = await collect(llm, ask())

    (finish,) = chunks
    assert isinstance(finish, Finish)
    assert finish.reason == "error"
    assert finish.error_code == code
    message = body if isinstance(body, str) else body["error"]["message"]  # type: ignore[index]
    assert finish.error is not None and message in finish.error
    assert str(status) in finish.error


async def test_retry_after_header_is_carried_on_the_finish(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(error(429, {"error": {"message": "slow down"}}, {"retry-after": "7"}))
    server.queue(error(503, {"error": {"message": "busy"}}, {"retry-after-ms": "250"}))

    first = (await collect(llm, ask()))[-1]
    second = (await collect(llm, ask()))[-1]

    assert isinstance(first, Finish) and first.retry_after == 7.0
    assert isinstance(second, Finish) and second.retry_after == 0.25


async def test_error_event_mid_stream_ends_with_its_code(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(
        stream([delta("Hel"), {"error": {"message": "Overloaded", "type": "overloaded_error"}}])
    )

    chunks = await collect(llm, ask())

    assert chunks[0] == TextDelta("Hel")
    assert chunks[-1] == Finish(
        "error", error="openai-compatible: error in the stream: Overloaded", error_code="server"
    )


async def test_disconnect_mid_stream_is_a_transport_error(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(stream([delta("Hel"), delta("lo")], end=False))

    chunks = await collect(llm, ask())

    assert chunks[:2] == [TextDelta("Hel"), TextDelta("lo")]
    finish = chunks[-1]
    assert isinstance(finish, Finish) and finish.error_code == "transport"


async def test_stream_that_ends_before_a_finish_reason_is_a_transport_error(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(stream([delta("cut")]))

    finish = (await collect(llm, ask()))[-1]

    assert isinstance(finish, Finish) and finish.error_code == "transport"
    assert finish.error is not None and "before the model finished" in finish.error


async def test_finish_without_done_marker_still_completes(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(stream([delta("fine"), delta(finish="stop")]))

    assert (await collect(llm, ask()))[-1] == Finish("stop")


async def test_completed_answers_hand_their_connection_back_to_the_pool(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(stream(text_answer("one")), stream(text_answer("two")))

    await collect(llm, ask())
    await collect(llm, ask())

    assert len(server.requests) == 2
    assert server.opened == 1


async def test_a_stream_held_open_after_the_end_still_finishes(
    server: FakeServer, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.llm.adapters import streaming

    monkeypatch.setattr(streaming, "DRAIN_SECONDS", 0.05)
    llm, _ = await mount_openai(runtime, server)
    server.queue(stream(text_answer("done"), hold=asyncio.Event()))

    chunks = await collect(llm, ask())

    assert chunks[-1] == Finish("stop")
    await server.all_closed()


async def test_read_timeout_is_a_timeout_error(server: FakeServer, runtime: Runtime) -> None:
    llm, _ = await mount_openai(runtime, server, read_timeout=0.2)
    server.queue(stream([delta("slow")], hold=asyncio.Event()))

    chunks = await collect(llm, ask())

    finish = chunks[-1]
    assert isinstance(finish, Finish) and finish.error_code == "timeout"
    await server.all_closed()


async def test_connection_refused_is_unreachable_and_names_the_url(runtime: Runtime) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on the port now.
    llm, _ = await mount_openai(runtime, f"http://127.0.0.1:{port}")

    finish = (await collect(llm, ask()))[-1]

    assert isinstance(finish, Finish) and finish.error_code == "unreachable"
    assert finish.error is not None and "cannot connect to" in finish.error


async def test_an_answer_that_is_not_an_event_stream_is_an_endpoint_error(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)

    async def html(request: Recorded, reply: Reply) -> None:
        await reply.respond(200, "<html>wrong door</html>", [("content-type", "text/html")])

    server.queue(html)

    finish = (await collect(llm, ask()))[-1]

    assert isinstance(finish, Finish) and finish.error_code == "endpoint"
    assert finish.error is not None and "text/html" in finish.error


async def test_missing_key_is_an_auth_error_that_names_the_variables(
    server: FakeServer, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    monkeypatch.delenv("TETHER_API_KEY", raising=False)
    llm, _ = await mount_openai(runtime, server, provider="deepseek", key=None)

    finish = (await collect(llm, ask(model="deepseek:deepseek-chat")))[-1]

    assert isinstance(finish, Finish) and finish.error_code == "auth"
    assert finish.error == "deepseek: no API key: set DEEPSEEK_API_KEY or TETHER_API_KEY"
    assert server.requests == []


async def test_key_is_read_from_the_providers_variable(
    server: FakeServer, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-from-env")
    llm, _ = await mount_openai(runtime, server, provider="deepseek", key=None)
    server.queue(stream(text_answer("ok")))

    await collect(llm, ask(model="deepseek"))

    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env"
    assert server.requests[0].json["model"] == "deepseek-chat"


async def test_openai_compatible_without_base_url_says_how_to_set_one(runtime: Runtime) -> None:
    from tether.llm import service as llm_plugin
    from tether.llm.adapters import openai as openai_plugin

    await runtime.ctx.plugin(llm_plugin)
    await runtime.ctx.plugin(openai_plugin)

    finish = (await collect(runtime.ctx.get(LLM), ask()))[-1]

    assert isinstance(finish, Finish) and finish.error_code == "endpoint"
    assert finish.error is not None and "TETHER_BASE_URL" in finish.error


async def test_model_reference_without_model_and_no_default_is_a_bad_request(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)

    finish = (await collect(llm, ask(model="openai-compatible")))[-1]

    assert isinstance(finish, Finish) and finish.error_code == "bad-request"
    assert server.requests == []


async def test_configured_provider_names_add_providers(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(
        runtime, server, providers={"ollama": {"base_url": f"{server.url}/v1"}}
    )
    server.queue(stream(text_answer("local")))

    chunks = await collect(llm, ask(model="ollama:qwen3:8b"))

    assert chunks[-1] == Finish("stop")
    assert server.requests[0].json["model"] == "qwen3:8b"
    assert "authorization" not in server.requests[0].headers
    assert {"deepseek", "openai", "openai-compatible", "ollama"} <= set(llm.providers())


async def test_key_never_appears_in_errors_reprs_or_logs(
    server: FakeServer, runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    llm, _ = await mount_openai(runtime, server)
    echoed = {"error": {"message": f"Incorrect API key provided: {KEY}"}}
    server.queue(error(401, echoed))

    finish = (await collect(llm, ask()))[-1]

    assert isinstance(finish, Finish) and finish.error_code == "auth"
    assert finish.error is not None and "[redacted]" in finish.error
    adapter = llm.adapter("openai-compatible")
    assert KEY not in repr(adapter)
    assert KEY not in repr(adapter.endpoint)  # type: ignore[attr-defined]
    assert KEY not in repr(finish)
    assert KEY not in caplog.text


async def test_cancel_mid_stream_closes_the_connection(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(stream([delta("Hel")], hold=asyncio.Event()))
    signal = CancelSignal()
    chunks = []

    async with contextlib.aclosing(llm.stream(ask(), signal)) as answer:
        async for chunk in answer:
            chunks.append(chunk)
            if isinstance(chunk, TextDelta):
                signal.cancel("user")

    assert chunks == [TextDelta("Hel"), Finish("aborted")]
    await server.all_closed()
    assert server.opened == server.closed == 1


async def test_two_hundred_cancels_in_a_row_leave_no_connection_open(
    server: FakeServer, runtime: Runtime
) -> None:
    # A pool of 4: a cancel that leaked its connection would exhaust it at once.
    llm, _ = await mount_openai(runtime, server, max_connections=4, connect_timeout=2)
    for round_ in range(200):
        reached = asyncio.Event()
        server.queue(stream([delta(f"#{round_}")], hold=asyncio.Event(), reached=reached))
        signal = CancelSignal()
        async with asyncio.timeout(10):
            async with contextlib.aclosing(llm.stream(ask(), signal)) as chunks:
                async for chunk in chunks:
                    if isinstance(chunk, TextDelta):
                        signal.cancel("user")
                    last = chunk
        assert last == Finish("aborted")

    async with asyncio.timeout(10):
        await server.all_closed()
    assert server.opened == server.closed == 200
    assert len(server.requests) == 200


async def test_unloading_the_plugin_closes_pooled_connections(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, fiber = await mount_openai(runtime, server)
    server.queue(stream(text_answer("ok")))
    await collect(llm, ask())
    await server.wait_for(lambda s: s.opened == 1)

    await fiber.dispose()

    await server.all_closed()
    assert "openai-compatible" not in llm.providers()


async def test_request_body_writes_arguments_read_back_from_a_log(
    server: FakeServer, runtime: Runtime
) -> None:
    from types import MappingProxyType

    llm, _ = await mount_openai(runtime, server)
    server.queue(stream(text_answer("ok")))
    frozen = MappingProxyType({"city": "Paris", "days": (1, 2)})
    history = (
        AssistantMessage((ToolCallBlock("c1", "weather", frozen),)),
        ToolMessage("c1", "weather", "rain", is_error=True),
    )

    await collect(llm, ask("next", messages=history))

    arguments = server.requests[0].json["messages"][0]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments) == {"city": "Paris", "days": [1, 2]}


@pytest.mark.parametrize("replay_reasoning", [True, False])
@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_encoded_body_decodes_to_the_request_body(replay_reasoning: bool, field: str) -> None:
    from tether.content import ImageRef
    from tether.llm.adapters.chat_completions import RequestEncoder, request_body
    from tether.llm.request import ModelRequest

    history = (
        *_TOOL_ROUND,
        AssistantMessage((ReasoningBlock("cut short"),), interrupted=True),
        UserRoleMessage((TextBlock("look: "), ImageRef("data:image/png;base64,AAAA", "image/png"))),
        UserRoleMessage((TextBlock('naïve ☃ "quoted"\n'),)),
    )
    encoder = RequestEncoder(replay_reasoning=replay_reasoning, max_tokens_field=field)
    for request in (
        ModelRequest(model="p:m", messages=history),
        ModelRequest(
            model="p:m",
            messages=history,
            system="Be brief.",
            tools=(WEATHER,),
            max_tokens=64,
            temperature=0.5,
        ),
    ):
        expected = request_body(
            request, model="m", replay_reasoning=replay_reasoning, max_tokens_field=field
        )
        assert json.loads(encoder.encode(request, model="m")) == expected


_IMAGE_ROUND = (
    AssistantMessage(
        (
            ToolCallBlock("call_1", "read", {"path": "cat.png"}),
            ToolCallBlock("call_2", "bash", {"command": "ls"}),
            ToolCallBlock("call_3", "read", {"path": "dog.gif"}),
        )
    ),
    ToolMessage(
        "call_1", "read", "cat.png: an image", False, (ImageRef.inline("image/png", b"cat"),)
    ),
    ToolMessage("call_2", "bash", "cat.png dog.gif", is_error=False),
    ToolMessage(
        "call_3", "read", "dog.gif: an image", False, (ImageRef.inline("image/gif", b"dog"),)
    ),
)
"""Three parallel calls, two of them answered with images."""


async def test_images_of_tool_results_follow_the_tool_messages_in_a_user_message(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(stream(text_answer("a cat and a dog")))

    await collect(llm, ask("what are they?", messages=_IMAGE_ROUND))

    messages = server.requests[0].json["messages"]
    assert [m["role"] for m in messages] == ["assistant", "tool", "tool", "tool", "user", "user"]
    assert messages[1] == {"role": "tool", "tool_call_id": "call_1", "content": "cat.png: an image"}
    assert messages[4] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "The image returned by the read call call_1:"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,Y2F0"}},
            {"type": "text", "text": "The image returned by the read call call_3:"},
            {"type": "image_url", "image_url": {"url": "data:image/gif;base64,ZG9n"}},
        ],
    }
    assert messages[5] == {"role": "user", "content": "what are they?"}


def test_encoded_images_of_tool_results_decode_to_the_request_body() -> None:
    from tether.llm.adapters.chat_completions import RequestEncoder, request_body
    from tether.llm.request import ModelRequest

    encoder = RequestEncoder(replay_reasoning=False)
    growing = [*_TOOL_ROUND, *_IMAGE_ROUND]
    for request in (
        ModelRequest(model="p:m", messages=tuple(growing)),  # the images come last
        ModelRequest(model="p:m", messages=(*growing, UserRoleMessage((TextBlock("so?"),)))),
        ModelRequest(model="p:m", messages=tuple(_TOOL_ROUND)),  # none at all
    ):
        expected = request_body(request, model="m", replay_reasoning=False)
        assert json.loads(encoder.encode(request, model="m")) == expected
    assert sum(m["role"] == "user" for m in expected["messages"]) == 1  # type: ignore[union-attr]


def test_images_of_one_conversation_are_placed_in_its_requests_and_no_other() -> None:
    from tether.llm.adapters.chat_completions import RequestEncoder, request_body
    from tether.llm.request import ModelRequest

    encoder = RequestEncoder(replay_reasoning=False)
    with_images = [UserRoleMessage((TextBlock("look"),)), *_IMAGE_ROUND]
    without = [UserRoleMessage((TextBlock("list"),)), *_TOOL_ROUND]
    for step in range(3):
        for conversation in (with_images, without, with_images, without):
            conversation.append(UserRoleMessage((TextBlock(f"and {step}?"),)))
            request = ModelRequest(model="p:m", messages=tuple(conversation))
            expected = request_body(request, model="m", replay_reasoning=False)
            assert json.loads(encoder.encode(request, model="m")) == expected
    without.extend(_IMAGE_ROUND)  # the plain conversation gets an image of its own
    request = ModelRequest(model="p:m", messages=tuple(without))
    body = json.loads(encoder.encode(request, model="m"))
    assert body == request_body(request, model="m", replay_reasoning=False)
    assert (
        sum(m["role"] == "user" and isinstance(m["content"], list) for m in body["messages"]) == 1
    )


def test_tool_definitions_are_encoded_again_only_when_they_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tether.llm.adapters import chat_completions
    from tether.llm.adapters.chat_completions import RequestEncoder, request_body
    from tether.llm.request import ModelRequest, ToolSpec

    encoded: list[object] = []
    real_dumps = chat_completions.dumps

    def dumps(value: object) -> str:
        encoded.append(value)
        return real_dumps(value)

    monkeypatch.setattr(chat_completions, "dumps", dumps)
    clock = ToolSpec("clock", "Tell the time.", {"type": "object", "properties": {}})
    same_weather = ToolSpec(
        WEATHER.name, WEATHER.description, json.loads(json.dumps(WEATHER.parameters))
    )
    encoder = RequestEncoder(replay_reasoning=False)
    tool_lists: list[Any] = []
    for tools in ((WEATHER,), (WEATHER,), (same_weather,), (WEATHER, clock), (), (WEATHER,)):
        request = ModelRequest(
            model="p:m", messages=(UserRoleMessage((TextBlock("hi"),)),), tools=tools
        )
        body = json.loads(encoder.encode(request, model="m"))
        assert body == request_body(request, model="m", replay_reasoning=False)
        tool_lists += [value for value in encoded if isinstance(value, list)]
        encoded.clear()
    # Encoded for the first request, and again for each change (an equal list is no change).
    assert [[tool["function"]["name"] for tool in tools] for tools in tool_lists] == [
        ["weather"],
        ["weather", "clock"],
        ["weather"],
    ]


def test_requests_of_growing_changing_and_interleaved_conversations_decode_to_their_bodies() -> (
    None
):
    from tether.llm.adapters.chat_completions import RequestEncoder, request_body
    from tether.llm.request import ModelRequest

    def user(text: str) -> UserRoleMessage:
        return UserRoleMessage((TextBlock(text),))

    def answer(text: str) -> AssistantMessage:
        return AssistantMessage((TextBlock(text),))

    a = (user("a1"), answer("A1"))
    b = (user("b1"),)
    empty_answer = AssistantMessage((ReasoningBlock("cut short"),), interrupted=True)
    conversations = [
        (a, "Be brief."),
        (b, None),
        ((*a, user("a2")), "Be brief."),  # a grows
        ((*b, answer("B1"), user("b2")), "Be terse."),  # b grows, its system changes
        ((*a, user("a2")), "Be brief."),  # the same request again
        ((*a, empty_answer, user("a3")), "Be brief."),  # a message that is not sent
        ((a[0], answer("A1 edited"), user("a2")), None),  # an earlier message replaced
        ((user("summary"), user("a4")), "Be brief."),  # compacted: a new first message
        (a[:1], "Be brief."),  # shorter than before
        ((), None),
    ]
    encoder = RequestEncoder(replay_reasoning=False)
    for messages, system in conversations:
        request = ModelRequest(model="p:m", messages=messages, system=system)
        expected = request_body(request, model="m", replay_reasoning=False)
        assert json.loads(encoder.encode(request, model="m")) == expected


def test_each_message_of_a_growing_conversation_is_encoded_once() -> None:
    import gc

    from tether.llm.adapters.fragments import FragmentCache

    encoded: list[object] = []

    def encode(message: object) -> str:
        encoded.append(message)
        return json.dumps(len(encoded))

    cache = FragmentCache(encode)  # type: ignore[arg-type]
    conversation = [UserRoleMessage((TextBlock("hi"),)), AssistantMessage((TextBlock("hello"),))]
    first = cache.fragments(conversation)
    conversation.append(UserRoleMessage((TextBlock("hi"),)))  # equal to the first, not the same
    conversation.append(conversation[1])  # the same message twice
    second = cache.fragments(conversation)

    assert first == ["1", "2"]
    assert second == ["1", "2", "3", "2"]
    assert encoded == conversation[:3]

    del conversation
    encoded.clear()
    gc.collect()
    assert len(cache) == 0


async def test_a_refusal_delta_ends_refusal_with_its_text_and_usage(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    refusal = {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"refusal": "I can't "}}]}
    more = {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"refusal": "help."}}]}
    server.queue(stream([refusal, more, delta(finish="stop"), usage(6, 3), "[DONE]"]))

    chunks = await collect(llm, ask())

    assert chunks == [TextDelta("I can't "), TextDelta("help."), Usage(6, 3), Finish("refusal")]
    assert assemble(chunks).message.content == (TextBlock("I can't help."),)
