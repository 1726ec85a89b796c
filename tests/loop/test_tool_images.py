"""An image ``read`` returns reaches a model that accepts images, through its adapter;
a later model that does not is sent a note in its place, and the log keeps the image."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from msgspec.structs import replace

from tests.adapters.fake_server import FakeServer, stream
from tests.adapters.support import call, delta, text_answer
from tests.adapters.world import AdapterWorld, build_world
from tests.plugins.fs_support import PNG_1X1
from tether.agent import Agent, UserMessage
from tether.content import ImageRef, ToolMessage
from tether.llm.request import ModelRequest
from tether.loop.hooks import REQUEST
from tether.plugins import tool_fs
from tether.session import ToolResultEvent
from tether.session.settings import MODEL_OPTION, ConfigChanged

VISION = "openai-compatible:vision-model"
"""Listed in the catalog as accepting images; the default ``test-model`` is not."""

TEXT = "openai-compatible:test-model"


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    async with FakeServer() as fake:
        yield fake


def read_call(path: str) -> list[object]:
    arguments = '{"path": "' + path + '"}'
    return [
        delta(calls=[call(0, arguments, id="call_r", name="read")]),
        delta(finish="tool_calls"),
        "[DONE]",
    ]


@contextlib.asynccontextmanager
async def files_world(
    server: FakeServer, tmp_path: Path, model: str
) -> AsyncIterator[AdapterWorld]:
    """A world of agents on ``model`` with the file tools and ``cat.png`` in its directory."""
    llm = {"models": {VISION: {"images": True}}}
    built = await build_world(tmp_path / "data", server, model=model, llm=llm)
    try:
        await built.runtime.ctx.plugin(tool_fs)
        (tmp_path / "data" / "cat.png").write_bytes(PNG_1X1)
        yield built
    finally:
        await built.runtime.dispose()


@pytest.fixture
async def world(server: FakeServer, tmp_path: Path) -> AsyncIterator[AdapterWorld]:
    """A vision model's world (see :func:`files_world`)."""
    async with files_world(server, tmp_path, VISION) as built:
        yield built


@pytest.fixture
async def text_world(server: FakeServer, tmp_path: Path) -> AsyncIterator[AdapterWorld]:
    """A text model's world (see :func:`files_world`)."""
    async with files_world(server, tmp_path, TEXT) as built:
        yield built


IMAGE = ImageRef.inline("image/png", PNG_1X1)


async def read_the_picture(world: AdapterWorld, answer: str) -> Agent:
    """An agent that read ``cat.png`` (its result holds the image), then answered."""
    world.server.queue(stream(read_call("cat.png")), stream(text_answer(answer)))
    agent = await world.agent()
    agent.followup(UserMessage.text("what is in cat.png?"))
    await agent.when_idle()
    (result,) = [e.payload for e in agent.session.events if e.type == "tool/result"]
    assert isinstance(result, ToolResultEvent) and result.images == (IMAGE,)
    return agent


async def test_an_image_read_reaches_a_vision_model_and_a_later_text_model_gets_a_note(
    server: FakeServer, world: AdapterWorld
) -> None:
    agent = await read_the_picture(world, "a cat")
    sent = server.requests[1].json["messages"]
    assert sent[-1]["role"] == "user"
    assert sent[-1]["content"][1] == {"type": "image_url", "image_url": {"url": IMAGE.url}}

    agent.session.append(ConfigChanged(option=MODEL_OPTION, value="openai-compatible:test-model"))
    server.queue(stream(text_answer("no idea")))
    agent.followup(UserMessage.text("and now?"))
    await agent.when_idle()

    again = server.requests[2].json
    assert again["model"] == "test-model"
    tool = next(m for m in again["messages"] if m["role"] == "tool")
    assert tool["content"].endswith(
        "\n[the result held an image, left out: the model in use "
        "(openai-compatible:test-model) does not accept images]"
    )
    assert "image_url" not in server.requests[2].body.decode()


async def test_a_model_a_request_listener_switches_to_gets_the_images_it_accepts(
    server: FakeServer, world: AdapterWorld
) -> None:
    text_model = TEXT

    async def to_text_model_after_the_read(
        request: ModelRequest,
        next_: Callable[[ModelRequest], Awaitable[ModelRequest]],
        agent: object,
    ) -> ModelRequest:
        if isinstance(request.messages[-1], ToolMessage):
            request = replace(request, model=text_model)
        return await next_(request)

    world.runtime.ctx.on(REQUEST, to_text_model_after_the_read)
    await read_the_picture(world, "no idea")
    sent = server.requests[1]
    assert sent.json["model"] == "test-model"
    tool = next(m for m in sent.json["messages"] if m["role"] == "tool")
    assert tool["content"].endswith(
        "\n[the result held an image, left out: the model in use "
        f"({text_model}) does not accept images]"
    )
    assert "image_url" not in sent.body.decode()


async def test_tools_decide_about_images_for_the_model_a_request_listener_switches_to(
    server: FakeServer, text_world: AdapterWorld
) -> None:
    async def to_vision_model(
        request: ModelRequest,
        next_: Callable[[ModelRequest], Awaitable[ModelRequest]],
        agent: object,
    ) -> ModelRequest:
        return await next_(replace(request, model=VISION))

    text_world.runtime.ctx.on(REQUEST, to_vision_model)
    await read_the_picture(text_world, "a cat")  # the read result holds the image
    assert [sent.json["model"] for sent in server.requests] == ["vision-model"] * 2
    after = server.requests[1].json["messages"]
    assert after[-1]["content"][1] == {"type": "image_url", "image_url": {"url": IMAGE.url}}
