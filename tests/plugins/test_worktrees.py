"""Children in git worktrees they own (``task`` with ``isolation: worktree``), with real git:
the parent's uncommitted work comes along, each child's diff comes back, an unchanged
worktree goes, a changed one stays and is named."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tether.llm.offline
from tests.agent.world import World, calls, say
from tests.plugins.test_tool_subagent import results, stored, subagent_world
from tether.agent import UserMessage
from tether.rewind.worktree import WORKTREES_DIR
from tether.session import Event, Session
from tether.session.store import SESSION_EVENT


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True, timeout=30
    )
    return done.stdout


def make_repo(root: Path) -> Path:
    """A repository with one commit (``a.txt``), a tracked change and an untracked file."""
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    (repo / "a.txt").write_text("committed\n")
    (repo / ".gitignore").write_text("ignored.txt\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first")
    (repo / "a.txt").write_text("committed\nuncommitted\n")
    (repo / "new.txt").write_text("untracked\n")
    (repo / "ignored.txt").write_text("left behind\n")
    return repo


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    built = await subagent_world(
        tmp_path / "data",
        shell={"wake_idle_owner": False},
        profiles={"offline": {"model": "offline"}},
    )
    await built.ctx.plugin(tether.llm.offline)
    try:
        yield built
    finally:
        await built.runtime.dispose()


def task(call_id: str, prompt: str, *, isolation: str = "worktree") -> tuple[str, str, str]:
    arguments = {"description": call_id, "prompt": prompt, "agent": "offline"}
    return call_id, "task", json.dumps({**arguments, "isolation": isolation})


async def delegate(world: World, cwd: Path, *tasks: tuple[str, str, str]) -> list[str]:
    """A parent in ``cwd`` runs ``tasks`` in one answer; the results' contents."""
    parent = (await world.get("agents").create(cwd=str(cwd))).agent
    world.model.queue(calls(*tasks), say("parent done"))
    parent.followup(UserMessage.text("delegate"))
    await asyncio.wait_for(parent.when_idle(), 30)
    return [str(result["content"]) for result in results(parent)]


def worktrees(repo: Path) -> list[Path]:
    place = repo / ".git" / WORKTREES_DIR
    return sorted(place.iterdir()) if place.exists() else []


async def test_two_children_editing_one_file_in_worktrees_both_succeed_with_their_diffs(
    world: World, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path)
    one, two = await delegate(
        world,
        repo,
        task("t1", "$ cat a.txt new.txt; echo one >> a.txt"),
        task("t2", "$ echo two >> a.txt"),
    )
    for content, line in ((one, "+one"), (two, "+two")):
        assert ": completed]" in content
        assert "[worktree kept: " in content and "(branch tether/" in content
        assert "--- a/a.txt" in content and line in content.splitlines()
    # The parent's uncommitted work was there: the tracked change and the untracked file.
    assert "uncommitted" in one and "untracked" in one
    # The parent's own files are untouched, and both worktrees are kept with their branches.
    assert (repo / "a.txt").read_text() == "committed\nuncommitted\n"
    kept = worktrees(repo)
    assert len(kept) == 2
    assert {p.joinpath("a.txt").read_text().splitlines()[-1] for p in kept} == {"one", "two"}
    assert not any(p.joinpath("ignored.txt").exists() for p in kept)
    branches = git(repo, "branch", "--format=%(refname:short)", "--list", "tether/*").split()
    assert sorted(branches) == sorted(f"tether/{p.name}" for p in kept)
    # Each child's log names its worktree.
    for path in kept:
        [created] = [e for e in stored(world, path.name) if e["type"] == "worktree/created"]
        assert created["data"]["path"] == str(path)
        assert created["data"]["branch"] == f"tether/{path.name}"


async def test_an_unchanged_worktree_is_removed_with_its_branch(
    world: World, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path)
    [content] = await delegate(world, repo, task("t1", "$ cat a.txt > /dev/null"))
    assert ": completed]" in content
    assert "no changes; removed with branch tether/" in content
    assert worktrees(repo) == []
    assert git(repo, "branch", "--list", "tether/*") == ""
    assert git(repo, "worktree", "list").count("\n") == 1


async def test_a_child_in_a_subdirectory_works_in_the_same_place_of_its_worktree(
    world: World, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path)
    (repo / "sub").mkdir()
    (repo / "sub" / "b.txt").write_text("b\n")
    [content] = await delegate(world, repo / "sub", task("t1", "$ pwd; echo c > c.txt"))
    [kept] = worktrees(repo)
    assert str(kept / "sub") in content
    assert (kept / "sub" / "c.txt").read_text() == "c\n"
    assert "+++ b/sub/c.txt" in content


async def test_worktree_isolation_outside_a_repository_is_refused_in_one_line(
    world: World, tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    [content] = await delegate(world, plain, task("t1", "$ echo x > x.txt"))
    assert content == (
        "task not started: worktree isolation needs a git repository with a commit: "
        f"{plain} is not in one"
    )
    assert not (plain / "x.txt").exists()


async def test_worktree_isolation_without_git_is_refused_in_one_line(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path)
    nowhere = tmp_path / "no-programs"
    nowhere.mkdir()
    monkeypatch.setenv("PATH", str(nowhere))
    [content] = await delegate(world, repo, task("t1", "$ echo x > x.txt"))
    assert content == "task not started: worktree isolation needs git, and git is not installed"


async def test_a_background_childs_notice_carries_its_worktree_and_diff(
    world: World, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path)
    parent = (await world.get("agents").create(cwd=str(repo))).agent
    background = json.loads(task("t1", "$ echo bg >> a.txt")[2]) | {"run_in_background": True}
    world.model.queue(calls(("t1", "task", json.dumps(background))), say("started"), say("noted"))
    noticed: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def on_event(session: Session, event: Event) -> None:
        notice = event.type == "user/message" and event.data["source"] == "notice"
        if notice and not noticed.done():
            noticed.set_result(str(event.data["content"]))

    parent.ctx.on(SESSION_EVENT, on_event)
    parent.followup(UserMessage.text("delegate"))
    notice = await asyncio.wait_for(noticed, 30)
    [kept] = worktrees(repo)
    assert f"[worktree kept: {kept} (branch tether/{kept.name})" in notice
    assert "+bg" in notice


async def test_disposing_a_parent_stops_its_background_child_and_its_receipt_names_the_worktree(
    world: World, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path)
    handle = await world.get("agents").create(cwd=str(repo))
    parent = handle.agent
    prompt = "$ echo bg >> a.txt; sleep 600"
    background = json.loads(task("t1", prompt)[2]) | {"run_in_background": True}
    world.model.queue(calls(("t1", "task", json.dumps(background))), say("started"))
    parent.followup(UserMessage.text("delegate"))
    await asyncio.wait_for(parent.when_idle(), 30)
    for _ in range(600):
        kept = worktrees(repo)
        if kept and kept[0].joinpath("a.txt").read_text().endswith("bg\n"):
            break
        await asyncio.sleep(0.05)
    [kept_path] = worktrees(repo)
    await asyncio.wait_for(handle.dispose(), 30)
    [receipt] = [e for e in stored(world, parent.id) if e["type"] == "tool/stopped"]
    [child] = receipt["data"]["agents"]
    assert (child["ended"], child["cause"]) == ("aborted", "parent")
    assert child["worktree"] == str(kept_path)
    assert child["branch"] == f"tether/{kept_path.name}"
    assert kept_path.joinpath("a.txt").read_text().endswith("bg\n")


async def test_binary_changes_and_deletions_of_the_parent_are_in_the_childs_worktree(
    world: World, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path)
    blob = bytes(range(256)) * 4
    (repo / "data.bin").write_bytes(blob)
    (repo / "gone.txt").write_text("to delete\n")
    git(repo, "add", "data.bin", "gone.txt")
    git(repo, "commit", "-q", "-m", "binary")
    changed = blob[::-1] + b"\x00tail"
    (repo / "data.bin").write_bytes(changed)
    (repo / "gone.txt").unlink()
    [content] = await delegate(world, repo, task("t1", "$ echo seen > seen.txt"))
    [kept] = worktrees(repo)
    assert (kept / "data.bin").read_bytes() == changed
    assert not (kept / "gone.txt").exists()
    # The base holds the parent's work: the child's diff is its own file alone.
    assert "+++ b/seen.txt" in content
    assert "data.bin" not in content and "gone.txt" not in content
