"""The loop: steps, tools, model errors and their hooks (point 7)."""

from collections.abc import AsyncIterator

from tests.agent.support import assert_balanced, last_reason, prompts, turn_ends, types
from tests.agent.world import World, calls, fails, say
from tether.agent import Agent, UserMessage
from tether.agent.events import AGENT_ERROR
from tether.llm.chunks import Finish, StreamChunk, TextDelta, ToolCallDelta
from tether.llm.request import ModelRequest
from tether.loop.hooks import REQUEST, REQUEST_ERROR, TURN_STOP
from tether.runtime import CancelSignal


async def test_a_turn_runs_steps_until_no_tool_owes_a_reply(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    world.model.queue(calls(("c1", "echo", '{"text": "pong"}')), say("done"))
    agent.followup(UserMessage.text("ping"))
    await agent.when_idle()
    assert types(agent.session) == [
        "agent/inbox/spliced",
        "turn/start",
        "agent/inbox/spliced",
        "step/start",
        "context/environment",
        "user/message",
        "assistant/message",
        "tool/call",
        "tool/result",
        "step/end",
        "step/start",
        "assistant/chunk",
        "assistant/chunk",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    log = types(agent.session)
    assert log.count("step/start") == 2
    # The model's second request was rebuilt from the log and holds the tool result.
    second = world.model.requests[1]
    assert second.messages[-1].content == "pong"  # type: ignore[union-attr]
    assert_balanced(agent.session)


async def test_tool_results_are_committed_in_the_models_order(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    world.model.queue(
        calls(
            ("a", "echo", '{"text": "1"}'),
            ("b", "echo", '{"text": "2"}'),
            ("c", "wait", '{"key": "k"}'),
            ("d", "echo", '{"text": "3"}'),
        ),
        say("ok"),
    )
    world.gates.get("k")[1].set()
    agent.followup(UserMessage.text("go"))
    await agent.when_idle()
    order = [e.data["id"] for e in agent.session.events if e.type == "tool/result"]
    assert order == ["a", "b", "c", "d"]


async def test_unknown_tools_and_bad_arguments_become_error_results(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    world.model.queue(
        calls(
            ("u", "no_such_tool", "{}"),
            ("v", "echo", '{"wrong": 1}'),
            ("j", "echo", '{"text": '),
        ),
        say("recovered"),
    )
    agent.followup(UserMessage.text("go"))
    await agent.when_idle()
    results = {e.data["id"]: e.data for e in agent.session.events if e.type == "tool/result"}
    assert all(r["is_error"] for r in results.values())
    assert "unknown tool" in str(results["u"]["content"])
    assert "text" in str(results["v"]["content"])
    assert "invalid arguments" in str(results["j"]["content"])
    assert last_reason(agent.session) == {"kind": "completed"}


async def test_model_error_ends_the_turn_and_the_next_prompt_works(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    errors: list[str] = []
    agent.ctx.on(AGENT_ERROR, lambda a, error: errors.append(error))
    world.model.queue(fails("upstream exploded"), say("fine now"))
    agent.followup(UserMessage.text("one"))
    agent.followup(UserMessage.text("two"))
    await agent.when_idle()
    assert turn_ends(agent.session) == [
        {"kind": "error", "error": "upstream exploded", "code": "server"},
        {"kind": "completed"},
    ]
    assert errors == ["upstream exploded"]
    assert_balanced(agent.session)


async def test_request_error_waterfall_may_retry(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    attempts: list[int] = []

    async def retry_once(error, next_, a: Agent):  # type: ignore[no-untyped-def]
        attempts.append(error.attempt)
        decision = await next_(error)
        from msgspec.structs import replace

        return replace(decision, retry=error.attempt < 2)

    world.ctx.on(REQUEST_ERROR, retry_once)
    world.model.queue(fails("flaky"), say("second try worked"))
    agent.followup(UserMessage.text("go"))
    await agent.when_idle()
    assert attempts == [1]
    assert last_reason(agent.session) == {"kind": "completed"}
    assert len(world.model.requests) == 2


async def test_request_waterfall_adjusts_the_model_request(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent

    async def add_system(request, next_, a):  # type: ignore[no-untyped-def]
        from msgspec.structs import replace

        return await next_(replace(request, system="be brief"))

    world.ctx.on(REQUEST, add_system)
    world.model.queue(say("ok"))
    agent.followup(UserMessage.text("go"))
    await agent.when_idle()
    assert world.model.requests[0].system == "be brief"


async def test_turn_stop_hook_ends_a_turn_early(world: World) -> None:
    from tether.session import Blocked

    agent = (await world.get("agents").create(cwd="/w")).agent
    world.ctx.on(TURN_STOP, lambda a, turn, step: Blocked())
    world.model.queue(calls(("c1", "echo", '{"text": "x"}')))
    agent.followup(UserMessage.text("go"))
    await agent.when_idle()
    assert last_reason(agent.session) == {"kind": "blocked"}
    assert_balanced(agent.session)


async def test_the_step_limit_ends_a_runaway_turn(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.agent.world import build_world

    world = await build_world(tmp_path, loop_config={"max_steps": 2})
    try:
        agent = (await world.get("agents").create(cwd="/w")).agent
        world.model.queue(*(calls((f"c{i}", "echo", '{"text": "again"}')) for i in range(3)))
        agent.followup(UserMessage.text("loop forever"))
        await agent.when_idle()
        assert last_reason(agent.session)["kind"] == "error"
        assert "limit of 2 steps" in last_reason(agent.session)["error"]
    finally:
        await world.runtime.dispose()


async def test_incremental_history_equals_deriving_from_the_whole_log(world: World) -> None:
    from tether.session import derive_messages

    agent = (await world.get("agents").create(cwd="/w")).agent
    world.model.queue(say("one"), calls(("c1", "echo", '{"text": "x"}')), say("two"), say("three"))
    for text in ("a", "b", "c"):
        agent.followup(UserMessage.text(text))
    await agent.when_idle()
    whole = derive_messages(agent.session)
    # Every request carried exactly the history derived from the log so far:
    # the whole log's messages, up to the answer that request received.
    # The first message is the note of the environment's changing facts.
    assert [len(r.messages) for r in world.model.requests] == [2, 4, 6, 8]
    for request in world.model.requests:
        assert list(request.messages) == whole[: len(request.messages)]
    assert len(whole) == 9


async def test_steering_left_when_a_turn_stops_early_is_not_lost(world: World) -> None:
    from tether.session import Blocked, replay_inbox

    agent = (await world.get("agents").create(cwd="/w")).agent
    reached, _release = world.gates.get("g")
    world.ctx.on(TURN_STOP, lambda a, turn, step: Blocked())
    world.model.queue(calls(("c1", "wait", '{"key": "g"}')), say("answering the steer"))
    agent.followup(UserMessage.text("go"))
    await reached.wait()
    agent.steer(UserMessage.text("late steer"))
    world.gates.get("g")[1].set()
    await agent.when_idle()
    # The first turn stopped before another step, so the steer was never
    # claimed by it; it stayed pending and, being a steer, started a turn.
    assert [r["kind"] for r in turn_ends(agent.session)] == ["blocked", "completed"]
    assert prompts(agent.session) == ["go", "late steer"]
    assert not replay_inbox(agent.session.events).steering


async def test_a_provider_refusal_blocks_the_turn_and_its_tool_calls_never_run(
    world: World,
) -> None:
    async def refused(request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamChunk]:
        yield TextDelta("let me")
        yield ToolCallDelta(index=0, id="c1", name="echo", args_delta='{"text": "ran"}')
        yield Finish("refusal")

    agent = (await world.get("agents").create(cwd="/w")).agent
    world.model.queue(refused, say("fine now"))
    agent.followup(UserMessage.text("one"))
    agent.followup(UserMessage.text("two"))
    await agent.when_idle()
    assert world.executed == []
    results = [e.data for e in agent.session.events if e.type == "tool/result"]
    assert len(results) == 1 and results[0]["is_error"]
    assert "refused" in str(results[0]["content"])
    assert turn_ends(agent.session) == [{"kind": "blocked"}, {"kind": "completed"}]
    assert_balanced(agent.session)
