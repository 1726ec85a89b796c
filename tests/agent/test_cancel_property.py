"""Property: a cancel landing at any point leaves a balanced, valid log."""

import asyncio
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.agent.support import assert_balanced, on_disk
from tests.agent.world import build_world
from tether.agent import UserMessage
from tether.llm.chunks import Finish, StreamChunk, TextDelta, ToolCallDelta
from tether.llm.request import ModelRequest
from tether.runtime import CancelSignal


def chatty(turn: int, with_tools: bool):  # type: ignore[no-untyped-def]
    async def script(request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamChunk]:
        for index in range(5):
            await asyncio.sleep(0)
            yield TextDelta(f"t{turn}w{index} ")
        if with_tools:
            yield ToolCallDelta(index=0, id=f"a{turn}", name="echo", args_delta='{"text": "x"}')
            yield ToolCallDelta(index=1, id=f"b{turn}", name="wait", args_delta='{"key": "open"}')
            yield ToolCallDelta(index=2, id=f"c{turn}", name="echo", args_delta='{"text": "y"}')
            yield Finish("tool-calls")
        else:
            yield Finish("stop")

    return script


async def scenario(data_dir: Path, prompts: int, cancel_after: int, later: int) -> None:
    world = await build_world(data_dir)
    try:
        world.gates.get("open")[1].set()
        for turn in range(prompts + later):
            world.model.queue(chatty(turn, with_tools=True), chatty(turn, with_tools=False))
        agent = (await world.get("agents").create("prop", cwd="/w")).agent
        for index in range(prompts):
            agent.followup(UserMessage.text(f"p{index}"))
        for _ in range(cancel_after):
            await asyncio.sleep(0)
        agent.cancel()
        for index in range(later):
            agent.followup(UserMessage.text(f"later{index}"))
        await asyncio.wait_for(agent.when_idle(), timeout=10)
        assert_balanced(agent.session)
        ends = [e.data["reason"]["kind"] for e in agent.session.events if e.type == "turn/end"]  # type: ignore[index]
        assert ends.count("aborted") <= 1
        # Prompts accepted after the cancel each ran as a completed turn.
        assert ends[len(ends) - later :] == ["completed"] * later
        await world.get("sessions").flush(agent.session)
        if agent.session.events:
            assert len(on_disk(data_dir, agent)) == len(agent.session.events)
        else:
            assert not (data_dir / "sessions" / "prop.jsonl").exists()
    finally:
        await world.runtime.dispose()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    prompts=st.integers(min_value=0, max_value=3),
    cancel_after=st.integers(min_value=0, max_value=80),
    later=st.integers(min_value=0, max_value=2),
)
def test_cancel_at_any_point_leaves_a_balanced_log(
    prompts: int, cancel_after: int, later: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(scenario(Path(tmp), prompts, cancel_after, later))
