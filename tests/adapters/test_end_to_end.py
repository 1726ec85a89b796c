"""Agent turns through a real adapter, the retry policy and persistence, on the fake server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.fake_server import FakeServer, error, stream
from tests.adapters.support import (
    KEY,
    anthropic_text,
    block_delta,
    block_start,
    block_stop,
    call,
    delta,
    message_end,
    message_start,
    text_answer,
    usage,
)
from tests.adapters.world import AdapterWorld, build_world
from tether.agent import Agent, UserMessage
from tether.content import AssistantMessage, ReasoningBlock, RedactedReasoningBlock, ToolCallBlock
from tether.host import Tether
from tether.llm.adapters.settings import resolve_model_settings
from tether.persist.backends import JsonlBackend
from tether.session import DEFAULT_REGISTRY
from tether.session.derive import derive_messages
from tether.session.events import Event
from tether.session.log import Session
from tether.session.store import SESSION_EVENT, SESSIONS

NO_WAIT = {"base_delay": 0.0, "jitter": 0.0}


@pytest.fixture
async def world(server: FakeServer, tmp_path: Path) -> AsyncIterator[AdapterWorld]:
    built = await build_world(tmp_path, server, retry=NO_WAIT)
    try:
        yield built
    finally:
        await built.runtime.dispose()


def types(session: Session) -> list[str]:
    return [event.type for event in session.events]


def reasons(session: Session) -> list[dict[str, Any]]:
    return [dict(e.data["reason"]) for e in session.events if e.type == "turn/end"]  # type: ignore[call-overload]


def retries(session: Session) -> list[Event]:
    return [event for event in session.events if event.type == "llm/retry"]


async def test_turn_with_tool_call_replays_reasoning_and_tool_result_to_the_model(
    world: AdapterWorld, server: FakeServer
) -> None:
    server.queue(
        stream(
            [
                delta(reasoning="The user wants weather; "),
                delta(reasoning="call the tool."),
                delta(calls=[call(0, "", id="call_w", name="weather")]),
                delta(calls=[call(0, '{"city"')]),
                delta(calls=[call(0, ': "Paris"}')]),
                delta(finish="tool_calls"),
                usage(20, 9),
                "[DONE]",
            ]
        ),
        stream(text_answer("It is sunny in Paris.")),
    )
    agent = await world.agent()

    agent.followup(UserMessage.text("Weather in Paris?"))
    await agent.when_idle()

    session = agent.session
    assert reasons(session) == [{"kind": "completed"}]
    assert world.forecasts == ["Paris"]
    assert [e.data["delta"] for e in session.events if e.type == "assistant/chunk"][:2] == [
        "The user wants weather; ",
        "call the tool.",
    ]
    first_answer = next(e for e in session.events if e.type == "assistant/message")
    assert [dict(block) for block in first_answer.data["content"]] == [  # type: ignore[attr-defined]
        {"type": "reasoning", "text": "The user wants weather; call the tool.", "signature": None},
        {"type": "tool_call", "id": "call_w", "name": "weather", "arguments": {"city": "Paris"}},
    ]
    result = next(e for e in session.events if e.type == "tool/result")
    assert result.data["content"] == "sunny in Paris"

    first, second = server.requests
    assert [tool["function"]["name"] for tool in first.json["tools"]] == ["weather"]
    system, note, *conversation = second.json["messages"]
    assert system["role"] == "system"
    assert note["role"] == "user" and note["content"].startswith("Environment now:\n")
    assert "- weather: " in system["content"]
    assert conversation == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_w",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                }
            ],
            "reasoning_content": "The user wants weather; call the tool.",
        },
        {"role": "tool", "tool_call_id": "call_w", "content": "sunny in Paris"},
    ]
    final = [e for e in session.events if e.type == "assistant/message"][-1]
    assert final.data["usage"] == {"input_tokens": 5, "output_tokens": 5}


async def test_session_file_never_contains_the_key(world: AdapterWorld, server: FakeServer) -> None:
    server.queue(
        error(401, {"error": {"message": f"Incorrect API key provided: {KEY}"}}),
    )
    agent = await world.agent()

    agent.followup(UserMessage.text("hello"))
    await agent.when_idle()
    await world.runtime.ctx.get(SESSIONS).flush(agent.session)

    on_disk = world.session_file(agent).read_text()
    assert "Incorrect API key provided: [redacted]" in on_disk
    assert KEY not in on_disk


async def test_rate_limited_request_is_retried_and_the_retry_is_logged(
    world: AdapterWorld, server: FakeServer
) -> None:
    server.queue(
        error(429, {"error": {"message": "Rate limit reached"}}, {"retry-after": "0"}),
        error(503, {"error": {"message": "busy"}}),
        stream(text_answer("made it")),
    )
    agent = await world.agent()

    agent.followup(UserMessage.text("hi"))
    await agent.when_idle()

    session = agent.session
    assert reasons(session) == [{"kind": "completed"}]
    assert len(server.requests) == 3
    logged = [dict(event.data) for event in retries(session)]
    assert [(r["attempt"], r["code"], r["retry_after"]) for r in logged] == [
        (1, "rate-limit", 0.0),
        (2, "server", None),
    ]
    assert "Rate limit reached" in logged[0]["error"]
    await world.runtime.ctx.get(SESSIONS).flush(session)
    stored = [json.loads(line) for line in world.session_file(agent).read_text().splitlines()]
    assert [record.get("type") for record in stored].count("llm/retry") == 2


async def test_non_retryable_error_ends_the_turn_with_the_providers_message(
    world: AdapterWorld, server: FakeServer
) -> None:
    server.queue(error(400, {"error": {"message": "Invalid parameter: messages"}}))
    agent = await world.agent()

    agent.followup(UserMessage.text("hi"))
    await agent.when_idle()

    (reason,) = reasons(agent.session)
    assert reason["kind"] == "error"
    assert "Invalid parameter: messages" in reason["error"]
    assert retries(agent.session) == []
    assert len(server.requests) == 1


async def test_retries_stop_after_max_attempts(server: FakeServer, tmp_path: Path) -> None:
    world = await build_world(tmp_path, server, retry={**NO_WAIT, "max_attempts": 3})
    try:
        server.queue(*(error(500, {"error": {"message": "down"}}) for _ in range(3)))
        agent = await world.agent()

        agent.followup(UserMessage.text("hi"))
        await agent.when_idle()

        assert reasons(agent.session)[0]["kind"] == "error"
        assert len(server.requests) == 3
        assert [event.data["attempt"] for event in retries(agent.session)] == [1, 2]
    finally:
        await world.runtime.dispose()


async def test_cancel_while_waiting_to_retry_aborts_the_turn_at_once(
    server: FakeServer, tmp_path: Path
) -> None:
    world = await build_world(tmp_path, server, retry={"max_retry_after": 600})
    try:
        server.queue(error(429, {"error": {"message": "later"}}, {"retry-after": "300"}))
        agent = await world.agent()
        retry_logged = asyncio.Event()
        world.runtime.ctx.on(
            SESSION_EVENT,
            lambda session, event: retry_logged.set() if event.type == "llm/retry" else None,
        )

        agent.followup(UserMessage.text("hi"))
        await retry_logged.wait()
        assert retries(agent.session)[0].data["delay"] == 300.0
        agent.cancel()
        async with asyncio.timeout(5):
            await agent.when_idle()

        assert reasons(agent.session) == [{"kind": "aborted", "cause": "user"}]
        assert len(server.requests) == 1
    finally:
        await world.runtime.dispose()


async def test_cancel_mid_stream_keeps_the_text_and_closes_the_connection(
    world: AdapterWorld, server: FakeServer
) -> None:
    server.queue(stream([delta("Partial ans")], hold=asyncio.Event()))
    agent = await world.agent()
    streaming = asyncio.Event()
    world.runtime.ctx.on(
        SESSION_EVENT,
        lambda session, event: streaming.set() if event.type == "assistant/chunk" else None,
    )

    agent.followup(UserMessage.text("tell me"))
    await streaming.wait()
    agent.cancel()
    await agent.when_idle()

    assert reasons(agent.session) == [{"kind": "aborted", "cause": "user"}]
    answer = next(e for e in agent.session.events if e.type == "assistant/message")
    assert answer.data["interrupted"] is True
    await server.all_closed()


async def test_anthropic_turn_with_tool_use_replays_signed_thinking_and_tool_result(
    server: FakeServer, tmp_path: Path
) -> None:
    world = await build_world(
        tmp_path, server, provider="anthropic", model="anthropic:claude-test", retry=NO_WAIT
    )
    try:
        server.queue(
            stream(
                [
                    message_start(),
                    block_start(0, {"type": "thinking", "thinking": ""}),
                    block_delta(0, {"type": "thinking_delta", "thinking": "Need the tool."}),
                    block_delta(0, {"type": "signature_delta", "signature": "sig-abc"}),
                    block_stop(0),
                    block_start(1, {"type": "tool_use", "id": "toolu_1", "name": "weather"}),
                    block_delta(1, {"type": "input_json_delta", "partial_json": '{"city":'}),
                    block_delta(1, {"type": "input_json_delta", "partial_json": ' "Oslo"}'}),
                    block_stop(1),
                    *message_end("tool_use"),
                ]
            ),
            stream(anthropic_text("Snowy, probably.")),
        )
        agent = await world.agent()

        agent.followup(UserMessage.text("Weather in Oslo?"))
        await agent.when_idle()

        assert reasons(agent.session) == [{"kind": "completed"}]
        assert world.forecasts == ["Oslo"]
        second = server.requests[1].json
        # The note of the environment and the prompt make one user message.
        note = second["messages"][0]["content"].pop(0)
        assert note["text"].startswith("Environment now:\n")
        assert second["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Need the tool.", "signature": "sig-abc"},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "weather",
                        "input": {"city": "Oslo"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "sunny in Oslo",
                        "is_error": False,
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
        ]
    finally:
        await world.runtime.dispose()


async def test_anthropic_tool_loop_returns_redacted_and_signed_thinking_unchanged_in_order(
    server: FakeServer, tmp_path: Path
) -> None:
    world = await build_world(
        tmp_path, server, provider="anthropic", model="anthropic:claude-test", retry=NO_WAIT
    )
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
    try:
        server.queue(
            stream(
                [
                    message_start(),
                    block_start(0, redacted),
                    block_stop(0),
                    block_start(1, {"type": "thinking", "thinking": ""}),
                    block_delta(1, {"type": "thinking_delta", "thinking": "First part."}),
                    block_delta(1, {"type": "signature_delta", "signature": "sig-1"}),
                    block_stop(1),
                    block_start(2, {"type": "thinking", "thinking": ""}),
                    block_delta(2, {"type": "thinking_delta", "thinking": "Second part."}),
                    block_delta(2, {"type": "signature_delta", "signature": "sig-2"}),
                    block_stop(2),
                    block_start(3, {"type": "tool_use", "id": "toolu_1", "name": "weather"}),
                    block_delta(3, {"type": "input_json_delta", "partial_json": '{"city":"Oslo"}'}),
                    block_stop(3),
                    *message_end("tool_use"),
                ]
            ),
            stream(anthropic_text("Snowy.")),
        )
        agent = await world.agent()

        agent.followup(UserMessage.text("Weather in Oslo?"))
        await agent.when_idle()
        await world.runtime.ctx.get(SESSIONS).flush(agent.session)

        assert reasons(agent.session) == [{"kind": "completed"}]
        assert server.requests[1].json["messages"][1] == {
            "role": "assistant",
            "content": [
                redacted,
                {"type": "thinking", "thinking": "First part.", "signature": "sig-1"},
                {"type": "thinking", "thinking": "Second part.", "signature": "sig-2"},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
            ],
        }
        backend = JsonlBackend(tmp_path)
        try:
            stored = backend.load(agent.id)
        finally:
            backend.close()
        reloaded = derive_messages(DEFAULT_REGISTRY.decode_stored(stored.events))
        assert reloaded[2] == AssistantMessage(
            (
                RedactedReasoningBlock(redacted["data"]),
                ReasoningBlock("First part.", "sig-1"),
                ReasoningBlock("Second part.", "sig-2"),
                ToolCallBlock("toolu_1", "weather", {"city": "Oslo"}),
            )
        )
    finally:
        await world.runtime.dispose()


async def test_resolved_settings_compose_a_working_tether(
    server: FakeServer, tmp_path: Path
) -> None:
    settings = resolve_model_settings(
        "openai-compatible:served-model", f"{server.url}/v1", env={"TETHER_API_KEY": KEY}
    )
    server.queue(stream(text_answer("Hi from the server.")))

    async with Tether(
        overlays=[settings.overlay()], data_dir=tmp_path, model=settings.model
    ) as tether:
        assert tether.problems == ()
        handle = await tether.agents.create(cwd=str(tmp_path))
        agent: Agent = handle.agent
        agent.followup(UserMessage.text("hello"))
        await agent.when_idle()
        await handle.dispose()

    assert reasons(agent.session) == [{"kind": "completed"}]
    (request,) = server.requests
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.json["model"] == "served-model"
    assert not files_containing(tmp_path, KEY)


def files_containing(root: Path, text: str) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file() and text in path.read_text()]
