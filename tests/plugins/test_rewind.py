"""Workspace snapshots and rewinds, with real files, real git and real processes.

Every change an agent makes — through the file tools, through ``bash``
(``sed -i``, a Python script, ``git checkout``) and through a background task —
is taken back by a rewind to the start of the turn; a change made outside the
agent makes the rewind refuse; a conversation rewind or a fork leaves every
stored event of the parent loadable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.agent.world import Script, World, build_world, call, say
from tether.agent import Agent, UserMessage
from tether.front.rewind import (
    OutsideChangesError,
    fork_session,
    held,
    restore_workspace,
    rewind_code,
)
from tether.persist.service import PERSISTENCE
from tether.plugins.rewind import WORKSPACES, Workspaces
from tether.rewind.plan import NoSnapshotError, snapshots, turn_points
from tether.runtime.compose import PluginRow
from tether.session import WorkspaceSnapshot
from tether.session.store import SESSIONS


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def tree_of(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but ``.git``, with its content."""
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and ".git" not in path.relative_to(root).parts
    }


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    built = await build_world(tmp_path / "data")
    report = await built.composer.apply(
        [
            PluginRow(id="shell", plugin="tether.shell.local"),
            PluginRow(
                id="tool_bash", plugin="tether.plugins.tool_bash", config={"wake_idle_owner": False}
            ),
            PluginRow(id="tool_fs", plugin="tether.plugins.tool_fs"),
            PluginRow(
                id="rewind",
                plugin="tether.plugins.rewind",
                config={"data_dir": str(tmp_path / "data"), "max_file_bytes": 4096},
            ),
        ]
    )
    assert report.ok, report.problems
    try:
        yield built
    finally:
        await built.runtime.dispose()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with two branches: ``main`` (checked out) and ``other``."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "app.py").write_text("value = 1\n")
    (root / "notes.txt").write_text("alpha\nbeta\n")
    (root / "tracked.txt").write_text("on main\n")
    (root / ".gitignore").write_text("*.log\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "main")
    git(root, "checkout", "-q", "-b", "other")
    (root / "tracked.txt").write_text("on other\n")
    (root / "only-on-other.txt").write_text("other\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "other")
    git(root, "checkout", "-q", "main")
    return root


def workspaces(world: World) -> Workspaces:
    found = world.ctx.get(WORKSPACES)
    assert found is not None
    return found


def bash(command: str, *, background: bool = False) -> str:
    return json.dumps({"command": command, "run_in_background": background})


async def run_turn(world: World, agent: Agent, *calls: Script) -> None:
    """One turn: the model makes ``calls`` one step each, then answers."""
    world.model.queue(*calls, say("done"))
    agent.followup(UserMessage.text("go"))
    await agent.when_idle()


async def test_a_rewind_restores_every_file_the_tools_and_owned_processes_changed(
    world: World, repo: Path
) -> None:
    agent = (await world.get("agents").create(cwd=str(repo))).agent
    await run_turn(world, agent)  # turn 1
    before = tree_of(repo)
    head = git(repo, "rev-parse", "HEAD")
    script = repo / "gen.py"
    write = json.dumps({"path": "new.txt", "content": "written\n"})
    edit = json.dumps({"path": "app.py", "old_string": "value = 1", "new_string": "value = 2"})
    generate = f"{sys.executable} -c \"open('generated.txt', 'w').write('made')\""
    finished = asyncio.Event()
    await world.get("shell").on_task_done(lambda done: finished.set())
    await run_turn(  # turn 2: every way a file changes
        world,
        agent,
        call("write", write, call_id="c1"),
        call("read", json.dumps({"path": "app.py"}), call_id="c2r"),
        call("edit", edit, call_id="c2"),
        call("bash", bash("sed -i s/alpha/ALPHA/ notes.txt"), call_id="c3"),
        call("bash", bash(generate), call_id="c4"),
        call("bash", bash("git checkout -q other && rm -f notes.txt.bak"), call_id="c5"),
        call(
            "bash",
            bash("sleep 0.2; echo late > background.txt", background=True),
            call_id="c6",
        ),
    )
    await finished.wait()
    assert not script.exists()
    after = tree_of(repo)
    assert after != before
    assert {"new.txt", "generated.txt", "background.txt", "only-on-other.txt"} <= set(after)
    assert after["app.py"] == b"value = 2\n" and after["notes.txt"] == b"ALPHA\nbeta\n"
    assert after["tracked.txt"] == b"on other\n"

    rewound = await rewind_code(workspaces(world), agent.session, 2, force=False)

    assert tree_of(repo) == before
    assert set(rewound.restored.deleted) >= {"new.txt", "generated.txt", "background.txt"}
    assert git(repo, "rev-parse", "HEAD") != head  # the user's git state is never touched
    last = agent.session.events[-1].payload
    assert isinstance(last, WorkspaceSnapshot) and last.moment == "rewound"


async def test_snapshots_are_bound_to_turns_and_writing_calls_only(
    world: World, repo: Path
) -> None:
    agent = (await world.get("agents").create(cwd=str(repo))).agent
    read = json.dumps({"path": "app.py"})
    await run_turn(
        world,
        agent,
        call("read", read, call_id="r1"),
        call("write", json.dumps({"path": "x.txt", "content": "x"}), call_id="w1"),
    )
    taken = [(snap.moment, snap.call) for _, snap in snapshots(agent.session.events)]
    assert taken == [("turn", None), ("call", "w1"), ("called", "w1")]
    [point] = turn_points(agent.session.events)
    assert point.turn == 1 and point.prompt == "go" and point.snapshot is not None


async def test_a_change_made_outside_the_agent_makes_the_rewind_refuse(
    world: World, repo: Path
) -> None:
    agent = (await world.get("agents").create(cwd=str(repo))).agent
    edit = json.dumps({"path": "app.py", "old_string": "value = 1", "new_string": "value = 2"})
    read = call("read", json.dumps({"path": "app.py"}), call_id="r1")
    await run_turn(world, agent, read, call("edit", edit, call_id="c1"))
    (repo / "notes.txt").write_text("the user's own edit\n")  # between turns, by hand

    with pytest.raises(OutsideChangesError) as refused:
        await rewind_code(workspaces(world), agent.session, 1, force=False)
    assert refused.value.paths == ("notes.txt",)
    assert "notes.txt" in str(refused.value)
    assert (repo / "app.py").read_text() == "value = 2\n"  # nothing was touched

    await rewind_code(workspaces(world), agent.session, 1, force=True)
    assert (repo / "app.py").read_text() == "value = 1\n"
    assert (repo / "notes.txt").read_text() == "alpha\nbeta\n"


async def test_a_rewound_workspace_is_not_taken_for_an_outside_change(
    world: World, repo: Path
) -> None:
    agent = (await world.get("agents").create(cwd=str(repo))).agent
    await run_turn(world, agent, call("write", json.dumps({"path": "a", "content": "1"})))
    await run_turn(world, agent, call("write", json.dumps({"path": "b", "content": "2"})))
    await rewind_code(workspaces(world), agent.session, 2, force=False)
    await run_turn(world, agent, call("write", json.dumps({"path": "c", "content": "3"})))
    await rewind_code(workspaces(world), agent.session, 1, force=False)
    assert not (repo / "a").exists() and not (repo / "c").exists()


async def test_files_over_the_cap_and_outside_the_workspace_are_listed_not_restored(
    world: World, repo: Path, tmp_path: Path
) -> None:
    agent = (await world.get("agents").create(cwd=str(repo))).agent
    outside = tmp_path / "elsewhere.txt"
    big = "x" * 5000
    await run_turn(
        world,
        agent,
        call("bash", bash(f"printf '{big}' > big.bin"), call_id="c1"),
        call("write", json.dumps({"path": str(outside), "content": "out"}), call_id="c2"),
    )
    rewound = await restore_workspace(workspaces(world), agent.session, 1, force=False)
    assert "big.bin" in rewound.plan.unrestorable
    assert str(outside) in rewound.plan.unrestorable
    assert (repo / "big.bin").read_text() == big  # listed, never touched


async def test_a_turn_without_a_snapshot_cannot_be_rewound_to(world: World, repo: Path) -> None:
    agent = (await world.get("agents").create(cwd=str(repo))).agent
    await run_turn(world, agent)
    with pytest.raises(NoSnapshotError, match="no turn 5"):
        await rewind_code(workspaces(world), agent.session, 5, force=False)


def inotify_fds() -> int:
    """The inotify descriptors this process holds."""
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            held += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
    return held


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
async def test_the_workspace_watch_starts_with_the_first_snapshot_and_ends_with_the_plugin(
    world: World, repo: Path
) -> None:
    before = inotify_fds()
    agent = (await world.get("agents").create(cwd=str(repo))).agent
    await run_turn(world, agent, call("bash", bash("echo x > seen.txt"), call_id="c1"))
    assert inotify_fds() == before + 1
    store = workspaces(world).store(str(repo))
    assert store is not None
    taken = [e.payload for e in agent.session.events if isinstance(e.payload, WorkspaceSnapshot)]
    assert store.changed(taken[1].tree, taken[2].tree) == ["seen.txt"]  # call, then called
    found = workspaces(world)
    await world.runtime.dispose()
    assert inotify_fds() == before
    late = found.store(str(repo / "sub"))  # a store asked for after the unload scans
    assert late is not None
    (repo / "sub").mkdir()
    late.snapshot()
    assert inotify_fds() == before


async def test_a_conversation_rewind_is_a_branch_and_every_old_event_stays_loadable(
    world: World, repo: Path
) -> None:
    handle = await world.get("agents").create(cwd=str(repo))
    agent = handle.agent
    await run_turn(world, agent)
    await run_turn(world, agent, call("write", json.dumps({"path": "a", "content": "1"})))
    await run_turn(world, agent)
    await handle.dispose()
    persistence = world.ctx.get(PERSISTENCE)
    assert persistence is not None
    parent = await persistence.load(agent.id)
    stored = [event.to_record() for event in parent.events]

    forked = await fork_session(persistence, workspaces(world), parent, turn=2)

    branch = await persistence.load(forked.id)
    assert branch.header.lineage is not None
    assert branch.header.lineage.parent == agent.id
    assert branch.header.lineage.seed_length == forked.seq
    assert [e.to_record() for e in branch.events[: forked.seq]] == stored[: forked.seq]
    assert branch.last_turn == 1
    assert forked.dropped == ("go",)  # turn 2's prompt was queued at the cut: not rerun
    again = await persistence.load(agent.id)
    assert [event.to_record() for event in again.events] == stored

    # The branch is a first-class session: resumed, it runs its own turn 2.
    resumed = await world.get("agents").resume(forked.id)
    await run_turn(world, resumed.agent)
    assert resumed.agent.session.last_turn == 2
    await resumed.dispose()
    reloaded = await persistence.load(forked.id)
    assert reloaded.last_turn == 2
    # …and forkable in turn.
    grandchild = await fork_session(persistence, workspaces(world), reloaded, turn=None)
    assert (await persistence.load(grandchild.id)).header.lineage.parent == forked.id  # type: ignore[union-attr]


async def test_a_stored_session_is_held_under_its_lease_for_a_code_rewind(
    world: World, repo: Path
) -> None:
    handle = await world.get("agents").create(cwd=str(repo))
    agent = handle.agent
    await run_turn(world, agent, call("write", json.dumps({"path": "a", "content": "1"})))
    await handle.dispose()
    persistence = world.ctx.get(PERSISTENCE)
    sessions = world.ctx.get(SESSIONS)
    assert persistence is not None and sessions is not None
    async with held(sessions, persistence, agent.id) as session:
        await rewind_code(workspaces(world), session, 1, force=False)
    assert not (repo / "a").exists()
    stored = await persistence.load(agent.id)
    last = stored.events[-1].payload
    assert isinstance(last, WorkspaceSnapshot) and last.moment == "rewound"
