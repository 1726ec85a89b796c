"""The system prompt an agent's requests carry: role, environment, tools, instructions."""

from __future__ import annotations

import asyncio
import datetime
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tests.agent.world import World, build_world, say
from tether.agent import Agent, UserMessage
from tether.agent.types import AgentOptions
from tether.content import TextBlock, UserRoleMessage
from tether.llm.request import ModelRequest
from tether.loop.environment import gathering_early
from tether.runtime import Context
from tether.tools import Tool, ToolExec, ToolOutput


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def repository(path: Path, branch: str = "feature") -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", branch)
    (path / "README").write_text("hello\n")
    git(path, "add", "README")
    git(path, "commit", "-q", "-m", "first")
    return path


@pytest.fixture
async def make_world(tmp_path: Path) -> AsyncIterator[Any]:
    worlds: list[World] = []

    async def make(**loop_config: Any) -> World:
        loop_config.setdefault("user_instructions", str(tmp_path / "home" / "AGENTS.md"))
        world = await build_world(tmp_path / f"data{len(worlds)}", loop_config=loop_config)
        worlds.append(world)
        return world

    yield make
    for world in worlds:
        await world.runtime.dispose()


async def first_request(world: World, cwd: Path) -> ModelRequest:
    agent: Agent = (await world.get("agents").create(cwd=str(cwd))).agent
    world.model.queue(say("ok"))
    agent.followup(UserMessage.text("hi"))
    await agent.when_idle()
    return world.model.requests[-1]


async def system_of_first_request(world: World, cwd: Path) -> str:
    system = (await first_request(world, cwd)).system
    assert system is not None
    return system


async def facts_of_first_request(world: World, cwd: Path) -> str:
    """The system prompt of an agent's first request, then the note of the changing
    facts (date, git) that request carried as its first message, not in the prompt."""
    request = await first_request(world, cwd)
    system = request.system
    assert system is not None
    assert "Today's date" not in system and "- Git:" not in system
    note = request.messages[0]
    assert isinstance(note, UserRoleMessage)
    [block] = note.content
    assert isinstance(block, TextBlock) and block.text.startswith("Environment now:")
    return f"{system}\n\n{block.text}"


async def test_the_default_prompt_states_role_cwd_platform_shell_date_and_a_clean_branch(
    make_world: Any, tmp_path: Path
) -> None:
    repo = repository(tmp_path / "repo")
    commit = git(repo, "rev-parse", "--short=12", "HEAD")
    world = await make_world()

    system = await facts_of_first_request(world, repo)

    assert system.startswith("You are tether, a coding agent")
    assert f"- Working directory: {repo}" in system
    assert f"- Platform: {os.uname().sysname} {os.uname().release}" in system
    assert f"- User's shell: {Path(os.environ.get('SHELL', 'unknown')).name}" in system
    assert f"- Today's date: {datetime.date.today().isoformat()}" in system
    assert f"a git repository rooted at {repo} (branch feature at {commit}; clean)" in system


async def test_agents_in_different_directories_get_the_same_system_prompt(
    make_world: Any, tmp_path: Path
) -> None:
    """The working directory is noted in the conversation, not in the system prompt, so
    sessions in different directories share the cached prefix (prompt and tools)."""
    one, two = repository(tmp_path / "one"), repository(tmp_path / "two")
    world = await make_world()

    first, second = await first_request(world, one), await first_request(world, two)

    assert first.system == second.system
    assert str(one) not in (first.system or "")
    notes = [request.messages[0] for request in (first, second)]
    for note, cwd in zip(notes, (one, two), strict=True):
        assert isinstance(note, UserRoleMessage)
        [block] = note.content
        assert isinstance(block, TextBlock)
        assert block.text.startswith(f"Environment now:\n- Working directory: {cwd}\n")


async def test_uncommitted_changes_and_untracked_files_make_the_repository_dirty(
    make_world: Any, tmp_path: Path
) -> None:
    repo = repository(tmp_path / "repo", branch="main")
    (repo / "new.txt").write_text("untracked\n")
    world = await make_world()

    system = await facts_of_first_request(world, repo / ".")

    assert "(branch main at " in system
    assert "; uncommitted changes)" in system
    assert not (repo / ".git" / "index.lock").exists()


async def test_a_directory_outside_any_repository_says_so(make_world: Any, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    world = await make_world()
    system = await facts_of_first_request(world, plain)
    assert "- Git: not a git repository" in system


def fake_git(bin_dir: Path, body: str) -> None:
    """A ``git`` first on PATH running ``body`` (a shell script) instead."""
    bin_dir.mkdir()
    script = bin_dir / "git"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)


async def test_a_snapshot_begun_early_is_the_one_the_first_request_states(
    make_world: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = repository(tmp_path / "repo")
    commit = git(repo, "rev-parse", "--short=12", "HEAD")
    real_git, calls = shutil.which("git"), tmp_path / "calls"
    fake_git(tmp_path / "bin", f'echo "$*" >> {calls}\nexec {real_git} "$@"')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")

    async with gathering_early(repo):
        world = await make_world()
        system = await facts_of_first_request(world, repo)

    assert f"a git repository rooted at {repo} (branch feature at {commit}; clean)" in system
    assert len(calls.read_text().splitlines()) == 1, "git ran again for the first request"


async def test_an_early_snapshot_nobody_took_is_stopped_with_its_git_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "work" / ".git").mkdir(parents=True)
    fifo = tmp_path / "pid"
    os.mkfifo(fifo)
    fake_git(tmp_path / "bin", f"echo $$ > {fifo}\nexec sleep 60")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")

    async with gathering_early(tmp_path / "work"):
        pid = int(await asyncio.to_thread(fifo.read_text))
        os.kill(pid, 0)  # running

    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


class LateArgs(BaseModel):
    x: int


async def test_the_tools_listed_are_those_registered_when_the_request_is_made(
    make_world: Any, tmp_path: Path
) -> None:
    world = await make_world()
    agent: Agent = (await world.get("agents").create(cwd=str(tmp_path))).agent
    world.model.queue(say("one"), say("two"))
    agent.followup(UserMessage.text("first"))
    await agent.when_idle()
    first = world.model.requests[0].system or ""
    assert "- echo: " in first
    assert "late" not in first

    async def late(args: LateArgs, exec: ToolExec) -> ToolOutput:
        return ToolOutput(str(args.x))

    async def plugin(ctx: Context, config: None) -> None:
        tool = Tool(name="late", description="Added later.\nMore.", args=LateArgs, execute=late)
        await ctx.tools.register(tool)

    plugin.inject = ("tools",)  # type: ignore[attr-defined]
    await world.ctx.plugin(plugin)
    agent.followup(UserMessage.text("second"))
    await agent.when_idle()
    second = world.model.requests[1].system or ""
    assert "- late: Added later." in second
    assert "More." not in second
    assert "Using the tools safely:" in second


async def test_no_tools_offered_is_said_plainly(make_world: Any, tmp_path: Path) -> None:
    world = await make_world()
    handle = await world.get("agents").create(
        cwd=str(tmp_path), options=AgentOptions(model="scripted", tools=())
    )
    world.model.queue(say("ok"))
    handle.agent.followup(UserMessage.text("hi"))
    await handle.agent.when_idle()
    assert "No tools are available to you now" in (world.model.requests[0].system or "")


async def test_the_system_setting_replaces_the_default_and_system_append_extends_it(
    make_world: Any, tmp_path: Path
) -> None:
    replaced = await make_world(system="You are terse.")
    system = await system_of_first_request(replaced, tmp_path)
    assert system == "You are terse."

    extended = await make_world(system_append="Answer in French.")
    system = await system_of_first_request(extended, tmp_path)
    assert system.startswith("You are tether")
    assert "Environment:" in system
    assert system.endswith("\n\nAnswer in French.")


async def test_instruction_files_follow_the_default_prompt_nearest_last_with_paths(
    make_world: Any, tmp_path: Path
) -> None:
    repo = repository(tmp_path / "repo")
    sub = repo / "pkg"
    sub.mkdir()
    (repo / "AGENTS.md").write_text("Run the tests with make test.\n")
    (sub / "CLAUDE.md").write_text("This package uses tabs.\n")
    home = tmp_path / "home"
    home.mkdir()
    (home / "AGENTS.md").write_text("I prefer short answers.\n")
    world = await make_world()

    system = await system_of_first_request(world, sub)

    user_at = system.index(f'<instructions path="{home / "AGENTS.md"}" (the user')
    root_at = system.index(f'<instructions path="{repo / "AGENTS.md"}">')
    near_at = system.index(f'<instructions path="{sub / "CLAUDE.md"}">')
    assert system.index("Environment:") < user_at < root_at < near_at
    assert "I prefer short answers." in system
    assert "This package uses tabs." in system


async def test_instructions_off_reads_no_file(make_world: Any, tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("secret project rule")
    world = await make_world(instructions=False)
    system = await system_of_first_request(world, tmp_path)
    assert "secret project rule" not in system


async def test_the_prompt_is_a_snapshot_kept_for_the_agents_life(
    make_world: Any, tmp_path: Path
) -> None:
    (tmp_path / "AGENTS.md").write_text("rule one")
    world = await make_world()
    agent: Agent = (await world.get("agents").create(cwd=str(tmp_path))).agent
    world.model.queue(say("a"), say("b"))
    agent.followup(UserMessage.text("1"))
    await agent.when_idle()
    (tmp_path / "AGENTS.md").write_text("rule two")
    agent.followup(UserMessage.text("2"))
    await agent.when_idle()
    first, second = (request.system for request in world.model.requests)
    assert first == second
    assert "rule one" in (first or "")
