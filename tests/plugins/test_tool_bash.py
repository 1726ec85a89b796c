"""The bash tools over a real executor: rendering, ownership, notices, reload."""

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.agent.support import prompts
from tests.agent.world import World, build_world, call, say
from tests.shell.support import Gate
from tether.agent import Agent, UserMessage
from tether.content import ToolCallBlock
from tether.plugins.tool_bash import NO_TASK_HINT
from tether.runtime import CancelSignal
from tether.shell import ShellExecRequest, TaskStatus
from tether.tools import ToolExec


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    built = await build_world(tmp_path, shell={"wake_idle_owner": False})
    try:
        yield built
    finally:
        await built.runtime.dispose()


def results(agent: Agent) -> list[dict[str, object]]:
    return [dict(e.data) for e in agent.session.events if e.type == "tool/result"]


async def run_bash(world: World, agent: Agent, **arguments: object) -> dict[str, object]:
    world.model.queue(
        call("bash", json.dumps(arguments), call_id=f"c{len(results(agent))}"), say("ok")
    )
    agent.followup(UserMessage.text("run it"))
    await agent.when_idle()
    return results(agent)[-1]


async def new_agent(world: World, cwd: str = "/") -> Agent:
    return (await world.get("agents").create(cwd=cwd)).agent


async def call_as(
    world: World, agent: Agent | None, tool: str, **arguments: object
) -> tuple[str, bool]:
    """Call a tool directly as ``agent`` (or as no agent), through the registry:
    its content and whether it is an error."""
    result = await world.get("tools").execute(
        ToolCallBlock(id="direct", name=tool, arguments=arguments),
        ToolExec(agent=agent, call_id="direct", signal=CancelSignal(), cwd="/"),
    )
    return str(result.content), bool(result.is_error)


async def as_caller(world: World, agent: Agent | None, tool: str, **arguments: object) -> str:
    """The content of :func:`call_as`."""
    return (await call_as(world, agent, tool, **arguments))[0]


async def test_foreground_output_renders_stdout_stderr_and_exit_code(world: World) -> None:
    agent = await new_agent(world)
    result = await run_bash(world, agent, command="echo out; echo err >&2; exit 3")
    assert result["content"] == "out\n[stderr]\nerr\n[exit code: 3]"
    assert result["is_error"] is True
    quiet = await run_bash(world, agent, command="true")
    assert quiet["content"] == "(no output)\n[exit code: 0]" and quiet["is_error"] is False


async def test_timeout_is_marked(world: World) -> None:
    agent = await new_agent(world)
    result = await run_bash(world, agent, command="sleep 5", timeout_ms=200)
    assert "[timed out after 200 ms]\n[to let it run longer, call bash again with a larger " in (
        str(result["content"])
    )
    assert "run_in_background: true and read its output with bash_output]" in str(result["content"])


async def test_relative_workdir_resolves_against_the_session_cwd(
    world: World, tmp_path: Path
) -> None:
    (tmp_path / "sub").mkdir()
    agent = await new_agent(world, cwd=str(tmp_path))
    relative = await run_bash(world, agent, command="pwd", workdir="sub")
    assert str(relative["content"]).startswith(str(tmp_path / "sub"))
    default = await run_bash(world, agent, command="pwd")
    assert str(default["content"]).startswith(str(tmp_path))
    absolute = await run_bash(world, agent, command="pwd", workdir="/")
    assert str(absolute["content"]).startswith("/\n")


async def test_background_task_is_readable_by_its_owner(world: World) -> None:
    agent = await new_agent(world)
    started = await run_bash(world, agent, command="echo hello", run_in_background=True)
    assert started["content"] == "started background task bash-1"
    await world.get("shell").wait("bash-1")
    output = await as_caller(world, agent, "bash_output", task_id="bash-1")
    assert "hello" in output and "status: completed, exit code 0" in output
    assert "(no new output)" in await as_caller(world, agent, "bash_output", task_id="bash-1")


async def test_owner_fence_refuses_other_sessions(world: World, tmp_path: Path) -> None:
    owner, other = await new_agent(world), await new_agent(world)
    gate = Gate(tmp_path / "gate")
    written = asyncio.ensure_future(gate.line())
    command = f"echo unread; echo written > {gate}; sleep 30"
    await run_bash(world, owner, command=command, run_in_background=True)
    await written
    refused = f"no background task bash-1 in this session; {NO_TASK_HINT}"
    assert await as_caller(world, other, "bash_output", task_id="bash-1") == refused
    assert await as_caller(world, other, "bash_kill", task_id="bash-1") == refused
    assert await as_caller(world, None, "bash_output", task_id="bash-1") == refused
    assert world.get("shell").get("bash-1").status is TaskStatus.RUNNING
    # The refused reads took nothing: the owner still gets all the output.
    assert "unread" in await as_caller(world, owner, "bash_output", task_id="bash-1")
    assert await as_caller(world, owner, "bash_kill", task_id="bash-1") == "killed bash-1"


async def test_another_sessions_task_looks_exactly_like_no_task(world: World) -> None:
    owner, other = await new_agent(world), await new_agent(world)
    await run_bash(world, owner, command="sleep 30", run_in_background=True)
    for tool in ("bash_output", "bash_kill"):
        foreign = await call_as(world, other, tool, task_id="bash-1")
        missing = await call_as(world, other, tool, task_id="bash-2")
        assert foreign == (missing[0].replace("bash-2", "bash-1"), True)
        assert missing[1] is True


async def test_unowned_tasks_are_open_and_empty_string_is_a_real_owner(world: World) -> None:
    shell = world.get("shell")
    unowned = await shell.start(shell.resolve(ShellExecRequest("sleep 30", cwd="/")))
    empty = await shell.start(shell.resolve(ShellExecRequest("sleep 30", cwd="/", owner="")))
    agent = await new_agent(world)
    assert "status: running" in await as_caller(world, agent, "bash_output", task_id=unowned.id)
    refused = await as_caller(world, agent, "bash_output", task_id=empty.id)
    assert refused == f"no background task {empty.id} in this session; {NO_TASK_HINT}"
    blank = SimpleNamespace(id="", session=agent.session)
    allowed = await as_caller(world, blank, "bash_output", task_id=empty.id)  # type: ignore[arg-type]
    assert "status: running" in allowed


async def test_reloading_tool_bash_keeps_the_fence(world: World) -> None:
    owner, other = await new_agent(world), await new_agent(world)
    await run_bash(world, owner, command="echo kept; sleep 30", run_in_background=True)
    await world.composer.reload("tool_bash")
    refused = await as_caller(world, other, "bash_output", task_id="bash-1")
    assert refused == f"no background task bash-1 in this session; {NO_TASK_HINT}"
    assert "kept" in await as_caller(world, owner, "bash_output", task_id="bash-1")


async def test_disposing_an_agent_kills_its_tasks(world: World) -> None:
    handle = await world.get("agents").create(cwd="/")
    bystander = await new_agent(world)
    await run_bash(world, handle.agent, command="sleep 60", run_in_background=True)
    await run_bash(world, bystander, command="sleep 60", run_in_background=True)
    await handle.dispose()
    shell = world.get("shell")
    assert shell.get("bash-1").status is TaskStatus.KILLED
    assert shell.get("bash-2").status is TaskStatus.RUNNING


async def test_a_finished_task_notifies_its_owner(world: World) -> None:
    agent = await new_agent(world)
    await run_bash(world, agent, command="echo done", run_in_background=True)
    await world.get("shell").wait("bash-1")
    world.model.queue(say("noted"))
    agent.followup(UserMessage.text("anything new?"))
    await agent.when_idle()
    notice = "background task bash-1 finished [status: completed, exit code 0]"
    assert any(p.startswith(notice) for p in prompts(agent.session))


async def test_an_idle_owner_is_woken_by_the_notice(tmp_path: Path) -> None:
    world = await build_world(tmp_path, shell={"wake_idle_owner": True})
    try:
        agent = await new_agent(world)
        flag = tmp_path / "go"
        command = f"while [ ! -e {flag} ]; do sleep 0.01; done; echo done"
        await run_bash(world, agent, command=command, run_in_background=True)
        world.model.queue(say("reacting to the notice"))
        flag.touch()  # the task finishes only now, with its owner idle
        await world.get("shell").wait("bash-1")
        await agent.when_idle()
        assert prompts(agent.session)[-1].startswith("background task bash-1 finished")
        assert agent.session.last_turn == 2
    finally:
        await world.runtime.dispose()


async def test_a_completion_during_a_reload_gap_is_not_lost(world: World) -> None:
    agent = await new_agent(world)
    await run_bash(world, agent, command="sleep 30", run_in_background=True)
    row = world.composer.row("tool_bash")
    assert row.fiber is not None
    await row.fiber.dispose()  # the consumer is gone ...
    await world.get("shell").kill("bash-1")  # ... when the task finishes
    assert [d.id for d in world.get("shell").pending_completions()] == ["bash-1"]
    await world.composer.reload("tool_bash")
    assert world.get("shell").pending_completions() == []
    world.model.queue(say("noted"))
    agent.followup(UserMessage.text("status?"))
    await agent.when_idle()
    assert any(
        "background task bash-1 finished [status: killed" in p for p in prompts(agent.session)
    )


async def test_invalid_requests_are_error_results(world: World) -> None:
    agent = await new_agent(world)
    result = await run_bash(world, agent, command="pwd", workdir="/no/such/dir")
    assert result["is_error"] is True and "/no/such/dir" in str(result["content"])
    # Each refusal says what to do instead.
    assert "give workdir as a directory that exists" in str(result["content"])
    missing = await as_caller(world, agent, "bash_output", task_id="bash-99")
    assert missing == (
        "no background task bash-99 in this session; a task id is what bash answered when it "
        "started a command with run_in_background: true (for example bash-1)"
    )
