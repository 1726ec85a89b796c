"""Creation as a transaction, resume, and agents from configuration (points 11-13)."""

import asyncio
from pathlib import Path

import pytest

from tests.agent.support import prompts, turn_ends
from tests.agent.world import World, build_world, held, say
from tether.agent import AgentConflictError, AgentCreateError, Target, UserMessage
from tether.agent.events import AGENT_CREATED
from tether.agent.inbox import Inbox
from tether.runtime import Context
from tether.session import replay_inbox
from tether.session.store import SESSION_CREATED


async def test_failing_setup_rolls_back_everything(world: World) -> None:
    heard: list[str] = []
    world.ctx.on(AGENT_CREATED, lambda a: heard.append("created"))
    world.ctx.on(SESSION_CREATED, lambda s: heard.append("session"))
    scoped_undone = asyncio.Event()

    async def setup(agent):  # type: ignore[no-untyped-def]
        await agent.ctx.effect(lambda: scoped_undone.set)
        raise RuntimeError("setup broke")

    with pytest.raises(AgentCreateError, match="setup broke"):
        await world.get("agents").create("doomed", cwd="/w", setup=setup)
    assert heard == []
    assert scoped_undone.is_set()
    assert world.get("agents").get("doomed") is None
    assert world.get("sessions").get("doomed") is None
    assert not (world.data_dir / "sessions" / "doomed.jsonl").exists()
    # The id is reusable at once.
    handle = await world.get("agents").create("doomed", cwd="/w")
    assert handle.agent.id == "doomed"


async def test_two_concurrent_creates_of_one_id_exactly_one_wins(world: World) -> None:
    agents = world.get("agents")
    entered = asyncio.Event()

    async def slow_setup(agent):  # type: ignore[no-untyped-def]
        await entered.wait()

    first = asyncio.ensure_future(agents.create("same", cwd="/a", setup=slow_setup))
    second = asyncio.ensure_future(agents.create("same", cwd="/b", setup=slow_setup))
    await asyncio.sleep(0)
    entered.set()
    results = await asyncio.gather(first, second, return_exceptions=True)
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1 and isinstance(losers[0], AgentConflictError)
    assert [a.id for a in agents.list()] == ["same"]
    assert agents.get("same") is winners[0].agent


async def test_a_live_id_cannot_be_created_twice(world: World) -> None:
    await world.get("agents").create("taken", cwd="/w")
    with pytest.raises(AgentConflictError, match="'taken'"):
        await world.get("agents").create("taken", cwd="/w")


async def test_an_id_is_reusable_once_its_entry_detaches(world: World) -> None:
    handle = await world.get("agents").create("again", cwd="/w")
    await handle.dispose()
    second = await world.get("agents").create("again", cwd="/w")
    assert second.agent is not handle.agent


async def test_owner_unloading_mid_create_publishes_nothing(world: World) -> None:
    in_setup, proceed = asyncio.Event(), asyncio.Event()
    outcome: list[BaseException] = []

    async def setup(agent):  # type: ignore[no-untyped-def]
        in_setup.set()
        await proceed.wait()

    async def creator(ctx: Context, config: None) -> None:
        async def create() -> None:
            try:
                await ctx.agents.create("orphan", cwd="/w", setup=setup)
            except AgentCreateError as exc:
                outcome.append(exc)

        task = asyncio.ensure_future(create())

        async def wait_for_create() -> None:
            proceed.set()
            await task

        await ctx.effect(lambda: wait_for_create)

    creator.inject = ("agents",)  # type: ignore[attr-defined]
    fiber = await world.ctx.plugin(creator)
    await in_setup.wait()
    await fiber.dispose()
    assert outcome and "unloading" in str(outcome[0])
    assert world.get("agents").get("orphan") is None
    assert world.get("sessions").get("orphan") is None


async def test_resume_rebuilds_the_inbox_and_continues_turn_numbers(world: World) -> None:
    agents = world.get("agents")
    handle = await agents.create("resumable", cwd="/w")
    world.model.queue(say("first answer"))
    handle.agent.followup(UserMessage.text("one"))
    await handle.agent.when_idle()
    reached, release = asyncio.Event(), asyncio.Event()
    world.model.queue(held("interrupted", reached, release))
    handle.agent.followup(UserMessage.text("two"))
    handle.agent.followup(UserMessage.text("three, still queued"))
    await reached.wait()
    # Disposal cancels: the running turn aborts and the queued prompt is
    # cancelled, durably — so the rebuilt inbox is empty.
    await handle.dispose()

    resumed = await agents.resume("resumable")
    rebuilt = replay_inbox(resumed.agent.session.events)
    assert not rebuilt.queued and not rebuilt.steering
    world.model.queue(say("third answer"))
    resumed.agent.followup(UserMessage.text("four"))
    await resumed.agent.when_idle()
    session = resumed.agent.session
    assert [e["kind"] for e in turn_ends(session)] == ["completed", "aborted", "completed"]
    assert [e.data["turn"] for e in session.events if e.type == "turn/start"] == [1, 2, 3]
    assert prompts(session) == ["one", "two", "four"]


async def test_resume_runs_prompts_left_queued_by_a_crash(tmp_path: Path) -> None:
    world = await build_world(tmp_path)
    try:
        session = world.get("sessions").prepare("crashed", cwd="/w")
        world.get("sessions").enter(session)
        inbox = Inbox(session, lambda *args: None)
        inbox.insert(UserMessage.text("accepted before the crash"), Target.QUEUED)
        await world.get("sessions").flush(session)
        world.get("sessions").detach(session)

        world.model.queue(say("picked up"))
        resumed = await world.get("agents").resume("crashed")
        await resumed.agent.when_idle()
        assert prompts(resumed.agent.session) == ["accepted before the crash"]
        assert turn_ends(resumed.agent.session) == [{"kind": "completed"}]
    finally:
        await world.runtime.dispose()


async def test_resuming_a_live_session_is_rejected(world: World) -> None:
    await world.get("agents").create("live-one", cwd="/w")
    with pytest.raises(AgentConflictError):
        await world.get("agents").resume("live-one")


async def test_config_agents_are_owned_by_the_agent_loop(tmp_path: Path) -> None:
    world = await build_world(
        tmp_path, loop_config={"agents": [{"name": "helper", "session_id": "helper-session"}]}
    )
    try:
        agent = world.get("agents").get("helper-session")
        assert agent is not None
        world.model.queue(say("at your service"))
        agent.followup(UserMessage.text("hello"))
        await agent.when_idle()
        assert turn_ends(agent.session) == [{"kind": "completed"}]
        await world.loop.dispose()
        assert world.get("agents").list() == []
        assert (tmp_path / "sessions" / "helper-session.jsonl").exists()
    finally:
        await world.runtime.dispose()


async def test_creating_over_a_stored_session_id_is_refused(world: World) -> None:
    handle = await world.get("agents").create("kept", cwd="/w")
    world.model.queue(say("stored"))
    handle.agent.followup(UserMessage.text("remember"))
    await handle.agent.when_idle()
    await handle.dispose()
    before = (world.data_dir / "sessions" / "kept.jsonl").read_bytes()
    with pytest.raises(AgentConflictError, match="already stored: resume it"):
        await world.get("agents").create("kept", cwd="/w")
    assert (world.data_dir / "sessions" / "kept.jsonl").read_bytes() == before
    resumed = await world.get("agents").resume("kept")
    assert resumed.agent.session.last_turn == 1
