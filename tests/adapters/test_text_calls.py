"""Tool calls a model writes as text (fenced JSON, ``<tool_call>`` tags) become real calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from httpx_sse import ServerSentEvent

from tests.adapters.fake_server import FakeServer, stream
from tests.adapters.support import WEATHER, ask, collect, delta, mount_openai, text_answer
from tests.adapters.world import build_world
from tether.agent import UserMessage
from tether.llm.adapters.chat_completions import StreamDecoder
from tether.llm.adapters.text_calls import MADE_UP_NOTE, TextCallDecoder, is_local
from tether.llm.chunks import Finish, StreamChunk, TextDelta, ToolCallDelta
from tether.runtime import Runtime

PARIS = '{"name": "weather", "arguments": {"city": "Paris"}}'


def written(*pieces: str) -> list[object]:
    """An answer streaming ``pieces`` of text, ending ``stop`` as a server ends it."""
    return [*(delta(piece) for piece in pieces), delta(finish="stop"), "[DONE]"]


def calls_of(chunks: list[StreamChunk]) -> list[tuple[str | None, dict[str, object]]]:
    return [
        (chunk.name, json.loads(chunk.args_delta))
        for chunk in chunks
        if isinstance(chunk, ToolCallDelta)
    ]


def text_of(chunks: list[StreamChunk]) -> str:
    return "".join(chunk.text for chunk in chunks if isinstance(chunk, TextDelta))


@pytest.mark.parametrize(
    "answer",
    [
        ["I'll check.\n```json\n", PARIS, "\n```"],
        ["I'll check.\n<tool_call>\n", PARIS, "\n</tool_call>"],
        ["I'll check.\n``", "`\n", PARIS[:10], PARIS[10:], "\n``", "`\n"],
        ["I'll check.\n<to", "ols>\n", PARIS, "\n</tools>"],
    ],
    ids=["fenced", "tagged", "cut-anywhere", "in-a-tools-tag"],
)
async def test_a_written_call_of_an_offered_tool_is_a_call(
    server: FakeServer, runtime: Runtime, answer: list[str]
) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(stream(written(*answer)))

    chunks = await collect(llm, ask(tools=[WEATHER]))

    assert calls_of(chunks) == [("weather", {"city": "Paris"})]
    assert text_of(chunks).strip() == "I'll check."
    assert chunks[-1] == Finish("tool-calls")


async def test_an_answer_that_is_a_call_object_alone_is_a_call(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    arguments_as_text = '{"name": "weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}'
    server.queue(stream(written(" ", arguments_as_text)))

    chunks = await collect(llm, ask(tools=[WEATHER]))

    assert calls_of(chunks) == [("weather", {"city": "Oslo"})]
    assert text_of(chunks) == ""


async def test_a_result_the_model_writes_after_its_call_is_left_out(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    made_up = "\n<tool_response>\nSunny, 25 degrees\n</tool_response>\nIt is sunny in Paris."
    server.queue(stream(written("<tool_call>\n", PARIS, "\n</tool_call>", made_up)))

    chunks = await collect(llm, ask(tools=[WEATHER]))

    # The call runs and its real result follows; the invented one is neither kept nor shown.
    assert calls_of(chunks) == [("weather", {"city": "Paris"})]
    assert text_of(chunks) == ""
    assert chunks[-1] == Finish("tool-calls")


async def test_a_result_the_model_writes_without_a_call_is_replaced_by_a_note(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    answer = "I'll look it up.\n<tool_", "response>\nSunny\n</tool_response>\nIt is sunny."
    server.queue(stream(written(*answer)))

    chunks = await collect(llm, ask(tools=[WEATHER]))

    assert calls_of(chunks) == []
    assert text_of(chunks) == f"I'll look it up.\n{MADE_UP_NOTE}"
    assert chunks[-1] == Finish("stop")


async def test_the_tag_named_within_a_line_stays_text(server: FakeServer, runtime: Runtime) -> None:
    llm, _ = await mount_openai(runtime, server)
    server.queue(stream(written("Results come in <tool_response> tags.")))

    chunks = await collect(llm, ask(tools=[WEATHER]))

    assert text_of(chunks) == "Results come in <tool_response> tags."


async def test_json_that_names_no_offered_tool_stays_text(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(runtime, server)
    example = '```json\n{"name": "deploy", "arguments": {}}\n```'
    server.queue(stream(written("An example:\n", example)))

    chunks = await collect(llm, ask(tools=[WEATHER]))

    assert calls_of(chunks) == []
    assert text_of(chunks) == "An example:\n" + example
    assert chunks[-1] == Finish("stop")


async def test_a_provider_with_text_tool_calls_off_leaves_them_as_text(
    server: FakeServer, runtime: Runtime
) -> None:
    llm, _ = await mount_openai(
        runtime,
        server,
        providers={"quiet": {"base_url": f"{server.url}/v1", "text_tool_calls": False}},
    )
    server.queue(stream(written("<tool_call>", PARIS, "</tool_call>")))

    chunks = await collect(llm, ask(model="quiet:m", tools=[WEATHER]))

    assert calls_of(chunks) == []
    assert text_of(chunks) == f"<tool_call>{PARIS}</tool_call>"


def test_only_a_server_on_this_machine_reads_written_calls_by_default() -> None:
    local = ("http://127.0.0.1:8080/v1", "http://localhost:11434/v1", "http://[::1]:8000/v1")
    hosted = ("https://api.openai.com/v1", "http://192.168.1.5:8080/v1", "https://localhost.io")
    assert all(is_local(url) for url in local)
    assert not any(is_local(url) for url in hosted)


def test_code_in_an_answer_streams_as_it_comes() -> None:
    decoder = TextCallDecoder(StreamDecoder("local"), frozenset({"weather"}))
    passed: list[StreamChunk] = []
    for piece in ("Run this:\n```", "python\nprint(1)\n", "```\nand see."):
        passed += decoder.feed(ServerSentEvent(data=json.dumps(delta(piece))))
    assert text_of(passed) == "Run this:\n```python\nprint(1)\n```\nand see."


async def test_a_written_call_is_logged_run_and_sent_back_as_a_call(
    server: FakeServer, tmp_path: Path
) -> None:
    world = await build_world(tmp_path, server)
    try:
        server.queue(
            stream(written("```json\n", PARIS, "\n```")), stream(text_answer("Sunny there."))
        )
        agent = await world.agent()
        agent.followup(UserMessage.text("Weather in Paris?"))
        await agent.when_idle()
    finally:
        await world.runtime.dispose()

    assert world.forecasts == ["Paris"]
    [logged] = [event for event in agent.session.events if event.type == "tool/call"]
    assert logged.data["name"] == "weather"
    answer = server.requests[1].json["messages"][-2]
    assert answer["role"] == "assistant"
    assert answer["tool_calls"][0]["function"] == {
        "name": "weather",
        "arguments": '{"city":"Paris"}',
    }
