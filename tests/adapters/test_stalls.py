"""A model stream that stalls or never ends cannot hold a turn; Stop still ends both at once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.fake_server import FakeServer, Script, endless, stall, stream
from tests.adapters.support import (
    ask,
    block_delta,
    block_start,
    call,
    collect,
    delta,
    message_start,
    mount_anthropic,
    mount_openai,
    text_answer,
)
from tests.adapters.world import AdapterWorld, build_world
from tether.agent import UserMessage
from tether.llm.chunks import Finish
from tether.runtime import Runtime
from tether.session.log import Session
from tether.session.store import SESSION_EVENT

NO_WAIT = {"base_delay": 0.0, "jitter": 0.0}
GUARD = 10.0
"""Seconds a test waits for what must come at once; before the fix it never came."""


def turn_ends(session: Session) -> list[dict[str, Any]]:
    return [dict(e.data["reason"]) for e in session.events if e.type == "turn/end"]  # type: ignore[call-overload]


@pytest.mark.parametrize("provider", ["openai-compatible", "anthropic"])
async def test_an_answer_that_stalls_behind_keepalive_pings_fails_as_a_timeout(
    provider: str, server: FakeServer, runtime: Runtime
) -> None:
    if provider == "anthropic":
        llm, _ = await mount_anthropic(runtime, server, idle_timeout=0.2)
        model = "anthropic:claude-test"
        server.queue(stall([message_start()], keepalive=b'event: ping\ndata: {"type": "ping"}\n\n'))
    else:
        llm, _ = await mount_openai(runtime, server, idle_timeout=0.2)
        model = "openai-compatible:test-model"
        server.queue(stall([delta("Thinking")], keepalive=b": keep-alive\n\n"))

    async with asyncio.timeout(GUARD):
        chunks = await collect(llm, ask(model=model))

    finish = chunks[-1]
    assert isinstance(finish, Finish) and finish.error_code == "timeout"
    assert finish.error is not None and "nothing new for 0.2 s" in finish.error
    assert "idle_timeout" in finish.error and "\n" not in finish.error
    await server.all_closed()


async def test_a_silent_connection_names_read_timeout(server: FakeServer, runtime: Runtime) -> None:
    llm, _ = await mount_openai(runtime, server, read_timeout=0.2)
    server.queue(stall([delta("Thinking")]))

    async with asyncio.timeout(GUARD):
        finish = (await collect(llm, ask()))[-1]

    assert isinstance(finish, Finish) and finish.error_code == "timeout"
    assert finish.error is not None and "sent nothing for 0.2 s (read_timeout)" in finish.error


async def test_a_stalled_provider_is_retried_once_then_the_turn_ends_with_the_timeout(
    server: FakeServer, tmp_path: Path
) -> None:
    world = await build_world(tmp_path, server, retry=NO_WAIT, adapter={"idle_timeout": 0.2})
    try:
        keepalive = b": keep-alive\n\n"
        server.queue(*(stall([delta("Hm")], keepalive=keepalive) for _ in range(3)))
        agent = await world.agent()

        agent.followup(UserMessage.text("hi"))
        async with asyncio.timeout(GUARD):
            await agent.when_idle()

        [reason] = turn_ends(agent.session)
        assert reason["kind"] == "error" and reason["code"] == "timeout"
        assert "idle_timeout" in reason["error"]
        assert len(server.requests) == 2
        [retry] = [e for e in agent.session.events if e.type == "llm/retry"]
        assert retry.data["max_attempts"] == 2
        await server.all_closed()
    finally:
        await world.runtime.dispose()


async def test_an_endless_answer_ends_the_turn_at_its_output_limit(
    server: FakeServer, tmp_path: Path
) -> None:
    world = await build_world(tmp_path, server, retry=NO_WAIT, loop={"max_turn_output": 2_000})
    try:
        server.queue(endless([], delta("la ")))
        agent = await world.agent()

        agent.followup(UserMessage.text("sing"))
        async with asyncio.timeout(GUARD):
            await agent.when_idle()

        [reason] = turn_ends(agent.session)
        assert reason == {
            "kind": "error",
            "code": "output-limit",
            "error": "the model's output passed this turn's limit of 2,000 characters, so its "
            "stream was stopped (max_turn_output in the agent_loop configuration)",
        }
        answer = next(e for e in agent.session.events if e.type == "assistant/message")
        assert answer.data["interrupted"] is True
        assert len(server.requests) == 1, "a turn out of output is not retried"
        await server.all_closed()
    finally:
        await world.runtime.dispose()


async def test_the_output_limit_counts_every_step_of_the_turn(
    server: FakeServer, tmp_path: Path
) -> None:
    world = await build_world(tmp_path, server, retry=NO_WAIT, loop={"max_turn_output": 60})
    try:
        tool_call = [
            delta("x" * 40),
            delta(calls=[call(0, '{"city": "Oslo"}', id="c1", name="weather")]),
            delta(finish="tool_calls"),
            "[DONE]",
        ]
        server.queue(stream(tool_call), stream(text_answer("y" * 30)))
        agent = await world.agent()

        agent.followup(UserMessage.text("go"))
        async with asyncio.timeout(GUARD):
            await agent.when_idle()

        [reason] = turn_ends(agent.session)
        assert reason["code"] == "output-limit"
        assert world.forecasts == ["Oslo"]
    finally:
        await world.runtime.dispose()


def _stalled() -> Script:
    return stall([delta("Partial")])


def _endless() -> Script:
    return endless([], delta("la "))


@pytest.mark.parametrize("script", [_stalled, _endless], ids=["stalled", "endless"])
async def test_stop_ends_a_stalled_or_endless_stream_at_once(
    script: Any, server: FakeServer, tmp_path: Path
) -> None:
    world: AdapterWorld = await build_world(
        tmp_path, server, retry=NO_WAIT, loop={"max_turn_output": 10**12}
    )
    try:
        server.queue(script())
        agent = await world.agent()
        streaming = asyncio.Event()
        world.runtime.ctx.on(
            SESSION_EVENT,
            lambda session, event: streaming.set() if event.type == "assistant/chunk" else None,
        )

        agent.followup(UserMessage.text("go"))
        await streaming.wait()
        started = time.monotonic()
        agent.cancel()
        async with asyncio.timeout(GUARD):
            await agent.when_idle()
        stopped_after = time.monotonic() - started

        assert turn_ends(agent.session) == [{"kind": "aborted", "cause": "user"}]
        assert stopped_after < 1.0
        await server.all_closed()
    finally:
        await world.runtime.dispose()


async def test_anthropic_thinking_that_never_ends_is_bounded_too(
    server: FakeServer, tmp_path: Path
) -> None:
    world = await build_world(
        tmp_path,
        server,
        provider="anthropic",
        model="anthropic:claude-test",
        retry=NO_WAIT,
        loop={"max_turn_output": 500},
    )
    try:
        server.queue(
            endless(
                [message_start(), block_start(0, {"type": "thinking", "thinking": ""})],
                block_delta(0, {"type": "thinking_delta", "thinking": "hmm "}),
            )
        )
        agent = await world.agent()

        agent.followup(UserMessage.text("think"))
        async with asyncio.timeout(GUARD):
            await agent.when_idle()

        [reason] = turn_ends(agent.session)
        assert reason["code"] == "output-limit"
        await server.all_closed()
    finally:
        await world.runtime.dispose()
