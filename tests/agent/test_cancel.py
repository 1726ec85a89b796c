"""cancel(): the single stop, queue-aware, landing cleanly anywhere (points 4-6)."""

import asyncio

import pytest

from tests.agent.support import assert_balanced, last_reason, prompts, turn_ends, types
from tests.agent.world import World, calls, held, say
from tether.agent import Agent, CancelCause, UserMessage
from tether.agent.events import CANCEL_REQUESTED
from tether.loop.hooks import PRE_STEP
from tether.runtime import Veto
from tether.session import replay_inbox


def test_cancel_is_the_only_public_stop() -> None:
    from tether.loop.agent import LoopAgent

    public = {name for name in dir(LoopAgent) if not name.startswith("_")}
    assert public == {name for name in dir(Agent) if not name.startswith("_")}
    assert "cancel" in public
    assert not public & {"abort", "stop", "stop_turn", "interrupt", "halt", "dispose", "start"}


async def test_cancel_emits_cancel_requested_before_clearing_and_aborting(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    reached, release = asyncio.Event(), asyncio.Event()
    world.model.queue(held("partial", reached, release))
    agent.followup(UserMessage.text("first"))
    agent.followup(UserMessage.text("queued behind"))
    await reached.wait()
    observed: list[tuple[CancelCause, int, str]] = []

    def on_cancel(a: Agent, cause: CancelCause) -> None:
        # Still queued, turn still running: the notice comes first.
        queued = replay_inbox(a.session.events).queued
        observed.append((cause, len(queued), a.status))

    agent.ctx.on(CANCEL_REQUESTED, on_cancel)
    agent.cancel()
    await agent.when_idle()
    assert observed == [(CancelCause.USER, 1, "running")]
    assert prompts(agent.session) == ["first"]
    assert last_reason(agent.session) == {"kind": "aborted", "cause": "user"}


async def test_cancel_before_claim_never_runs(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    agent.followup(UserMessage.text("never"))
    agent.cancel()
    await agent.when_idle()
    assert "turn/start" not in types(agent.session)
    assert world.model.requests == []
    splices = [(e.data["queue"], e.data["op"]) for e in agent.session.events]
    assert splices == [("queued", "insert"), ("queued", "cancel")]


async def test_a_prompt_accepted_after_cancel_runs_as_its_own_turn(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    agent.followup(UserMessage.text("cancelled"))
    agent.cancel()
    world.model.queue(say("fresh answer"))
    agent.followup(UserMessage.text("independent"))
    await agent.when_idle()
    assert prompts(agent.session) == ["independent"]
    assert [r["kind"] for r in turn_ends(agent.session)] == ["completed"]


async def test_cancelling_an_idle_empty_agent_emits_nothing_and_strands_nothing(
    world: World,
) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    heard: list[object] = []
    agent.ctx.on(CANCEL_REQUESTED, lambda a, cause: heard.append(cause))
    agent.cancel()
    assert heard == [] and len(agent.session.events) == 0
    world.model.queue(say("still works"))
    agent.followup(UserMessage.text("next"))
    await agent.when_idle()
    assert [r["kind"] for r in turn_ends(agent.session)] == ["completed"]


@pytest.mark.parametrize("cause", [CancelCause.PARENT, CancelCause.HANDOFF])
async def test_cancel_records_its_cause_in_turn_end(world: World, cause: CancelCause) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    reached, release = asyncio.Event(), asyncio.Event()
    world.model.queue(held("x", reached, release))
    agent.followup(UserMessage.text("go"))
    await reached.wait()
    agent.cancel(cause)
    await agent.when_idle()
    assert last_reason(agent.session) == {"kind": "aborted", "cause": cause.value}


async def test_when_idle_resolves_after_the_aborted_turn_closed(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    reached, release = asyncio.Event(), asyncio.Event()
    world.model.queue(held("x", reached, release))
    agent.followup(UserMessage.text("go"))
    await reached.wait()
    agent.cancel()
    await agent.when_idle()
    assert agent.session.events[-1].type == "turn/end"
    assert agent.status == "idle"


async def test_when_idle_follows_a_turn_that_starts_while_it_waits(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    reached, release = asyncio.Event(), asyncio.Event()
    world.model.queue(held("one", reached, release), say("two"))
    agent.followup(UserMessage.text("first"))
    waiter = asyncio.ensure_future(agent.when_idle())
    await reached.wait()
    agent.followup(UserMessage.text("second"))
    release.set()
    await waiter
    assert [r["kind"] for r in turn_ends(agent.session)] == ["completed", "completed"]


async def test_cancel_mid_stream_keeps_streamed_text_as_interrupted(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    reached, release = asyncio.Event(), asyncio.Event()
    world.model.queue(held("half an answer", reached, release))
    agent.followup(UserMessage.text("go"))
    await reached.wait()
    agent.cancel()
    await agent.when_idle()
    message = next(e for e in agent.session.events if e.type == "assistant/message")
    assert message.data["interrupted"] is True
    assert message.data["content"][0]["text"] == "half an answer"  # type: ignore[index]
    assert_balanced(agent.session)


async def test_cancel_during_tools_awaits_started_and_answers_unstarted(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    world.model.queue(calls(("c1", "wait", '{"key": "slow"}'), ("c2", "echo", '{"text": "never"}')))
    agent.followup(UserMessage.text("go"))
    reached, _release = world.gates.get("slow")
    await reached.wait()
    agent.cancel()
    await agent.when_idle()
    results = {e.data["id"]: e.data for e in agent.session.events if e.type == "tool/result"}
    assert results["c1"]["content"] == "slow stopped by cancel"
    assert "before it started" in str(results["c2"]["content"])
    assert world.gates.saw_cancel == ["slow"]
    assert "echo:never" not in world.executed
    assert [e.data["id"] for e in agent.session.events if e.type == "tool/call"] == ["c1"]
    assert last_reason(agent.session) == {"kind": "aborted", "cause": "user"}
    assert_balanced(agent.session)


async def test_cancel_during_pre_step_leaves_a_turn_without_steps(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow_policy(messages, next_, a, step):  # type: ignore[no-untyped-def]
        entered.set()
        await release.wait()
        return await next_(messages)

    world.ctx.on(PRE_STEP, slow_policy)
    agent.followup(UserMessage.text("go"))
    await entered.wait()
    agent.cancel()
    release.set()
    await agent.when_idle()
    assert "step/start" not in types(agent.session)
    assert last_reason(agent.session) == {"kind": "aborted", "cause": "user"}


async def test_pre_step_veto_ends_the_turn_blocked(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent

    def deny(messages, next_, a, step):  # type: ignore[no-untyped-def]
        raise Veto("not today")

    world.ctx.on(PRE_STEP, deny)
    agent.followup(UserMessage.text("go"))
    await agent.when_idle()
    assert last_reason(agent.session) == {"kind": "blocked"}
    assert world.model.requests == []
