"""``tether acp`` with the real pieces: an OpenAI-compatible model served by the fake
server (:mod:`tests.adapters.fake_server`) and the real ``bash`` tools."""

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from acp.schema import ToolCallProgress, ToolCallStart

from tests.acp.harness import (
    LEDGER,
    AcpProcess,
    fake_model_overlay,
    processes_mentioning,
    serving,
)
from tests.adapters.fake_server import FakeServer, stream, until_client_leaves
from tests.adapters.support import KEY, call, delta, text_answer

EXIT_BOUND = 5.0


def tool_call(call_id: str, tool: str, **arguments: object) -> list[object]:
    """A streamed answer that calls ``tool`` with ``arguments``."""
    fragment = call(0, json.dumps(arguments), id=call_id, name=tool)
    return [delta(calls=[fragment]), delta(finish="tool_calls"), "[DONE]"]


@pytest.fixture
async def model() -> AsyncIterator[FakeServer]:
    async with FakeServer() as fake:
        yield fake


@pytest.fixture
async def acp(tmp_path: Path, model: FakeServer) -> AsyncIterator[AcpProcess]:
    async with serving(
        tmp_path,
        "--mode",
        "auto",
        overlay=fake_model_overlay(model.url, KEY) + LEDGER,
        model="openai-compatible:test-model",
    ) as server:
        yield server


async def test_a_prompt_streams_the_models_text_and_ends_the_turn(
    acp: AcpProcess, model: FakeServer
) -> None:
    model.queue(stream(text_answer("Hello from the model")))
    sid = await acp.new_session()
    assert await acp.prompt(sid, "say hello") == "end_turn"
    assert acp.client.text(sid) == "Hello from the model"
    (request,) = model.requests
    assert request.json["messages"][-1] == {"role": "user", "content": "say hello"}


async def test_a_bash_call_streams_its_tool_updates(acp: AcpProcess, model: FakeServer) -> None:
    model.queue(
        stream(tool_call("c1", "bash", command="echo hi")), stream(text_answer("it said hi"))
    )
    sid = await acp.new_session()
    assert await acp.prompt(sid, "run echo hi") == "end_turn"
    tool = [u for u in acp.client.of(sid) if isinstance(u, ToolCallStart | ToolCallProgress)]
    # Between the start and the end: in progress, then (as the command's output comes)
    # its progress, at most a few times a second.
    start, running, *progress, done = tool
    assert isinstance(start, ToolCallStart)
    assert (start.title, start.kind, start.status) == ("echo hi", "execute", "pending")
    assert running.status == "in_progress" and done.status == "completed"
    assert all(update.status in (None, "in_progress") for update in progress)
    assert done.content is not None and "hi" in done.content[0].content.text  # type: ignore[union-attr]
    assert acp.client.text(sid) == "it said hi"


async def test_cancel_mid_stream_answers_cancelled_and_closes_the_request(
    acp: AcpProcess, model: FakeServer
) -> None:
    reached = asyncio.Event()
    model.queue(until_client_leaves([delta("thinking")], reached=reached))
    sid = await acp.new_session()
    prompt = acp.start_prompt(sid, "think long")
    await acp.client.wait_for(acp.client.saw_text(sid, "thinking"))
    await acp.conn.cancel(session_id=sid)
    assert await prompt == "cancelled"
    await model.all_closed()
    model.queue(stream(text_answer("back again")))
    assert await acp.prompt(sid, "and now") == "end_turn"


async def test_background_tasks_are_isolated_and_killed_on_disconnect(
    acp: AcpProcess, model: FakeServer
) -> None:
    token = f"{30 + secrets.randbelow(1000) / 1000:.3f}"
    model.queue(
        stream(tool_call("c1", "bash", command=f"sleep {token}", run_in_background=True)),
        stream(text_answer("started it")),
    )
    owner = await acp.new_session()
    assert await acp.prompt(owner, "start a sleeper") == "end_turn"
    assert processes_mentioning(token) != []
    started = [u for u in acp.client.of(owner) if isinstance(u, ToolCallProgress) and u.content]
    task_id = started[-1].content[0].content.text.split()[-1]  # type: ignore[index, union-attr]

    model.queue(
        stream(tool_call("c2", "bash_output", task_id=task_id)),
        stream(text_answer("not mine")),
    )
    other = await acp.new_session()
    assert await acp.prompt(other, "peek at it") == "end_turn"
    refused = [u for u in acp.client.of(other) if isinstance(u, ToolCallProgress) and u.content]
    assert refused[-1].status == "failed"
    assert f"no background task {task_id} in this session" in refused[-1].content[0].content.text  # type: ignore[index, union-attr]

    await acp.close_stdin(EXIT_BOUND)
    assert acp.process.returncode == 0, acp.stderr()
    assert processes_mentioning(token) == []
    assert acp.ledger()[-1] == "closed agents= sessions="
