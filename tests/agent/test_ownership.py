"""Handles, owners and the one teardown (points 8-10)."""

import asyncio
from pathlib import Path

import pytest

from tests.agent.support import on_disk
from tests.agent.world import World, held, say
from tether.agent import Agent, AgentHandle, UserMessage
from tether.agent.events import AGENT_DISPOSED
from tether.runtime import Context
from tether.session import Session
from tether.session.store import SESSION_DISPOSED


async def test_observers_get_bare_agents_without_a_dispose_capability(world: World) -> None:
    handle = await world.get("agents").create(cwd="/w")
    assert isinstance(handle, AgentHandle)
    for seen in (world.get("agents").get(handle.agent.id), *world.get("agents").list()):
        assert seen is handle.agent
        assert not hasattr(seen, "dispose")


async def test_unloading_the_creating_plugin_disposes_its_agents(world: World) -> None:
    created: list[Agent] = []

    async def creator(ctx: Context, config: None) -> None:
        created.append((await ctx.agents.create(cwd="/w")).agent)

    creator.inject = ("agents",)  # type: ignore[attr-defined]
    fiber = await world.ctx.plugin(creator)
    agent = created[0]
    assert world.get("agents").get(agent.id) is agent
    await fiber.dispose()
    assert world.get("agents").get(agent.id) is None
    assert world.get("sessions").get(agent.id) is None
    assert world.loop.state == "active"


async def test_unloading_the_agent_loop_disposes_every_agent_it_made(world: World) -> None:
    agents = [(await world.get("agents").create(cwd="/w")).agent for _ in range(3)]
    reached, release = asyncio.Event(), asyncio.Event()
    world.model.queue(held("busy", reached, release))
    agents[0].followup(UserMessage.text("in flight"))
    await reached.wait()
    await world.loop.dispose()
    assert world.get("agents").list() == []
    assert world.get("sessions").list() == []
    records = on_disk(world.data_dir, agents[0])
    assert records[-1]["type"] == "turn/end"
    assert records[-1]["data"]["reason"] == {"kind": "aborted", "cause": "disposed"}


async def test_concurrent_and_repeated_dispose_run_the_teardown_once(world: World) -> None:
    handle = await world.get("agents").create(cwd="/w")
    disposed: list[Agent] = []
    world.ctx.on(AGENT_DISPOSED, disposed.append)
    await asyncio.gather(handle.dispose(), handle.dispose(), world.loop.dispose())
    await handle.dispose()
    assert disposed == [handle.agent]


async def _teardown_order(world: World, dispose_via_unload: bool) -> list[str]:
    order: list[str] = []
    holder: list[AgentHandle] = []

    async def owner(ctx: Context, config: None) -> None:
        holder.append(await ctx.agents.create(cwd="/w"))

    owner.inject = ("agents",)  # type: ignore[attr-defined]
    fiber = await world.ctx.plugin(owner)
    handle = holder[0]
    agent = handle.agent
    reached, release = asyncio.Event(), asyncio.Event()
    world.model.queue(held("streaming", reached, release))
    agent.followup(UserMessage.text("long task"))
    await reached.wait()

    def on_agent_disposed(a: Agent) -> None:
        last = on_disk(world.data_dir, a)[-1]
        order.append(f"agent/disposed (disk ends with {last['type']} {last['data']['reason']})")

    def on_session_disposed(s: Session) -> None:
        order.append("session/disposed")

    world.ctx.on(AGENT_DISPOSED, on_agent_disposed)
    world.ctx.on(SESSION_DISPOSED, on_session_disposed)
    await agent.ctx.effect(lambda: lambda: order.append("scope unwound"))
    if dispose_via_unload:
        await fiber.dispose()
    else:
        await handle.dispose()
    return order


@pytest.mark.parametrize("via", ["handle", "fiber-unload"])
async def test_teardown_order_is_the_same_on_both_paths(world: World, via: str) -> None:
    order = await _teardown_order(world, dispose_via_unload=via == "fiber-unload")
    assert order == [
        "agent/disposed (disk ends with turn/end {'kind': 'aborted', 'cause': 'disposed'})",
        "session/disposed",
        "scope unwound",
    ]


async def test_a_raising_teardown_listener_cannot_skip_later_steps(world: World) -> None:
    handle = await world.get("agents").create(cwd="/w")
    later: list[str] = []

    def broken(agent: Agent) -> None:
        raise RuntimeError("listener bug")

    world.ctx.on(AGENT_DISPOSED, broken)
    world.ctx.on(SESSION_DISPOSED, lambda s: later.append("session/disposed"))
    await handle.agent.ctx.effect(lambda: lambda: later.append("scope"))
    await handle.dispose()
    assert later == ["session/disposed", "scope"]


async def test_dispose_returns_with_the_closing_turn_end_on_disk(
    world: World, tmp_path: Path
) -> None:
    handle = await world.get("agents").create(cwd="/w")
    reached, release = asyncio.Event(), asyncio.Event()
    world.model.queue(held("x", reached, release))
    handle.agent.followup(UserMessage.text("go"))
    await reached.wait()
    await handle.dispose()
    records = on_disk(world.data_dir, handle.agent)
    assert records[-1]["type"] == "turn/end"
    assert len(records) == len(handle.agent.session.events)


async def test_a_disposed_agent_accepts_no_more_input(world: World) -> None:
    from tether.agent import AgentDisposedError

    handle = await world.get("agents").create(cwd="/w")
    await handle.dispose()
    with pytest.raises(AgentDisposedError):
        handle.agent.followup(UserMessage.text("too late"))
    await handle.agent.when_idle()


async def test_an_idle_agent_disposes_without_writing_anything(world: World) -> None:
    handle = await world.get("agents").create(cwd="/w")
    world.model.queue(say("ok"))
    await handle.dispose()
    assert not (world.data_dir / "sessions" / f"{handle.agent.id}.jsonl").exists()


async def test_a_failed_closing_flush_is_reported_and_when_idle_still_resolves(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.agent import AgentError
    from tether.persist.backends.jsonl import JsonlBackend

    handle = await world.get("agents").create(cwd="/w")
    reached, release = asyncio.Event(), asyncio.Event()
    world.model.queue(held("x", reached, release))
    handle.agent.followup(UserMessage.text("go"))
    await reached.wait()

    def disk_full(self: JsonlBackend, header: object, events: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(JsonlBackend, "write", disk_full)
    monkeypatch.setattr(JsonlBackend, "create", disk_full)
    with pytest.raises(AgentError, match="closing events could not be written"):
        await handle.dispose()
    await asyncio.wait_for(handle.agent.when_idle(), timeout=5)
    assert world.get("agents").get(handle.agent.id) is None
    assert world.get("sessions").get(handle.agent.id) is None
