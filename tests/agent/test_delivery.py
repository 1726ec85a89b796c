"""Delivery: followup, steer, inject, the inbox, status (points 1-3 of the agent contract)."""

import asyncio

from tests.agent.support import prompts, turn_ends, types
from tests.agent.world import World, call, say
from tether.agent import Agent, AgentStatus, Target, UserMessage
from tether.agent.events import AGENT_STATUS, INBOX_INSERTED


async def test_agent_id_is_its_session_id(world: World) -> None:
    handle = await world.get("agents").create("fixed-id", cwd="/w")
    assert handle.agent.id == handle.agent.session.id == "fixed-id"
    assert world.get("agents").get("fixed-id") is handle.agent
    assert world.get("sessions").get("fixed-id") is handle.agent.session


async def test_each_followup_is_its_own_turn_and_prompts_never_merge(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    world.model.queue(say("one"), say("two"), say("three"))
    for text in ("first", "second", "third"):
        agent.followup(UserMessage.text(text))
    await agent.when_idle()
    assert [r["kind"] for r in turn_ends(agent.session)] == ["completed"] * 3
    # Each turn's request saw exactly the prompts up to its own.
    last_user = [req.messages[-1] for req in world.model.requests]
    assert [m.content[0].text for m in last_user] == ["first", "second", "third"]  # type: ignore[union-attr]


async def test_status_changes_emit_agent_status(world: World) -> None:
    seen: list[tuple[Agent, AgentStatus]] = []
    world.ctx.on(AGENT_STATUS, lambda agent, status: seen.append((agent, status)))
    agent = (await world.get("agents").create(cwd="/w")).agent
    world.model.queue(say("ok"))
    agent.followup(UserMessage.text("go"))
    await agent.when_idle()
    assert [s for a, s in seen if a is agent] == [AgentStatus.RUNNING, AgentStatus.IDLE]
    assert agent.status is AgentStatus.IDLE


async def test_steer_is_delivered_at_the_next_step_boundary(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    reached, release = world.gates.get("g")
    world.model.queue(call("wait", '{"key": "g"}'), say("saw the steer"))
    agent.followup(UserMessage.text("start"))
    await reached.wait()
    agent.steer(UserMessage.text("change course"))
    release.set()
    await agent.when_idle()
    log = types(agent.session)
    # The steer lands in step 2 of the same turn, after step 1's tool result.
    assert log.count("turn/start") == 1
    second_step = log.index("step/start", log.index("tool/result"))
    assert log.index("user/message", second_step) > second_step
    assert prompts(agent.session) == ["start", "change course"]


async def test_steer_when_idle_starts_a_turn(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    world.model.queue(say("steered"))
    agent.steer(UserMessage.text("nudge"))
    await agent.when_idle()
    assert [r["kind"] for r in turn_ends(agent.session)] == ["completed"]


async def test_inject_adds_context_without_waking(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    agent.inject(UserMessage.text("background fact", source="plugin"))
    await agent.when_idle()
    assert "turn/start" not in types(agent.session)
    world.model.queue(say("ok"))
    agent.followup(UserMessage.text("question"))
    await agent.when_idle()
    # The next turn claims the prompt plus the pending injected context.
    assert prompts(agent.session) == ["question", "background fact"]


async def test_inbox_changes_are_logged_before_they_take_effect(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    inserted: list[int] = []

    def on_inserted(a: Agent, messages: tuple[UserMessage, ...], queue: Target) -> None:
        # By the time anyone hears of the insert, the splice is in the log.
        inserted.append(len(a.session.events))
        assert a.session.events[-1].type == "agent/inbox/spliced"

    agent.ctx.on(INBOX_INSERTED, on_inserted)
    world.model.queue(say("ok"))
    agent.followup(UserMessage.text("hello"))
    await agent.when_idle()
    splices = [e.data for e in agent.session.events if e.type == "agent/inbox/spliced"]
    assert [(s["queue"], s["op"]) for s in splices] == [("queued", "insert"), ("queued", "claim")]
    assert inserted == [1]


async def test_user_messages_carry_unique_ids_and_sources() -> None:
    a, b = UserMessage.text("x"), UserMessage.text("x", source="notice")
    assert a.id != b.id and (a.source, b.source) == ("user", "notice")


async def test_scoped_listeners_hear_only_their_own_agent(world: World) -> None:
    agents = world.get("agents")
    first = (await agents.create(cwd="/w")).agent
    second = (await agents.create(cwd="/w")).agent
    heard: list[Agent] = []
    first.ctx.on(AGENT_STATUS, lambda agent, status: heard.append(agent))
    world.model.queue(say("a"), say("b"))
    second.followup(UserMessage.text("to second"))
    await second.when_idle()
    first.followup(UserMessage.text("to first"))
    await first.when_idle()
    assert heard and all(agent is first for agent in heard)


async def test_scope_registrations_unwind_with_the_agent(world: World) -> None:
    handle = await world.get("agents").create(cwd="/w")
    undone = asyncio.Event()
    await handle.agent.ctx.effect(lambda: undone.set)
    await handle.dispose()
    assert undone.is_set()
