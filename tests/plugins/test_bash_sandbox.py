"""The bash tool runs its commands under the sandbox, and says why an access was denied."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.agent.support import prompts
from tests.agent.world import World, build_world, say
from tests.plugins.test_tool_bash import as_caller, new_agent, run_bash
from tests.shell.support import require_landlock
from tether.agent import UserMessage
from tether.runtime.compose import PluginRow
from tether.shell.sandbox import SANDBOX


@pytest.fixture(autouse=True)
def _landlock() -> None:
    require_landlock()


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    built = await build_world(tmp_path / "data", shell={"wake_idle_owner": False})
    try:
        rows = [state.row for state in built.composer.rows()]
        report = await built.composer.apply(
            [*rows, PluginRow(id="sandbox", plugin="tether.plugins.sandbox", config={})]
        )
        assert report.ok, report.problems
        yield built
    finally:
        await built.runtime.dispose()


async def test_a_denied_write_is_explained_in_the_bash_result(world: World, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / "src").mkdir()
    agent = await new_agent(world, str(ws))

    result = await run_bash(
        world,
        agent,
        command=f"echo x > .git/hooks/pre-commit; echo y > {tmp_path}/out; echo z > src/fine",
    )

    content = str(result["content"])
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
    assert not (tmp_path / "out").exists()
    assert (ws / "src" / "fine").read_text() == "z\n"
    assert "[sandbox workspace-write (network off; writable: " in content
    assert "denied an access (Permission denied; Read-only file system)" in content


async def test_a_protected_path_a_background_task_made_is_told_to_its_owner(
    world: World, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    agent = await new_agent(world, str(ws))

    await run_bash(world, agent, command="mkdir -p .claude", run_in_background=True)
    await world.get("shell").wait("bash-1")
    output = await as_caller(world, agent, "bash_output", task_id="bash-1")
    world.model.queue(say("noted"))
    agent.followup(UserMessage.text("anything new?"))
    await agent.when_idle()

    made = str(ws.resolve() / ".claude")
    assert f"protected paths appeared while the command ran: {made}" in output
    assert any(made in prompt for prompt in prompts(agent.session))


async def test_a_host_off_the_allow_list_is_refused_and_named_in_the_bash_result(
    tmp_path: Path,
) -> None:
    built = await build_world(tmp_path / "data", shell={"wake_idle_owner": False})
    try:
        rows = [state.row for state in built.composer.rows()]
        config = {"network": "allow-list", "allowed_hosts": ["pypi.org"]}
        row = PluginRow(id="sandbox", plugin="tether.plugins.sandbox", config=config)
        report = await built.composer.apply([*rows, row])
        assert report.ok, report.problems
        ws = tmp_path / "ws"
        ws.mkdir()
        agent = await new_agent(built, str(ws))

        result = await run_bash(
            built, agent, command="curl -sS -o /dev/null -w '%{http_code}' http://denied.invalid/"
        )
        sandbox = built.runtime.ctx.get(SANDBOX)
        assert sandbox is not None
        control = sandbox.policy_for(str(ws), agent.id).proxy
        assert control is not None and os.path.exists(control)  # noqa: ASYNC240 (one stat)
    finally:
        await built.runtime.dispose()
    # Unloading the sandbox plugin stopped the proxy: its control sockets are gone.
    assert not os.path.exists(control)  # noqa: ASYNC240 (one stat)

    content = str(result["content"])
    assert content.startswith("403")
    assert "[sandbox workspace-write (network allow-list: pypi.org; writable: " in content
    assert "the network proxy refused denied.invalid:80: not in allowed_hosts" in content
