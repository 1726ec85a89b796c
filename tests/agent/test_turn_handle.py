"""The turn handle: every delivery says which turn took it, how that turn ended and
whether it is on disk (claimed → ended → durable), or that it never ran.

A real agent loop over the scripted model and the JSONL store of the agent tests.
"""

from __future__ import annotations

import asyncio
import errno

import pytest

from tests.agent.support import on_disk
from tests.agent.test_submit import HeldFlush
from tests.agent.world import World, call, say
from tether import NeverRan, NotStoredError, TurnClaimed, TurnEnded, TurnHandle
from tether.agent import Agent, AgentError, CancelCause, UserMessage
from tether.session import Aborted, Completed
from tether.session.store import SESSION_FLUSH


async def new_agent(world: World) -> Agent:
    return (await world.get("agents").create(cwd="/w")).agent


async def held_turn(world: World, agent: Agent) -> tuple[TurnHandle, asyncio.Event]:
    """Start a turn held in a tool call: its prompt's handle, and the event that lets it
    finish (answering "first done")."""
    reached, release = world.gates.get("g")
    world.model.queue(call("wait", '{"key": "g"}'), say("first done"))
    handle = agent.followup(UserMessage.text("first"))
    await reached.wait()
    return handle, release


def seq_of(agent: Agent, event_type: str, turn: int) -> int:
    return next(
        e.seq for e in agent.session.events if e.type == event_type and e.data["turn"] == turn
    )


async def test_a_prompt_is_claimed_by_its_turn_ends_with_its_answer_and_is_durable(
    world: World,
) -> None:
    agent = await new_agent(world)
    world.model.queue(say("the answer"))
    handle = agent.followup(UserMessage.text("question"))
    claimed = await handle.claimed()
    assert claimed == TurnClaimed(turn=1, seq=seq_of(agent, "turn/start", 1))
    ended = await handle.ended()
    assert isinstance(ended, TurnEnded)
    assert (ended.turn, ended.reason, ended.answer) == (1, Completed(), "the answer")
    assert ended.end_seq == seq_of(agent, "turn/end", 1) and ended.start_seq == claimed.seq
    assert await handle.durable() == ended
    stored = on_disk(world.data_dir, agent)
    assert [r["seq"] for r in stored if r["type"] == "turn/end"] == [ended.end_seq]
    # Settled states answer again, at once.
    assert await handle.claimed() == claimed and handle.outcome == ended


async def test_a_queued_prompt_is_claimed_only_by_the_turn_after_the_running_one(
    world: World,
) -> None:
    agent = await new_agent(world)
    _first, finish_first = await held_turn(world, agent)
    world.model.queue(say("second answer"))
    second = agent.followup(UserMessage.text("second"))
    claiming = asyncio.ensure_future(second.claimed())
    for _ in range(3):
        await asyncio.sleep(0)
    # The running turn holds the driver: nothing claims the queued prompt meanwhile.
    assert not claiming.done() and second.outcome is None
    finish_first.set()
    assert (await claiming).turn == 2
    ended = await second.ended()
    assert isinstance(ended, TurnEnded) and ended.answer == "second answer"


async def test_a_steer_joins_the_running_turn_and_ends_with_it(world: World) -> None:
    agent = await new_agent(world)
    prompt, release = await held_turn(world, agent)
    steer = agent.steer(UserMessage.text("and also this"))
    release.set()
    assert await steer.claimed() == await prompt.claimed()
    ended = await steer.ended()
    assert ended == await prompt.ended()
    assert isinstance(ended, TurnEnded) and ended.answer == "first done"
    assert agent.session.last_turn == 1


async def test_messages_a_turn_took_together_name_the_same_turn(world: World) -> None:
    agent = await new_agent(world)
    world.model.queue(say("one answer"))
    # Delivered before the driver runs: the turn takes the prompt and the steering.
    prompt = agent.followup(UserMessage.text("prompt"))
    steer = agent.steer(UserMessage.text("steer"))
    context = agent.inject(UserMessage.text("context"))
    outcomes = [await h.durable() for h in (prompt, steer, context)]
    assert outcomes[0] == outcomes[1] == outcomes[2]
    assert isinstance(outcomes[0], TurnEnded) and outcomes[0].turn == 1
    assert agent.session.last_turn == 1


async def test_a_prompt_cancelled_before_its_claim_never_ran(world: World) -> None:
    agent = await new_agent(world)
    first, _release = await held_turn(world, agent)
    queued = agent.followup(UserMessage.text("taken back"))
    agent.cancel()
    assert await queued.claimed() == NeverRan(cause=CancelCause.USER)
    assert await queued.durable() == NeverRan(cause=CancelCause.USER)
    ended = await first.ended()
    assert isinstance(ended, TurnEnded) and ended.reason == Aborted(cause="user")
    await agent.when_idle()
    assert agent.session.last_turn == 1
    # Taken back before any turn took it: stored as cancelled, never claimed.
    stored = [r["data"] for r in on_disk(world.data_dir, agent) if r["type"].endswith("spliced")]
    assert [d["op"] for d in stored if queued.message.id in str(d)] == ["insert", "cancel"]


async def test_the_running_turn_cancelled_ends_its_handle_aborted(world: World) -> None:
    agent = await new_agent(world)
    handle, _release = await held_turn(world, agent)
    agent.cancel(CancelCause.PARENT)
    ended = await handle.durable()
    assert isinstance(ended, TurnEnded) and ended.reason == Aborted(cause="parent")


async def test_an_agent_disposed_before_the_claim_leaves_the_prompt_never_ran(
    world: World,
) -> None:
    handle = await world.get("agents").create(cwd="/w")
    first, _release = await held_turn(world, handle.agent)
    queued = handle.agent.followup(UserMessage.text("queued"))
    await handle.dispose()
    assert await queued.ended() == NeverRan(cause=CancelCause.DISPOSED)
    ended = await first.durable()  # answered by the teardown's closing flush
    assert isinstance(ended, TurnEnded) and ended.reason == Aborted(cause="disposed")
    stored = on_disk(world.data_dir, handle.agent)
    assert [r["seq"] for r in stored if r["type"] == "turn/end"] == [ended.end_seq]


async def test_a_turn_that_could_not_be_stored_raises_one_not_stored_error(
    world: World,
) -> None:
    agent = await new_agent(world)
    world.model.queue(say("unsaved"))
    handle = agent.followup(UserMessage.text("question"))
    ended = await handle.ended()
    failing = HeldFlush(agent.session, fail=OSError(errno.ENOSPC, "No space left on device"))
    world.ctx.on(SESSION_FLUSH, failing)
    with pytest.raises(NotStoredError) as raised:
        await handle.durable()
    assert str(raised.value) == (
        f"session {agent.id}: the turn could not be stored: No space left on device"
    )
    assert isinstance(raised.value.cause, OSError) and raised.value.cause.errno == errno.ENOSPC
    assert isinstance(ended, TurnEnded) and ended.answer == "unsaved"


async def test_a_turn_whose_closing_flush_failed_in_the_teardown_is_not_durable(
    world: World,
) -> None:
    handle = await world.get("agents").create(cwd="/w")
    first, _release = await held_turn(world, handle.agent)
    failing = HeldFlush(handle.agent.session, fail=OSError(errno.EACCES, "Permission denied"))
    world.ctx.on(SESSION_FLUSH, failing)
    with pytest.raises(AgentError, match="its closing events could not be written"):
        await handle.dispose()
    ended = await first.ended()
    assert isinstance(ended, TurnEnded) and ended.reason == Aborted(cause="disposed")
    # After the teardown, durable() answers from the closing flush: it failed.
    with pytest.raises(NotStoredError, match="the turn could not be stored: Permission denied"):
        await first.durable()
