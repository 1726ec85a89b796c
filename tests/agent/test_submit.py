"""Durable delivery (``agent.submit``): a prompt runs only once it is stored, and one that
could not be stored never runs.

The session store's flush (the durability barrier) is controlled through a
``session/flush`` listener: it holds a flush until released, or fails one.
"""

from __future__ import annotations

import asyncio
import errno
from typing import NamedTuple

import pytest

from tests.agent.support import on_disk, prompts, turn_ends, types
from tests.agent.world import World, call, say
from tether.agent import Agent, AgentStatus, NotStoredError, Target, UserMessage
from tether.agent.events import AGENT_STATUS, CANCEL_REQUESTED
from tether.session import Session, replay_inbox
from tether.session.events import Event
from tether.session.store import SESSION_EVENT, SESSION_FLUSH


class HeldFlush:
    """A ``session/flush`` listener that holds the next flush of one session until
    :attr:`release` is set, or fails it with ``fail`` (once)."""

    def __init__(self, session: Session, *, fail: OSError | None = None) -> None:
        self.session = session
        self.fail = fail
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.armed = True

    async def __call__(self, session: Session) -> None:
        if session is not self.session or not self.armed:
            return
        self.armed = False
        self.entered.set()
        if self.fail is not None:
            raise self.fail
        await self.release.wait()


def splices(agent: Agent) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(queue, op, ids)`` of every inbox splice in the log."""
    found = []
    for event in agent.session.events:
        if event.type == "agent/inbox/spliced":
            ids = tuple(str(m["id"]) for m in event.data["messages"])  # type: ignore[index, union-attr]
            found.append((str(event.data["queue"]), str(event.data["op"]), ids))
    return found


async def running_turn(world: World, agent: Agent) -> asyncio.Event:
    """Start a turn held in a tool call; returns the event that lets it finish."""
    reached, release = world.gates.get("g")
    world.model.queue(call("wait", '{"key": "g"}'), say("first done"))
    agent.followup(UserMessage.text("first"))
    await reached.wait()
    return release


class HeldSubmission(NamedTuple):
    """A submission whose flush is held while the agent's first turn runs."""

    agent: Agent
    finish_first: asyncio.Event
    held: HeldFlush
    submitting: asyncio.Task[None]


async def submitted_during_a_turn(
    world: World, message: UserMessage, target: Target = Target.QUEUED
) -> HeldSubmission:
    """Start a turn held in a tool call, then submit ``message`` with its flush held
    (returns once that flush is entered)."""
    agent = (await world.get("agents").create(cwd="/w")).agent
    finish_first = await running_turn(world, agent)
    held = HeldFlush(agent.session)
    world.ctx.on(SESSION_FLUSH, held)
    submitting = asyncio.create_task(agent.submit(message, target))
    await held.entered.wait()
    return HeldSubmission(agent, finish_first, held, submitting)


def idle_heard(agent: Agent) -> asyncio.Event:
    """Set when ``agent`` reports ``idle`` (the driver then decides, before anything else
    runs, whether another turn starts: a start would report ``running`` at once)."""
    idle = asyncio.Event()

    def on_status(who: Agent, status: AgentStatus) -> None:
        if who is agent and status is AgentStatus.IDLE:
            idle.set()

    agent.ctx.on(AGENT_STATUS, on_status)
    return idle


async def test_a_submitted_prompt_whose_flush_fails_never_runs_and_is_withdrawn_in_the_log(
    world: World,
) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    failing = HeldFlush(agent.session, fail=OSError(errno.ENOSPC, "No space left on device"))
    world.ctx.on(SESSION_FLUSH, failing)
    refused = UserMessage.text("refused")
    with pytest.raises(NotStoredError) as raised:
        await agent.submit(refused)
    assert str(raised.value) == (
        f"session {agent.id}: the prompt could not be stored: No space left on device"
    )
    await agent.when_idle()
    # No turn was opened for it, the model never saw it, and the log withdraws it.
    assert "turn/start" not in types(agent.session) and world.model.requests == []
    assert splices(agent) == [
        ("queued", "insert", (refused.id,)),
        ("queued", "discard", (refused.id,)),
    ]
    assert replay_inbox(agent.session.events) == ((), ())
    # What a resume reads from disk agrees: nothing pending.
    await world.get("sessions").flush(agent.session)
    stored = [r for r in on_disk(world.data_dir, agent) if r["type"] == "agent/inbox/spliced"]
    assert [r["data"]["op"] for r in stored] == ["insert", "discard"]
    # The agent takes the next prompt as usual.
    world.model.queue(say("ok"))
    await agent.submit(UserMessage.text("accepted"))
    await agent.when_idle()
    assert prompts(agent.session) == ["accepted"]
    assert turn_ends(agent.session) == [{"kind": "completed"}]


async def test_a_submitted_prompt_is_not_claimed_before_it_is_durable(world: World) -> None:
    submitted = UserMessage.text("submitted")
    agent, finish_first, held, submitting = await submitted_during_a_turn(world, submitted)
    idle = idle_heard(agent)
    finish_first.set()
    await idle.wait()
    # The first turn ended while the prompt was still being stored: no turn took it.
    assert agent.status is AgentStatus.IDLE and not submitting.done()
    assert types(agent.session).count("turn/start") == 1
    assert ("queued", "claim", (submitted.id,)) not in splices(agent)
    world.model.queue(say("second done"))
    held.release.set()
    await submitting
    await agent.when_idle()
    assert prompts(agent.session) == ["first", "submitted"]
    assert turn_ends(agent.session) == [{"kind": "completed"}] * 2


async def test_a_steer_submitted_during_a_turn_joins_it_once_durable_never_before(
    world: World,
) -> None:
    agent, finish_first, held, submitting = await submitted_during_a_turn(
        world, UserMessage.text("steer"), Target.STEERING
    )
    second_step_ended = asyncio.Event()

    def on_event(session: Session, event: Event) -> None:
        if session is agent.session and event.type == "step/end" and event.data["step"] == 2:
            second_step_ended.set()

    world.ctx.on(SESSION_EVENT, on_event)
    world.model.queue(say("steered"))
    finish_first.set()
    await second_step_ended.wait()
    # The second step ran without it; the turn waits for its verdict instead of ending.
    assert prompts(agent.session) == ["first"]
    assert agent.status is AgentStatus.RUNNING
    assert types(agent.session).count("turn/end") == 0
    held.release.set()
    await submitting
    await agent.when_idle()
    # Stored now: the running turn took it at its next step, as a steer.
    assert prompts(agent.session) == ["first", "steer"]
    assert types(agent.session).count("turn/start") == 1
    assert turn_ends(agent.session) == [{"kind": "completed"}]


async def test_input_sent_behind_a_submitted_prompt_waits_for_it_fifo_order_kept(
    world: World,
) -> None:
    agent, finish_first, held, submitting = await submitted_during_a_turn(
        world, UserMessage.text("submitted")
    )
    agent.followup(UserMessage.text("sent after"))
    idle = idle_heard(agent)
    finish_first.set()
    await idle.wait()
    # The later prompt is claimable, but it waits behind the one being stored.
    assert agent.status is AgentStatus.IDLE
    assert types(agent.session).count("turn/start") == 1
    world.model.queue(say("second"), say("third"))
    held.release.set()
    await submitting
    await agent.when_idle()
    assert prompts(agent.session) == ["first", "submitted", "sent after"]
    assert turn_ends(agent.session) == [{"kind": "completed"}] * 3


async def test_a_refused_submission_lets_what_was_sent_behind_it_run(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    failing = HeldFlush(agent.session, fail=OSError(errno.EIO, "Input/output error"))
    world.ctx.on(SESSION_FLUSH, failing)
    world.model.queue(say("ok"))
    submitting = asyncio.create_task(agent.submit(UserMessage.text("refused")))
    await failing.entered.wait()
    agent.followup(UserMessage.text("sent after"))
    with pytest.raises(NotStoredError, match="Input/output error"):
        await submitting
    await agent.when_idle()
    assert prompts(agent.session) == ["sent after"]
    assert turn_ends(agent.session) == [{"kind": "completed"}]


async def test_cancel_clears_a_submission_still_being_stored_and_it_never_runs(
    world: World,
) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    causes: list[object] = []
    agent.ctx.on(CANCEL_REQUESTED, lambda who, cause: causes.append(cause))
    held = HeldFlush(agent.session)
    world.ctx.on(SESSION_FLUSH, held)
    submitted = UserMessage.text("cancelled before it ran")
    submitting = asyncio.create_task(agent.submit(submitted))
    await held.entered.wait()
    agent.cancel()
    assert causes == ["user"]  # pending, so the cancel was effective
    held.release.set()
    await submitting  # stored, then cleared by the cancel
    await agent.when_idle()
    assert "turn/start" not in types(agent.session) and world.model.requests == []
    assert splices(agent) == [
        ("queued", "insert", (submitted.id,)),
        ("queued", "cancel", (submitted.id,)),
    ]
