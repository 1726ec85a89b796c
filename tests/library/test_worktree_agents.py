"""The library's ``agents.create(..., isolation="worktree")``: an agent in a git worktree it
owns, with real git; the handle names the worktree and, once disposed, what became of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.plugins.test_worktrees import make_repo
from tether import Tether, UserMessage
from tether.agent import AgentCreateError


async def test_an_agent_created_in_a_worktree_works_there_and_its_changes_are_kept(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    async with Tether(data_dir=tmp_path / "data") as tether:
        handle = await tether.agents.create(cwd=str(repo), isolation="worktree")
        worktree = handle.worktree
        assert worktree is not None
        assert handle.agent.session.header.cwd == str(worktree.cwd) == str(worktree.root)
        assert (worktree.root / "a.txt").read_text() == "committed\nuncommitted\n"
        handle.agent.followup(UserMessage.text("write b.txt: from the agent"))
        await handle.agent.when_idle()
        await handle.dispose()
        outcome = await worktree.closed()
    assert outcome is not None and outcome.kept
    assert outcome.branch == f"tether/{handle.agent.id}"
    assert "+from the agent" in outcome.diff.splitlines()
    assert not (repo / "b.txt").exists()


async def test_an_unknown_isolation_and_a_directory_outside_git_are_refused(
    tmp_path: Path,
) -> None:
    async with Tether(data_dir=tmp_path / "data") as tether:
        with pytest.raises(ValueError, match="isolation must be 'none' or 'worktree'"):
            await tether.agents.create(cwd=str(tmp_path), isolation="container")  # type: ignore[arg-type]
        with pytest.raises(AgentCreateError, match="needs a git repository"):
            await tether.agents.create(cwd=str(tmp_path), isolation="worktree")
        assert tether.agents.list() == []
