"""Compaction through a real adapter on the fake server: the summary replaces the range in
what the model is sent, the log keeps every event, overflow compacts and retries once,
and a cancel during the summary request leaves nothing behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.adapters.fake_server import FakeServer, error, llama_error, stream
from tests.adapters.support import LLAMA_OVERFLOW, delta, text_answer
from tests.adapters.world import AdapterWorld, build_world
from tether.agent import AgentHandle, UserMessage
from tether.agent.registry import AGENTS
from tether.loop.compaction import (
    COMPACTION,
    SUMMARY_REQUEST,
    SUMMARY_SYSTEM,
    CompactionCancelledError,
    CompactionError,
)
from tether.runtime import CancelSignal, ServiceKey
from tether.session import derive_messages
from tether.session.derive import SUMMARY_PREFIX
from tether.session.log import Session

S = TypeVar("S")
MODEL = "openai-compatible:test-model"
SMALL = {"context_windows": {"test-model": 4_096}}
"""A window three long prompts overflow: the threshold (80%) is about 3,280 tokens."""
LONG = 4_000  # characters: about 1,000 tokens
OVERFLOW = error(
    400,
    {
        "error": {
            "message": "maximum context length is 4096 tokens",
            "code": "context_length_exceeded",
        }
    },
)


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    async with FakeServer() as fake:
        yield fake


@pytest.fixture
async def make_world(server: FakeServer, tmp_path: Path) -> AsyncIterator[Any]:
    worlds: list[AdapterWorld] = []

    async def make(**loop: Any) -> AdapterWorld:
        loop.setdefault("user_instructions", str(tmp_path / "no-user-file"))
        world = await build_world(tmp_path / f"w{len(worlds)}", server, retry={}, loop=loop)
        worlds.append(world)
        return world

    yield make
    for world in worlds:
        await world.runtime.dispose()


def service(world: AdapterWorld, key: ServiceKey[S]) -> S:
    found = world.runtime.ctx.get(key)
    assert found is not None
    return found


async def open_agent(world: AdapterWorld) -> AgentHandle:
    return await service(world, AGENTS).create(cwd=str(world.data_dir))


async def turn(handle: AgentHandle, text: str) -> None:
    handle.agent.followup(UserMessage.text(text))
    await handle.agent.when_idle()


def of_type(session: Session, kind: str) -> list[Any]:
    return [event for event in session.events if event.type == kind]


def reasons(session: Session) -> list[str]:
    return [str(event.data["reason"]["kind"]) for event in of_type(session, "turn/end")]  # type: ignore[index]


def answer(text: str) -> Any:
    return stream(text_answer(text))


async def test_a_request_past_the_threshold_is_sent_with_the_summary_in_place_of_the_range(
    make_world: Any, server: FakeServer
) -> None:
    world = await make_world(**SMALL)
    handle = await open_agent(world)
    server.queue(
        answer("one"), answer("two"), answer("SUMMARY of turns one and two"), answer("three")
    )

    await turn(handle, "a" * LONG)
    await turn(handle, "b" * LONG)
    before = list(handle.agent.session.events)
    await turn(handle, "c" * LONG)

    session = handle.agent.session
    assert reasons(session) == ["completed"] * 3
    (compacted,) = of_type(session, "context/compacted")
    second_turn_end = [e.seq for e in before if e.type == "step/end"][-1]
    assert dict(compacted.data) | {"tokens_before": 0} == {
        "first_seq": 0,
        "last_seq": second_turn_end,
        "summary": "SUMMARY of turns one and two",
        "trigger": "auto",
        "model": MODEL,
        "tokens_before": 0,
    }
    assert compacted.data["tokens_before"] > 0.8 * 4_096
    # The log keeps every event: what was there before is there still, unchanged.
    assert list(session.events)[: len(before)] == before
    assert len(of_type(session, "user/message")) == 3

    summary_request = server.requests[2].json
    assert summary_request["messages"][0] == {"role": "system", "content": SUMMARY_SYSTEM}
    asked = summary_request["messages"][1]["content"]
    assert "[user]\n" + "a" * 100 in asked
    assert "[assistant]\ntwo" in asked
    assert "c" * 100 not in asked
    assert asked.endswith(SUMMARY_REQUEST)
    assert "tools" not in summary_request

    sent = server.requests[3].json["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "user"]
    assert sent[1]["content"] == SUMMARY_PREFIX + "SUMMARY of turns one and two"
    assert sent[2]["content"] == "c" * LONG


async def test_a_compacted_session_resumes_into_the_same_conversation(
    make_world: Any, server: FakeServer
) -> None:
    world = await make_world(**SMALL)
    handle = await open_agent(world)
    server.queue(answer("one"), answer("two"), answer("SUMMARY"), answer("three"))
    for text in ("a", "b", "c"):
        await turn(handle, text * LONG)
    live = derive_messages(handle.agent.session)
    events = list(handle.agent.session.events)
    session_id = handle.agent.id
    await handle.dispose()

    resumed = await service(world, AGENTS).resume(session_id)
    try:
        assert [e.to_record() for e in resumed.agent.session.events] == [
            e.to_record() for e in events
        ]
        assert derive_messages(resumed.agent.session) == live
    finally:
        await resumed.dispose()


async def test_a_context_overflow_compacts_once_and_retries(
    make_world: Any, server: FakeServer
) -> None:
    world = await make_world()
    handle = await open_agent(world)
    server.queue(answer("one"), OVERFLOW, answer("SUMMARY"), answer("two"))

    await turn(handle, "first")
    await turn(handle, "second")

    session = handle.agent.session
    assert reasons(session) == ["completed", "completed"]
    (retry,) = of_type(session, "llm/retry")
    assert retry.data["code"] == "context-overflow"
    (compacted,) = of_type(session, "context/compacted")
    assert compacted.data["trigger"] == "overflow"
    assert compacted.seq < retry.seq
    assert len(server.requests) == 4
    sent = server.requests[3].json["messages"]
    assert sent[1]["content"] == SUMMARY_PREFIX + "SUMMARY"
    assert sent[2]["content"] == "second"
    assert derive_messages(session)[-1].content[0].text == "two"  # type: ignore[union-attr]


async def test_a_llama_cpp_overflow_line_compacts_and_retries_too(
    make_world: Any, server: FakeServer
) -> None:
    world = await make_world()
    handle = await open_agent(world)
    server.queue(answer("one"), llama_error(LLAMA_OVERFLOW), answer("SUMMARY"), answer("two"))

    await turn(handle, "first")
    await turn(handle, "second")

    session = handle.agent.session
    assert reasons(session) == ["completed", "completed"]
    (retry,) = of_type(session, "llm/retry")
    assert retry.data["code"] == "context-overflow"
    (compacted,) = of_type(session, "context/compacted")
    assert compacted.data["trigger"] == "overflow"


async def test_a_second_overflow_after_the_compaction_ends_the_turn_with_the_error(
    make_world: Any, server: FakeServer
) -> None:
    world = await make_world()
    handle = await open_agent(world)
    server.queue(answer("one"), OVERFLOW, answer("SUMMARY"), OVERFLOW)

    await turn(handle, "first")
    await turn(handle, "second")

    session = handle.agent.session
    assert reasons(session) == ["completed", "error"]
    assert "maximum context length" in str(of_type(session, "turn/end")[-1].data["reason"]["error"])  # type: ignore[index]
    assert len(of_type(session, "context/compacted")) == 1
    assert len(server.requests) == 4


async def test_cancel_during_the_summary_request_stops_it_and_appends_nothing(
    make_world: Any, server: FakeServer
) -> None:
    world = await make_world(**SMALL)
    handle = await open_agent(world)
    reached = asyncio.Event()
    server.queue(
        answer("one"),
        answer("two"),
        stream([delta("half a summ")], hold=asyncio.Event(), reached=reached),
    )
    await turn(handle, "a" * LONG)
    await turn(handle, "b" * LONG)

    handle.agent.followup(UserMessage.text("c" * LONG))
    await reached.wait()
    handle.agent.cancel()
    await handle.agent.when_idle()
    await server.all_closed()

    session = handle.agent.session
    assert reasons(session) == ["completed", "completed", "aborted"]
    assert of_type(session, "turn/end")[-1].data["reason"]["cause"] == "user"  # type: ignore[index]
    assert of_type(session, "context/compacted") == []
    assert "half a summ" not in str([e.data for e in of_type(session, "assistant/chunk")])
    assert len(server.requests) == 3

    # Nothing is left stuck: the next prompt compacts and runs.
    server.queue(answer("SUMMARY"), answer("four"))
    await turn(handle, "d")
    assert reasons(session)[-1] == "completed"
    assert len(of_type(session, "context/compacted")) == 1


async def test_a_failed_summary_request_leaves_the_request_uncompacted(
    make_world: Any, server: FakeServer
) -> None:
    world = await make_world(**SMALL)
    handle = await open_agent(world)
    server.queue(
        answer("one"),
        answer("two"),
        error(400, {"error": {"message": "bad summary"}}),
        answer("three"),
    )
    for text in ("a", "b", "c"):
        await turn(handle, text * LONG)

    session = handle.agent.session
    assert reasons(session) == ["completed"] * 3
    assert of_type(session, "context/compacted") == []
    sent = server.requests[3].json["messages"]
    assert sent[2]["content"] == "a" * LONG  # after the system prompt and the environment note


async def test_compaction_by_hand_is_on_disk_when_it_returns(
    make_world: Any, server: FakeServer
) -> None:
    world = await make_world()
    compaction = service(world, COMPACTION)
    handle = await open_agent(world)
    assert await compaction.compact(handle.agent) is None  # nothing to compact yet

    server.queue(answer("one"), answer("two"), answer("SUMMARY"))
    await turn(handle, "first")
    await turn(handle, "second")
    compacted = await compaction.compact(handle.agent)

    assert compacted is not None
    assert compacted.trigger == "manual"
    # The most recent turn fits what is kept verbatim: the first one is summarized.
    first_turn_end = next(e.seq for e in handle.agent.session.events if e.type == "step/end")
    assert compacted.last_seq == first_turn_end
    stored = world.session_file(handle.agent).read_text()
    assert '"type":"context/compacted"' in stored.replace(" ", "")
    messages = derive_messages(handle.agent.session)
    assert messages[0].content[0].text == SUMMARY_PREFIX + "SUMMARY"  # type: ignore[union-attr]
    assert messages[1].content[0].text == "second"  # type: ignore[union-attr]


async def test_compaction_by_hand_is_refused_while_a_turn_runs(
    make_world: Any, server: FakeServer
) -> None:
    world = await make_world()
    compaction = service(world, COMPACTION)
    handle = await open_agent(world)
    reached = asyncio.Event()
    server.queue(stream([delta("working")], hold=asyncio.Event(), reached=reached))
    handle.agent.followup(UserMessage.text("go"))
    await reached.wait()
    with pytest.raises(CompactionError, match="a turn is running"):
        await compaction.compact(handle.agent)
    handle.agent.cancel()
    await handle.agent.when_idle()


async def test_cancelling_a_compaction_by_hand_leaves_the_conversation_unchanged(
    make_world: Any, server: FakeServer
) -> None:
    world = await make_world()
    compaction = service(world, COMPACTION)
    handle = await open_agent(world)
    reached = asyncio.Event()
    server.queue(answer("one"), stream([delta("sum")], hold=asyncio.Event(), reached=reached))
    await turn(handle, "first")
    events = len(handle.agent.session.events)
    signal = CancelSignal()
    task = asyncio.ensure_future(compaction.compact(handle.agent, signal=signal))
    await reached.wait()
    signal.cancel("user")
    with pytest.raises(CompactionCancelledError):
        await task
    await server.all_closed()
    assert len(handle.agent.session.events) == events
