"""Local servers (llama.cpp's ``llama-server``, vLLM) on the wire, and what tether makes of it.

The fake server writes the bytes those servers were seen to write: the
non-standard ``error:`` line of llama.cpp, the silence while a long prompt is
processed, a kept-alive connection closed after each answer.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.adapters.fake_server import FakeServer, hang_up, llama_error, processing, stream
from tests.adapters.support import (
    LLAMA_OVERFLOW,
    WEATHER,
    ask,
    collect,
    delta,
    mount_openai,
    text_answer,
    usage,
)
from tests.adapters.world import build_world
from tether.agent import UserMessage
from tether.llm.chunks import Finish, TextDelta
from tether.runtime import Runtime
from tether.session.prompt_cut import prompt_cut_notice

GUARD = 10.0


def text_of(chunks: list[object]) -> str:
    return "".join(chunk.text for chunk in chunks if isinstance(chunk, TextDelta))


async def test_a_llama_cpp_context_overflow_line_is_a_context_overflow(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(llama_error(LLAMA_OVERFLOW))

    finish = (await collect(llm, ask()))[-1]

    assert isinstance(finish, Finish) and finish.error_code == "context-overflow"
    assert finish.error is not None and "exceeds the available context size" in finish.error
    assert len(server.requests) == 1


async def test_another_llama_cpp_error_line_is_a_one_line_model_error(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    refused = {
        "code": 400,
        "message": "Cannot have 2 or more assistant messages at the end of the list.",
        "type": "invalid_request_error",
    }
    server.queue(llama_error(refused))

    finish = (await collect(llm, ask()))[-1]

    assert isinstance(finish, Finish) and finish.error_code == "bad-request"
    assert finish.error == (
        "openai-compatible: error in the stream: "
        "Cannot have 2 or more assistant messages at the end of the list."
    )


async def test_a_long_prompt_processing_outlasts_the_read_and_idle_timeouts(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(
        runtime, server, read_timeout=0.1, idle_timeout=0.1, first_byte_timeout=5.0
    )
    server.queue(processing(0.5, text_answer("done at last")))

    async with asyncio.timeout(GUARD):
        chunks = await collect(llm, ask())

    assert text_of(chunks) == "done at last"
    assert chunks[-1] == Finish("stop")


async def test_a_prompt_processing_past_first_byte_timeout_says_what_a_retry_costs(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server, first_byte_timeout=0.2)
    server.queue(processing(30.0, text_answer("too late")))

    async with asyncio.timeout(GUARD):
        finish = (await collect(llm, ask()))[-1]

    assert isinstance(finish, Finish) and finish.error_code == "timeout"
    assert finish.error is not None
    assert "no answer began within 0.2 s (first_byte_timeout" in finish.error
    assert "a retry processes the whole prompt again" in finish.error
    await server.all_closed()


async def test_a_request_on_a_pooled_connection_the_server_closed_is_sent_again_at_once(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(stream(text_answer("first")), hang_up, stream(text_answer("second")))
    await collect(llm, ask("one"))

    async with asyncio.timeout(GUARD):
        chunks = await collect(llm, ask("two"))

    assert text_of(chunks) == "second"
    assert chunks[-1] == Finish("stop")
    assert len(server.requests) == 3
    assert server.opened == 2
    assert server.requests[1].body == server.requests[2].body


async def test_a_new_connection_closed_before_an_answer_is_not_sent_again(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(hang_up, stream(text_answer("never asked for")))

    finish = (await collect(llm, ask()))[-1]

    assert isinstance(finish, Finish) and finish.error_code == "transport"
    assert len(server.requests) == 1


async def test_parallel_tool_calls_are_asked_for_where_the_provider_takes_them(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(
        runtime,
        server,
        providers={"deepseek": {"base_url": f"{server.url}/v1", "api_key": "sk-d-0123456789"}},
    )
    server.queue(*(stream(text_answer("ok")) for _ in range(3)))

    await collect(llm, ask(tools=[WEATHER]))
    await collect(llm, ask())
    await collect(llm, ask(model="deepseek:deepseek-chat", tools=[WEATHER]))

    with_tools, without_tools, deepseek = (request.json for request in server.requests)
    assert with_tools["parallel_tool_calls"] is True
    # OpenAI rejects the field in a request without tools.
    assert "parallel_tool_calls" not in without_tools
    assert "parallel_tool_calls" not in deepseek


async def test_a_prompt_the_server_cut_is_said_once(server: FakeServer, tmp_path: Path) -> None:
    world = await build_world(tmp_path, server)
    try:
        long = "Read this carefully. " * 2_000  # about 10,000 tokens
        server.queue(
            stream([*text_answer("ok")[:-2], usage(1_024, 1), "[DONE]"]),
            stream([*text_answer("ok again")[:-2], usage(1_030, 2), "[DONE]"]),
        )
        agent = await world.agent()
        agent.followup(UserMessage.text(long))
        await agent.when_idle()
        agent.followup(UserMessage.text("and again"))
        await agent.when_idle()
    finally:
        await world.runtime.dispose()

    [cut] = [event for event in agent.session.events if event.type == "llm/prompt-cut"]
    assert cut.data["counted"] == 1_024
    assert cut.data["sent"] > 10_000
    assert "--no-context-shift" in prompt_cut_notice(cut.data)


async def test_a_prompt_counted_whole_says_nothing(server: FakeServer, tmp_path: Path) -> None:
    world = await build_world(tmp_path, server)
    try:
        long = "Read this carefully. " * 600
        server.queue(stream([*text_answer("ok")[:-2], usage(3_100, 1), "[DONE]"]))
        agent = await world.agent()
        agent.followup(UserMessage.text(long))
        await agent.when_idle()
    finally:
        await world.runtime.dispose()

    assert not [event for event in agent.session.events if event.type == "llm/prompt-cut"]


async def test_a_prompt_processing_that_times_out_is_retried_once_and_said(
    server: FakeServer, tmp_path: Path
) -> None:
    world = await build_world(
        tmp_path,
        server,
        retry={"base_delay": 0.0, "jitter": 0.0},
        adapter={"first_byte_timeout": 0.2},
    )
    try:
        server.queue(*(processing(30.0, text_answer("too late")) for _ in range(3)))
        agent = await world.agent()
        agent.followup(UserMessage.text("a long prompt"))
        async with asyncio.timeout(GUARD):
            await agent.when_idle()
    finally:
        await world.runtime.dispose()

    assert len(server.requests) == 2
    [retry] = [event for event in agent.session.events if event.type == "llm/retry"]
    assert "a retry processes the whole prompt again" in str(retry.data["error"])
    [end] = [event for event in agent.session.events if event.type == "turn/end"]
    assert dict(end.data["reason"])["kind"] == "error"  # type: ignore[call-overload]


async def test_reasoning_a_provider_does_not_count_again_is_no_cut(
    server: FakeServer, tmp_path: Path
) -> None:
    world = await build_world(tmp_path, server)
    try:
        thought = "Let me think about this at length. " * 1_200  # about 10,000 tokens
        server.queue(
            stream([delta(reasoning=thought), *text_answer("ok")[:-2], usage(600, 9), "[DONE]"]),
            stream([*text_answer("ok again")[:-2], usage(700, 2), "[DONE]"]),
        )
        agent = await world.agent()
        agent.followup(UserMessage.text("think hard"))
        await agent.when_idle()
        agent.followup(UserMessage.text("and again"))
        await agent.when_idle()
    finally:
        await world.runtime.dispose()

    assert [e.type for e in agent.session.events].count("turn/end") == 2
    assert not [event for event in agent.session.events if event.type == "llm/prompt-cut"]
