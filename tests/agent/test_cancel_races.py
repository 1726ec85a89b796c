"""The agent contracts under adversarial timing: late input, stray cancellations, observers.

Each test pins one contract that a cancel or a teardown racing with hooks,
tools and listeners used to break.
"""

import asyncio
from pathlib import Path

import pytest

from tests.agent.support import assert_balanced, last_reason, prompts, turn_ends
from tests.agent.world import World, build_world, calls, fails, say
from tether.agent import Agent, AgentHandle, AgentStatus, CancelCause, UserMessage
from tether.agent.events import (
    AGENT_CREATED,
    AGENT_DISPOSED,
    AGENT_ERROR,
    AGENT_STATUS,
    CANCEL_REQUESTED,
)
from tether.loop.hooks import PRE_STEP, REQUEST_ERROR, TURN_STOP
from tether.runtime import Context
from tether.session import Blocked, Session
from tether.session.store import SESSION_DISPOSED, SESSION_FLUSH
from tether.tools.execute import BEFORE_EXECUTE

AGENT_PROTOCOL = {name for name in dir(Agent) if not name.startswith("_")}


class HeldHook:
    """An async listener that holds its dispatch open until released."""

    def __init__(self, result: object = None) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.result = result

    async def turn_stop(self, agent: Agent, turn: int, step: int) -> object:
        self.entered.set()
        await self.release.wait()
        return self.result


def _cancelled_result() -> None:
    """Raise a stray CancelledError, as ``.result()`` of a cancelled future does."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.cancel()
    future.result()


def _user_messages_after(session: Session, seq: int) -> list[str]:
    return [
        block["text"]
        for event in session.events[seq:]
        if event.type == "user/message"
        for block in event.data["content"]  # type: ignore[attr-defined]
    ]


@pytest.mark.parametrize("late", ["steer", "followup"])
async def test_input_sent_after_cancel_during_a_turn_stop_hook_runs_as_its_own_turn(
    world: World, late: str
) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    hook = HeldHook()
    world.ctx.on(TURN_STOP, hook.turn_stop)
    world.model.queue(calls(("c1", "echo", '{"text": "x"}')), say("late answer"))
    agent.followup(UserMessage.text("A"))
    await hook.entered.wait()
    agent.cancel()
    getattr(agent, late)(UserMessage.text("late"))
    hook.release.set()
    await agent.when_idle()
    assert prompts(agent.session) == ["A", "late"]
    assert [r["kind"] for r in turn_ends(agent.session)] == ["aborted", "completed"]
    assert_balanced(agent.session)


async def test_a_cancelled_turn_closes_aborted_whatever_a_turn_stop_hook_says(
    world: World,
) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    hook = HeldHook(result=Blocked())
    world.ctx.on(TURN_STOP, hook.turn_stop)
    world.model.queue(calls(("c1", "echo", '{"text": "x"}')))
    agent.followup(UserMessage.text("go"))
    await hook.entered.wait()
    agent.cancel(CancelCause.PARENT)
    hook.release.set()
    await agent.when_idle()
    assert last_reason(agent.session) == {"kind": "aborted", "cause": "parent"}


async def test_a_cancelled_turn_closes_aborted_even_at_its_step_limit(tmp_path: Path) -> None:
    world = await build_world(tmp_path, loop_config={"max_steps": 1})
    try:
        agent = (await world.get("agents").create(cwd="/w")).agent
        hook = HeldHook()
        world.ctx.on(TURN_STOP, hook.turn_stop)
        world.model.queue(calls(("c1", "echo", '{"text": "x"}')))
        agent.followup(UserMessage.text("go"))
        await hook.entered.wait()
        agent.cancel()
        hook.release.set()
        await agent.when_idle()
        assert last_reason(agent.session) == {"kind": "aborted", "cause": "user"}
    finally:
        await world.runtime.dispose()


async def test_a_turn_cancelled_during_a_request_error_hook_closes_aborted(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    entered, release = asyncio.Event(), asyncio.Event()

    async def give_up_slowly(error, next_, a):  # type: ignore[no-untyped-def]
        entered.set()
        await release.wait()
        return await next_(error)

    world.ctx.on(REQUEST_ERROR, give_up_slowly)
    world.model.queue(fails("529 overloaded"))
    agent.followup(UserMessage.text("go"))
    await entered.wait()
    agent.cancel()
    release.set()
    await agent.when_idle()
    assert last_reason(agent.session) == {"kind": "aborted", "cause": "user"}
    assert_balanced(agent.session)


def _public(obj: object) -> set[str]:
    return {name for name in dir(obj) if not name.startswith("_")}


async def test_observers_receive_only_the_agent_protocol(world: World) -> None:
    seen: dict[str, object] = {}
    world.ctx.on(AGENT_CREATED, lambda a: seen.setdefault("agent/created", a))
    world.ctx.on(AGENT_STATUS, lambda a, status: seen.setdefault("agent/status", a))

    async def pre_step(messages, next_, a, step):  # type: ignore[no-untyped-def]
        seen.setdefault("agent/pre-step", a)
        return await next_(messages)

    world.ctx.on(PRE_STEP, pre_step)
    world.ctx.on(TURN_STOP, lambda a, turn, step: seen.setdefault("agent/turn-stop", a))

    async def capture_tool_agent(invocation, next_):  # type: ignore[no-untyped-def]
        seen.setdefault("tool exec", invocation.exec.agent)
        return await next_(invocation)

    world.ctx.on(BEFORE_EXECUTE, capture_tool_agent)
    handle = await world.get("agents").create(cwd="/w")
    world.model.queue(calls(("c1", "echo", '{"text": "x"}')), say("ok"))
    handle.agent.followup(UserMessage.text("go"))
    await handle.agent.when_idle()
    seen["get"] = world.get("agents").get(handle.agent.id)
    seen["list"] = world.get("agents").list()[0]
    seen["handle.agent"] = handle.agent
    assert set(seen) == {
        "agent/created",
        "agent/status",
        "agent/pre-step",
        "agent/turn-stop",
        "tool exec",
        "get",
        "list",
        "handle.agent",
    }
    forbidden = {"stop", "abort", "interrupt", "dispose", "start", "begin_turn", "end_turn"}
    forbidden |= {"take_steer_wake", "inbox", "history", "options", "stop_error"}
    for where, agent in seen.items():
        assert agent is handle.agent, where  # one object, whoever asks
        assert _public(agent) == AGENT_PROTOCOL, where
        assert not _public(agent) & forbidden, where


async def test_a_stray_cancelled_error_from_a_pre_step_hook_fails_the_turn_not_the_agent(
    world: World,
) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    raised: list[int] = []

    async def stray(messages, next_, a, step):  # type: ignore[no-untyped-def]
        if not raised:
            raised.append(step)
            _cancelled_result()
        return await next_(messages)

    world.ctx.on(PRE_STEP, stray)
    world.model.queue(say("the next prompt runs"))
    agent.followup(UserMessage.text("one"))
    await asyncio.wait_for(agent.when_idle(), timeout=5)
    agent.followup(UserMessage.text("two"))
    await asyncio.wait_for(agent.when_idle(), timeout=5)
    reasons = turn_ends(agent.session)
    assert reasons[0]["kind"] == "error" and "CancelledError" in reasons[0]["error"]
    assert reasons[1] == {"kind": "completed"}
    assert_balanced(agent.session)


async def test_a_stray_cancelled_error_from_a_tool_is_an_error_result(world: World) -> None:
    from tests.agent.world import EchoArgs
    from tether.tools import Tool, ToolExec

    async def stray(args: EchoArgs, exec: ToolExec) -> str:
        raise asyncio.CancelledError

    await world.get("tools").register(Tool("stray", "Raises.", EchoArgs, stray))
    agent = (await world.get("agents").create(cwd="/w")).agent
    world.model.queue(calls(("c1", "stray", '{"text": "x"}')), say("carried on"))
    agent.followup(UserMessage.text("go"))
    await asyncio.wait_for(agent.when_idle(), timeout=5)
    result = next(e.data for e in agent.session.events if e.type == "tool/result")
    assert result["is_error"] is True
    assert "CancelledError" in str(result["content"])
    assert last_reason(agent.session) == {"kind": "completed"}


async def test_teardown_listeners_raising_base_exceptions_cannot_skip_later_steps(
    world: World,
) -> None:
    handle = await world.get("agents").create(cwd="/w")
    later: list[str] = []
    world.ctx.on(AGENT_DISPOSED, lambda a: _cancelled_result())
    world.ctx.on(SESSION_DISPOSED, lambda s: later.append("session/disposed"))
    world.ctx.on(SESSION_DISPOSED, lambda s: _cancelled_result())
    await handle.agent.ctx.effect(lambda: _cancelled_result)
    await handle.agent.ctx.effect(lambda: lambda: later.append("scope"))
    await handle.dispose()
    assert later == ["session/disposed", "scope"]
    assert world.get("agents").get(handle.agent.id) is None
    assert world.get("sessions").get(handle.agent.id) is None


async def test_a_caller_cancelled_while_awaiting_dispose_does_not_stop_the_teardown(
    world: World,
) -> None:
    handle = await world.get("agents").create(cwd="/w")
    reached, release = world.gates.get("stubborn")
    world.model.queue(calls(("c1", "wait", '{"key": "stubborn"}')))
    handle.agent.followup(UserMessage.text("go"))
    await reached.wait()
    # The wait tool notices the cancel; hold the teardown in a scoped disposer instead.
    held = asyncio.Event()

    async def slow_unwind() -> None:
        held.set()
        await release.wait()

    await handle.agent.ctx.effect(lambda: slow_unwind)
    first = asyncio.ensure_future(handle.dispose())
    await held.wait()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    release.set()
    await handle.dispose()  # a later awaiter: the same, finished, teardown
    assert world.get("agents").get(handle.agent.id) is None
    assert world.get("sessions").get(handle.agent.id) is None


async def test_every_dispose_awaiter_returns_only_after_the_whole_teardown(world: World) -> None:
    holder: list[AgentHandle] = []

    async def owner(ctx: Context, config: None) -> None:
        holder.append(await ctx.agents.create(cwd="/w"))

    owner.inject = ("agents",)  # type: ignore[attr-defined]
    fiber = await world.ctx.plugin(owner)
    handle = holder[0]
    held, release = asyncio.Event(), asyncio.Event()
    unwound: list[str] = []

    async def slow_unwind() -> None:
        held.set()
        await release.wait()
        unwound.append("scope")

    await handle.agent.ctx.effect(lambda: slow_unwind)
    seen_at_return: list[tuple[str, list[str]]] = []

    async def await_(name: str, awaitable: object) -> None:
        await awaitable  # type: ignore[misc]
        seen_at_return.append((name, list(unwound)))

    awaiters = [asyncio.ensure_future(await_("first", handle.dispose()))]
    await held.wait()
    awaiters += [
        asyncio.ensure_future(await_("second", handle.dispose())),
        asyncio.ensure_future(await_("third", handle.dispose())),
        asyncio.ensure_future(await_("owner unload", fiber.dispose())),
    ]
    for _ in range(20):
        await asyncio.sleep(0)
    assert seen_at_return == []
    release.set()
    await asyncio.gather(*awaiters)
    assert sorted(seen_at_return) == sorted(
        (name, ["scope"]) for name in ("first", "second", "third", "owner unload")
    )


async def test_a_cancel_from_a_cancel_requested_listener_is_absorbed(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    heard: list[CancelCause] = []

    def group_cancel(a: Agent, cause: CancelCause) -> None:
        heard.append(cause)
        a.cancel()  # as a group cancel does: it reaches this agent again

    agent.ctx.on(CANCEL_REQUESTED, group_cancel)
    agent.followup(UserMessage.text("queued"))
    agent.cancel(CancelCause.PARENT)
    assert heard == [CancelCause.PARENT]
    await agent.when_idle()
    world.model.queue(say("after"))
    agent.followup(UserMessage.text("next"))
    await agent.when_idle()
    assert prompts(agent.session) == ["next"]
    assert heard == [CancelCause.PARENT]


@pytest.mark.parametrize(
    ("cause", "error"),
    [("bogus", TypeError), ("user", TypeError), (CancelCause.DISPOSED, ValueError), (3, TypeError)],
)
async def test_cancel_accepts_only_a_callers_cause(
    world: World, cause: object, error: type[Exception]
) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    heard: list[object] = []
    agent.ctx.on(CANCEL_REQUESTED, lambda a, c: heard.append(c))
    agent.followup(UserMessage.text("queued"))
    world.model.queue(say("ran"))
    with pytest.raises(error, match=r"CancelCause\.USER, PARENT or HANDOFF"):
        agent.cancel(cause)  # type: ignore[arg-type]
    await agent.when_idle()
    assert heard == []
    assert prompts(agent.session) == ["queued"]


async def test_input_after_the_last_cancel_is_never_claimed_by_the_cancelled_turn(
    world: World,
) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    hook = HeldHook()
    world.ctx.on(TURN_STOP, hook.turn_stop)
    world.model.queue(calls(("c1", "echo", '{"text": "x"}')), say("late ran"))
    agent.followup(UserMessage.text("A"))
    await hook.entered.wait()
    agent.cancel()
    at_cancel = len(agent.session.events)
    agent.inject(UserMessage.text("context"))
    agent.steer(UserMessage.text("late"))
    hook.release.set()
    await agent.when_idle()
    first_end = next(
        e.seq for e in agent.session.events if e.type == "turn/end" and e.seq >= at_cancel
    )
    assert _user_messages_after(agent.session, at_cancel)[:2] == ["context", "late"]
    assert all(e.type != "user/message" for e in agent.session.events[at_cancel:first_end])


@pytest.mark.parametrize("at", ["turn/start", "turn/end", "agent/inbox/spliced"])
async def test_a_session_observer_raising_cancelled_error_cannot_stop_the_driver(
    world: World, at: str
) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    fired: list[str] = []

    def observer(session: Session, event: object) -> None:
        if getattr(event, "type", None) == at and not fired:
            fired.append(at)
            _cancelled_result()

    agent.session.observe(observer)
    world.model.queue(say("one"), say("two"))
    agent.followup(UserMessage.text("one"))
    await asyncio.wait_for(agent.when_idle(), timeout=5)
    agent.followup(UserMessage.text("two"))
    await asyncio.wait_for(agent.when_idle(), timeout=5)
    assert fired == [at]
    assert prompts(agent.session) == ["one", "two"]
    assert [r["kind"] for r in turn_ends(agent.session)] == ["completed", "completed"]
    assert_balanced(agent.session)


async def test_a_cancel_from_an_agent_error_listener_does_not_rewrite_the_closed_turn(
    world: World,
) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    ends_when_heard: list[str] = []

    def supervise(a: Agent, error: str) -> None:
        ends_when_heard.append(a.session.events[-1].type)
        a.cancel(CancelCause.PARENT)

    agent.ctx.on(AGENT_ERROR, supervise)
    world.model.queue(fails("boom"))
    agent.followup(UserMessage.text("go"))
    await agent.when_idle()
    assert ends_when_heard == ["turn/end"]  # agent/error comes after the turn closed
    assert last_reason(agent.session) == {"kind": "error", "error": "boom", "code": "server"}


async def test_input_sent_after_a_cancel_from_a_status_listener_runs_as_its_own_turn(
    world: World,
) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    done: list[bool] = []

    def on_status(a: Agent, status: AgentStatus) -> None:
        if status is AgentStatus.RUNNING and not done:
            done.append(True)
            a.cancel()
            a.followup(UserMessage.text("late"))

    agent.ctx.on(AGENT_STATUS, on_status)
    world.model.queue(say("late ran"))
    agent.followup(UserMessage.text("first"))
    await agent.when_idle()
    assert prompts(agent.session) == ["late"]
    assert [r["kind"] for r in turn_ends(agent.session)] == ["aborted", "completed"]


class Fatal(BaseException):
    """A failure no layer may contain."""


async def test_dispose_stops_the_driver_even_when_clearing_the_inbox_raises(
    world: World,
) -> None:
    handle = await world.get("agents").create(cwd="/w")
    agent = handle.agent
    reached, _release = world.gates.get("g")
    world.model.queue(calls(("c1", "wait", '{"key": "g"}')))
    agent.followup(UserMessage.text("go"))
    await reached.wait()
    agent.followup(UserMessage.text("queued"))

    def observer(session: Session, event: object) -> None:
        data = getattr(event, "data", {})
        if getattr(event, "type", None) == "agent/inbox/spliced" and data.get("op") == "cancel":
            raise Fatal  # not an Exception: observers do not contain it, it escapes the append

    agent.session.observe(observer)
    with pytest.raises(Fatal):
        await handle.dispose()
    with pytest.raises(Fatal):  # a later awaiter: the same outcome, nothing run twice
        await handle.dispose()
    drivers = [t for t in asyncio.all_tasks() if t.get_name() == f"agent:{agent.id}"]
    assert all(task.done() for task in drivers)
    assert agent.status is AgentStatus.IDLE
    assert last_reason(agent.session) == {"kind": "aborted", "cause": "disposed"}
    assert world.get("agents").get(agent.id) is None


async def test_a_closing_flush_that_raises_cancelled_error_is_reported_by_dispose(
    world: World,
) -> None:
    from tether.agent import AgentError

    handle = await world.get("agents").create(cwd="/w")

    async def bad_flush(session: Session) -> None:
        await asyncio.sleep(0)
        _cancelled_result()

    world.ctx.on(SESSION_FLUSH, bad_flush)
    with pytest.raises(AgentError, match="closing events could not be written"):
        await handle.dispose()
    assert world.get("sessions").get(handle.agent.id) is None


async def test_a_stray_cancelled_error_from_a_before_execute_listener_fails_only_that_call(
    world: World,
) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent

    async def before(invocation, next_):  # type: ignore[no-untyped-def]
        if invocation.tool_name == "echo":
            _cancelled_result()
        return await next_(invocation)

    world.ctx.on(BEFORE_EXECUTE, before)
    world.model.queue(calls(("c1", "echo", '{"text": "x"}')), say("carried on"))
    agent.followup(UserMessage.text("go"))
    await asyncio.wait_for(agent.when_idle(), timeout=5)
    result = next(e.data for e in agent.session.events if e.type == "tool/result")
    assert result["is_error"] is True
    assert last_reason(agent.session) == {"kind": "completed"}


async def test_an_agent_whose_driver_was_cancelled_refuses_input_instead_of_hanging(
    world: World,
) -> None:
    from tether.agent import AgentDisposedError

    agent = (await world.get("agents").create(cwd="/w")).agent
    reached, _release = world.gates.get("g")
    world.model.queue(calls(("c1", "wait", '{"key": "g"}')))
    agent.followup(UserMessage.text("go"))
    await reached.wait()
    [driver] = [t for t in asyncio.all_tasks() if t.get_name() == f"agent:{agent.id}"]
    driver.cancel()
    await asyncio.wait({driver})
    assert last_reason(agent.session) == {"kind": "aborted", "cause": "task-cancelled"}
    with pytest.raises(AgentDisposedError):
        agent.followup(UserMessage.text("next"))
    await asyncio.wait_for(agent.when_idle(), timeout=5)


async def test_a_cancel_during_the_retry_wait_keeps_the_abandoned_attempt_from_the_model(
    world: World,
) -> None:
    from tether.llm.chunks import Finish, TextDelta
    from tether.session import derive_messages

    agent = (await world.get("agents").create(cwd="/w")).agent
    waiting = asyncio.Event()

    async def half_then_fail(request, signal):  # type: ignore[no-untyped-def]
        yield TextDelta("Hello")
        yield Finish("error", error="529 overloaded", error_code="overloaded")

    async def retry_later(error, next_, a):  # type: ignore[no-untyped-def]
        from msgspec.structs import replace

        waiting.set()
        return replace(await next_(error), retry=True, delay=30.0)

    world.ctx.on(REQUEST_ERROR, retry_later)
    world.model.queue(half_then_fail)
    agent.followup(UserMessage.text("go"))
    await waiting.wait()
    for _ in range(5):
        await asyncio.sleep(0)  # into the wait after the attempt's boundary
    agent.cancel()
    await asyncio.wait_for(agent.when_idle(), timeout=5)
    types = [e.type for e in agent.session.events]
    assert "llm/retry" in types and "assistant/message" not in types
    # The note of the environment and the prompt: nothing of the abandoned attempt.
    assert [type(m).__name__ for m in derive_messages(agent.session)] == ["UserRoleMessage"] * 2
    assert last_reason(agent.session) == {"kind": "aborted", "cause": "user"}
