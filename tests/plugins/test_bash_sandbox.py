"""The bash tool runs its commands under the sandbox, and says why an access was denied."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.agent.world import World, build_world
from tests.plugins.test_tool_bash import new_agent, run_bash
from tests.shell.support import require_landlock
from tether.runtime.compose import PluginRow


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
    assert "denied an access (Permission denied)" in content
