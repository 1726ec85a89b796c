"""Subagents owned by their parent: delegation, the cancel cascade with cause ``parent``,
disposal children first, background tasks behind the owner fence, limits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent.world import ScriptedModel, World, build_world, call, calls, say
from tests.plugins.test_tool_bash import call_as
from tether.agent import Agent, AgentHandle, CancelCause, UserMessage
from tether.agent.events import AGENT_CREATED, AGENT_DISPOSED, AGENT_SETUP
from tether.llm.chunks import Finish, StreamChunk, TextDelta
from tether.llm.request import ModelRequest
from tether.persist.backends import JsonlBackend
from tether.plugins.tool_subagent import parent_of
from tether.runtime import Context
from tether.runtime.compose import PluginRow
from tether.runtime.keys import Next
from tether.session.store import SESSION_EVENT
from tether.tools import ToolResult
from tether.tools.execute import AFTER_EXECUTE

ROW = PluginRow(id="tool_subagent", plugin="tether.plugins.tool_subagent")


KID_PROFILE = {"kid": {"model": "kid"}}


async def subagent_world(
    tmp_path: Path, *, shell: dict[str, Any] | None = None, **config: Any
) -> World:
    """A world with the subagent tools (``config``); with ``shell``, the bash tools too."""
    world = await build_world(tmp_path, shell=shell)
    # The ``kid`` profile's model: background children answer from a queue of
    # their own, so their requests never race the parent's for a script.
    kids = ScriptedModel()

    async def kid_model(ctx: Context, config: None) -> None:
        await ctx.llm.register("kid", kids)

    kid_model.inject = ("llm",)  # type: ignore[attr-defined]
    await world.ctx.plugin(kid_model)
    world.kids = kids  # type: ignore[attr-defined]
    config = {"profiles": {**KID_PROFILE, **config.pop("profiles", {})}, **config}
    # The composition as a whole: the shell rows, if any, stay.
    rows = [state.row for state in world.composer.rows()]
    rows.append(PluginRow(id=ROW.id, plugin=ROW.plugin, config=config))
    report = await world.composer.apply(rows)
    assert report.ok, report.problems
    return world


def kids(world: World) -> ScriptedModel:
    return world.kids  # type: ignore[attr-defined,no-any-return]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    built = await subagent_world(tmp_path)
    try:
        yield built
    finally:
        await built.runtime.dispose()


def task_call(prompt: str, *, call_id: str = "t1", **extra: object) -> Any:
    return call("task", json.dumps({"description": "a job", "prompt": prompt, **extra}), call_id)


def results(agent: Agent) -> list[dict[str, Any]]:
    return [dict(e.data) for e in agent.session.events if e.type == "tool/result"]


def reasons(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r["data"]["reason"] for r in records if r["type"] == "turn/end"]


def stored(world: World, session_id: str) -> list[dict[str, Any]]:
    log = JsonlBackend(world.data_dir).load(session_id)
    return [{"type": e.type, "data": e.data_object()} for e in log.events]


def header(world: World, session_id: str) -> dict[str, Any]:
    return dict(JsonlBackend(world.data_dir).load(session_id).header)


async def new_parent(world: World) -> AgentHandle:
    return await world.get("agents").create(cwd="/")


def children_of(world: World, parent: Agent) -> list[Agent]:
    return [a for a in world.get("agents").list() if a.session.header.delegator == parent.id]


async def child_reaching_gate(world: World, parent: Agent, key: str, **extra: object) -> Agent:
    """The parent delegates a task whose child waits on gate ``key``; returns the child."""
    world.model.queue(task_call("wait for it", **extra), call("wait", json.dumps({"key": key})))
    parent.followup(UserMessage.text("delegate"))
    reached, _release = world.gates.get(key)
    await asyncio.wait_for(reached.wait(), 10)
    [child] = children_of(world, parent)
    return child


async def background_child(world: World, parent: Agent, key: str) -> Agent:
    """The parent delegates a background task (``kid`` profile) whose child waits on
    gate ``key``; returns the child once the parent is idle again."""
    world.model.queue(
        task_call(f"wait on {key}", run_in_background=True, agent="kid"), say("started it")
    )
    kids(world).queue(call("wait", json.dumps({"key": key})))
    parent.followup(UserMessage.text("delegate"))
    reached, _release = world.gates.get(key)
    await asyncio.wait_for(reached.wait(), 10)
    await asyncio.wait_for(parent.when_idle(), 10)
    [child] = children_of(world, parent)
    return child


async def test_a_foreground_task_answers_with_the_childs_answer_and_records_its_lineage(
    world: World,
) -> None:
    parent = (await new_parent(world)).agent
    world.model.queue(task_call("say hello"), say("hello from the child"), say("parent done"))
    parent.followup(UserMessage.text("delegate"))
    await parent.when_idle()
    [result] = results(parent)
    assert result["is_error"] is False
    content = str(result["content"])
    assert content.startswith("hello from the child\n[task ") and content.endswith(": completed]")
    child_id = content.rsplit("[task ", 1)[1].split(":", maxsplit=1)[0]
    # Done with its work, the child is disposed; its log stays stored.
    assert children_of(world, parent) == [] and world.get("agents").get(child_id) is None
    stored_header = header(world, child_id)
    assert stored_header["lineage"] == {
        "parent": parent.id,
        "seed_length": 0,
        "delegation": {
            "call": "t1",
            "depth": 1,
            "task": "a job",
            "background": False,
            "tools": None,
        },
    }
    assert {"parent", "parent_call", "depth", "task", "background"}.isdisjoint(
        stored_header["meta"]
    )
    child_log = stored(world, child_id)
    assert reasons(child_log) == [{"kind": "completed"}]
    [prompt] = [r for r in child_log if r["type"] == "user/message"]
    assert prompt["data"]["source"] == "parent"
    assert prompt["data"]["content"] == [{"type": "text", "text": "say hello"}]


async def test_cancelling_the_parent_cancels_the_child_with_cause_parent_first(
    world: World,
) -> None:
    parent = (await new_parent(world)).agent
    child = await child_reaching_gate(world, parent, "held")
    on_disk_at_parent_end: list[list[dict[str, Any]]] = []

    def observe(session: object, event: Any) -> None:
        if event.type == "turn/end":
            on_disk_at_parent_end.append(reasons(stored(world, child.id)))

    parent.ctx.on(SESSION_EVENT, observe)
    parent.cancel()
    await asyncio.wait_for(parent.when_idle(), 10)
    await asyncio.wait_for(child.when_idle(), 10)
    # The child's turn/end was on disk before the parent's was appended.
    assert on_disk_at_parent_end == [[{"kind": "aborted", "cause": "parent"}]]
    assert parent.session.events[-1].data["reason"] == {"kind": "aborted", "cause": "user"}
    [receipt] = [e for e in parent.session.events if e.type == "tool/stopped"]
    [entry] = receipt.data["agents"]
    assert entry["id"] == child.id and entry["call_id"] == "t1"
    assert entry["ended"] == "aborted" and entry["cause"] == "parent"
    assert world.gates.saw_cancel == ["held"]
    # Nothing queued in either runs afterwards; both stay usable.
    assert children_of(world, parent) == []
    world.model.queue(say("after"))
    parent.followup(UserMessage.text("again"))
    await parent.when_idle()
    assert parent.session.events[-1].data["reason"] == {"kind": "completed"}


async def test_a_child_cancelled_on_its_own_leaves_its_parent_running(world: World) -> None:
    parent = (await new_parent(world)).agent
    child = await child_reaching_gate(world, parent, "alone")
    world.model.queue(say("the parent carries on"))
    child.cancel()  # from elsewhere (an editor, by its id)
    await asyncio.wait_for(parent.when_idle(), 10)
    [result] = results(parent)
    assert result["is_error"] is True
    assert f"task {child.id} did not complete: aborted (user)" in str(result["content"])
    assert parent.session.events[-1].data["reason"] == {"kind": "completed"}
    assert reasons(stored(world, child.id)) == [{"kind": "aborted", "cause": "user"}]


async def test_disposing_a_running_parent_disposes_its_children_first(world: World) -> None:
    handle = await new_parent(world)
    parent = handle.agent
    child = await child_reaching_gate(world, parent, "dispose")
    await asyncio.wait_for(handle.dispose(), 10)
    assert world.get("agents").list() == []
    assert world.get("sessions").get(child.id) is None
    assert reasons(stored(world, child.id)) == [{"kind": "aborted", "cause": "parent"}]
    parent_log = stored(world, parent.id)
    assert reasons(parent_log) == [{"kind": "aborted", "cause": "disposed"}]
    [receipt] = [r for r in parent_log if r["type"] == "tool/stopped"]
    assert [a["id"] for a in receipt["data"]["agents"]] == [child.id]


async def test_disposing_an_idle_parent_stops_its_background_children(world: World) -> None:
    handle = await new_parent(world)
    parent = handle.agent
    child = await background_child(world, parent, "bg")
    assert str(results(parent)[0]["content"]).startswith(f"started task {child.id}")

    await asyncio.wait_for(handle.dispose(), 10)

    assert world.get("agents").list() == []
    assert reasons(stored(world, child.id)) == [{"kind": "aborted", "cause": "parent"}]
    parent_log = stored(world, parent.id)
    [receipt] = [r for r in parent_log if r["type"] == "tool/stopped"]
    assert receipt["data"]["cause"] == "disposed" and receipt["data"]["turn"] == 1
    assert [a["id"] for a in receipt["data"]["agents"]] == [child.id]


async def test_a_cancel_that_wins_the_race_with_the_create_disposes_the_child(
    world: World,
) -> None:
    parent = (await new_parent(world)).agent
    created: list[Agent] = []

    def cancel_parent(agent: Agent) -> None:
        if agent.session.header.delegator == parent.id:
            created.append(agent)
            parent.cancel()

    world.ctx.on(AGENT_CREATED, cancel_parent)
    world.model.queue(task_call("never runs"))
    parent.followup(UserMessage.text("delegate"))
    await asyncio.wait_for(parent.when_idle(), 10)
    [child] = created
    assert world.get("agents").get(child.id) is None
    assert child.session.last_turn == 0  # the prompt was never delivered
    [result] = results(parent)
    assert result["content"] == "task not started: the turn was cancelled"
    assert parent.session.events[-1].data["reason"] == {"kind": "aborted", "cause": "user"}


async def test_a_background_task_tells_its_parent_and_only_its_parent_may_read_it(
    world: World,
) -> None:
    parent = (await new_parent(world)).agent
    other = (await new_parent(world)).agent
    child = await background_child(world, parent, "work")
    _reached, release = world.gates.get("work")
    delegation = child.session.header.delegation
    assert delegation is not None and delegation.background

    denied = await call_as(world, other, "task_output", task_id=child.id)
    missing = f"no task {child.id} in this session; a task id is what task answered when it "
    assert denied == (missing + "started a task", True)
    assert await call_as(world, other, "task_kill", task_id=child.id) == denied
    running = await call_as(world, parent, "task_output", task_id=child.id)
    assert running[0].startswith(f"[task {child.id} running]")

    kids(world).queue(say("the child is done"))
    world.model.queue(say("noted"))
    release.set()
    # The completion wakes the idle parent with a notice, as a follow-up.
    for _ in range(100):
        if parent.session.last_turn == 2:
            break
        await asyncio.sleep(0.02)
    await asyncio.wait_for(parent.when_idle(), 10)
    notices = [
        e.data
        for e in parent.session.events
        if e.type == "user/message" and e.data["source"] == "notice"
    ]
    assert len(notices) == 1
    assert (
        f"background task {child.id} (a job) finished: completed"
        in notices[0]["content"][0]["text"]
    )
    done = await call_as(world, parent, "task_output", task_id=child.id)
    assert done == (f"[task {child.id} done: completed]\nthe child is done", False)
    assert (await call_as(world, other, "task_output", task_id=child.id)) == denied


async def test_task_kill_stops_a_running_background_task(world: World) -> None:
    parent = (await new_parent(world)).agent
    child = await background_child(world, parent, "kill")

    killed = await call_as(world, parent, "task_kill", task_id=child.id)
    assert killed == (f"killed task {child.id}: its turn ended aborted (parent)", False)
    again = await call_as(world, parent, "task_kill", task_id=child.id)
    assert again[0] == f"task {child.id} had already finished (aborted (parent))"


async def test_limits_are_error_results_that_name_them(tmp_path: Path) -> None:
    world = await subagent_world(tmp_path, max_depth=1, max_agents=2)
    try:
        parent = (await new_parent(world)).agent
        # The child may not delegate further: depth 1 is the limit.
        world.model.queue(
            task_call("delegate again"),
            task_call("deeper", call_id="t2"),
            say("could not"),
            say("parent done"),
        )
        parent.followup(UserMessage.text("delegate"))
        await asyncio.wait_for(parent.when_idle(), 10)
        child_id = str(results(parent)[0]["content"]).rsplit("[task ", 1)[1].split(":")[0]
        [refused] = [r for r in stored(world, child_id) if r["type"] == "tool/result"]
        assert refused["data"]["is_error"] is True
        # Each refusal says what to do instead.
        assert refused["data"]["content"] == (
            "task refused: delegation is limited to 1 levels, and this agent is a child; "
            "do the work yourself with the other tools instead"
        )
        # Two agents are live: the limit of the process.
        await new_parent(world)
        world.model.queue(task_call("one more", call_id="t3"), say("ok"))
        parent.followup(UserMessage.text("again"))
        await asyncio.wait_for(parent.when_idle(), 10)
        assert results(parent)[-1]["content"] == (
            "task refused: 2 agents are live in this process (the limit); "
            "do the work yourself with the other tools instead"
        )
        world.model.queue(task_call("x", call_id="t4", agent="nobody"), say("ok"))
        parent.followup(UserMessage.text("a profile"))
        await asyncio.wait_for(parent.when_idle(), 10)
        assert "there is no agent profile 'nobody'" in str(results(parent)[-1]["content"])
        assert "or without agent for the default" in str(results(parent)[-1]["content"])
    finally:
        await world.runtime.dispose()


async def test_a_profile_narrows_the_tools_and_never_widens_them(tmp_path: Path) -> None:
    profiles = {"reader": {"tools": ["echo", "wait"], "system": "You only read."}}
    world = await subagent_world(tmp_path, profiles=profiles)
    try:
        from tether.agent import AgentOptions

        handle = await world.get("agents").create(
            cwd="/", options=AgentOptions(model="scripted", tools=("task", "echo"))
        )
        parent = handle.agent
        world.model.queue(task_call("read", agent="reader"), say("read it"), say("done"))
        parent.followup(UserMessage.text("delegate"))
        await asyncio.wait_for(parent.when_idle(), 10)
        child_request = world.model.requests[1]
        assert [tool.name for tool in child_request.tools] == [
            "echo"
        ]  # not wait: the parent lacks it
        assert child_request.system == "You only read."
        [child_id] = [r["content"] for r in results(parent)]
        child_id = str(child_id).rsplit("[task ", 1)[1].split(":", maxsplit=1)[0]
        assert header(world, child_id)["lineage"]["delegation"]["tools"] == ["echo"]
    finally:
        await world.runtime.dispose()


async def test_running_children_survive_a_reload_of_the_plugin_and_still_cascade(
    world: World,
) -> None:
    parent = (await new_parent(world)).agent
    child = await child_reaching_gate(world, parent, "reload")
    await world.composer.reload("tool_subagent")
    assert world.get("agents").get(child.id) is child
    parent.cancel(CancelCause.USER)
    await asyncio.wait_for(parent.when_idle(), 10)
    assert reasons(stored(world, child.id)) == [{"kind": "aborted", "cause": "parent"}]


class Crowd:
    """Watches one parent's children: how many are alive at most, which calls were refused.

    Each child holds its one model stream until :attr:`release` is set.
    """

    def __init__(self, world: World, parent: Agent) -> None:
        self.parent = parent
        self.alive: set[str] = set()
        self.most_alive = 0
        self.streaming = 0
        self.refused: list[str] = []
        self.release = asyncio.Event()
        self.decided = asyncio.Event()
        world.ctx.on(AGENT_CREATED, self.born)
        world.ctx.on(AGENT_DISPOSED, lambda agent: self.alive.discard(agent.id))
        world.ctx.on(AFTER_EXECUTE, self.after)

    def judge(self) -> None:
        # Enough has happened to tell: two children hold their stream and the
        # three other calls were refused, or a third child got in.
        if (self.streaming >= 2 and len(self.refused) >= 3) or self.streaming > 2:
            self.decided.set()

    def born(self, agent: Agent) -> None:
        if parent_of(agent) == self.parent.id:
            self.alive.add(agent.id)
            self.most_alive = max(self.most_alive, len(self.alive))

    def after(self, result: ToolResult, next_: Next[ToolResult], invocation: object) -> object:
        if result.name == "task" and result.content.startswith("task refused:"):
            self.refused.append(result.content)
            self.judge()
        return next_(result)

    async def child(self, request: ModelRequest, signal: object) -> AsyncIterator[StreamChunk]:
        self.streaming += 1
        self.judge()
        await self.release.wait()
        yield TextDelta("child done")
        yield Finish("stop")


def task_calls(count: int) -> Any:
    return calls(
        *(
            (f"t{i}", "task", json.dumps({"description": "job", "prompt": "go", "agent": "kid"}))
            for i in range(count)
        )
    )


def completed(records: list[dict[str, Any]]) -> int:
    return sum(str(r["content"]).endswith(": completed]") for r in records)


async def test_one_answer_with_five_tasks_never_runs_more_children_than_max_children(
    tmp_path: Path,
) -> None:
    world = await subagent_world(tmp_path, max_children=2)
    try:
        parent = (await new_parent(world)).agent
        crowd = Crowd(world, parent)
        world.model.queue(task_calls(5), say("parent done"))
        kids(world).queue(*[crowd.child] * 5)
        parent.followup(UserMessage.text("delegate five"))
        await asyncio.wait_for(crowd.decided.wait(), 10)
        crowd.release.set()
        await asyncio.wait_for(parent.when_idle(), 10)

        assert crowd.most_alive == 2
        assert completed(results(parent)) == 2
        full = (
            "task refused: this agent already runs 2 tasks (the limit); wait for one "
            "(task_output) or stop one (task_kill) before starting another"
        )
        assert crowd.refused == [full] * 3
        # Every slot is given back: the next answer may delegate twice again.
        world.model.queue(task_calls(2), say("again done"))
        kids(world).queue(say("one"), say("two"))
        parent.followup(UserMessage.text("delegate two"))
        await asyncio.wait_for(parent.when_idle(), 10)
        assert completed(results(parent)[5:]) == 2
    finally:
        await world.runtime.dispose()


async def test_a_child_whose_create_failed_gives_its_slot_back(tmp_path: Path) -> None:
    world = await subagent_world(tmp_path, max_children=1)
    try:
        parent = (await new_parent(world)).agent
        failures = [RuntimeError("setup broke")]

        def setup(agent: Agent) -> None:
            if parent_of(agent) == parent.id and failures:
                raise failures.pop()

        world.ctx.on(AGENT_SETUP, setup)
        world.model.queue(task_calls(1), task_calls(1), say("parent done"))
        kids(world).queue(say("made it"))
        parent.followup(UserMessage.text("delegate"))
        await asyncio.wait_for(parent.when_idle(), 10)
        failed, worked = results(parent)
        assert str(failed["content"]).startswith("task not started: ")
        assert str(worked["content"]).startswith("made it\n[task ")
    finally:
        await world.runtime.dispose()


async def test_a_foreground_task_waits_for_its_childs_background_work_and_answers_its_prompt(
    tmp_path: Path,
) -> None:
    """The child's prompt turn ends while a background task of its own runs: the task
    waits for that work, and answers with what the child said to its prompt."""
    world = await subagent_world(tmp_path, profiles={"grand": {"model": "grand"}})
    grand = ScriptedModel()

    async def grand_model(ctx: Context, config: None) -> None:
        await ctx.llm.register("grand", grand)

    grand_model.inject = ("llm",)  # type: ignore[attr-defined]
    await world.ctx.plugin(grand_model)
    try:
        parent = (await new_parent(world)).agent
        world.model.queue(task_call("work", agent="kid"), say("parent done"))
        kids(world).queue(
            task_call("in the background", run_in_background=True, agent="grand"),
            say("child's answer"),
            say("child on its notice"),
        )
        grand.queue(call("wait", json.dumps({"key": "g"})), say("grandchild done"))
        parent.followup(UserMessage.text("delegate"))
        reached, release = world.gates.get("g")
        await asyncio.wait_for(reached.wait(), 10)
        [child] = children_of(world, parent)
        await asyncio.wait_for(child.when_idle(), 10)  # its prompt's turn ended
        release.set()
        await asyncio.wait_for(parent.when_idle(), 10)
        [result] = results(parent)
        assert str(result["content"]).startswith("child's answer\n[task ")
        # The task returned only once the grandchild had answered too.
        assert len(grand.requests) == 2 and grand.scripts.empty()
    finally:
        await world.runtime.dispose()
