"""Background tasks: ids, snapshots, unread output, kills of whole trees, owners and limits."""

import asyncio
from pathlib import Path

import pytest

from tests.shell.conftest import GRACE_MS
from tests.shell.support import Gate, Latch, alive, gone, live_members, spec, text_of
from tether.runtime import Runtime
from tether.shell import LocalShell, TaskLimitError, TaskNotFoundError, TaskStatus
from tether.shell import local as shell_plugin
from tether.shell.definition import SHELL


async def test_task_ids_count_up_per_executor(shell: LocalShell) -> None:
    first = await shell.start(spec(shell, "true"))
    second = await shell.start(spec(shell, "true"))
    assert (first.id, second.id) == ("bash-1", "bash-2")
    async with Runtime() as other_runtime:
        await other_runtime.ctx.plugin(shell_plugin)
        other = other_runtime.ctx.get(SHELL)
        assert (await other.start(spec(other, "true"))).id == "bash-1"


async def test_a_task_runs_to_completion_with_its_exit_code(shell: LocalShell) -> None:
    started = await shell.start(spec(shell, "echo working; exit 7"))
    assert started.status is TaskStatus.RUNNING and started.finished_at is None
    assert started.command == "echo working; exit 7"
    done = await shell.wait(started.id)
    assert done.status is TaskStatus.COMPLETED
    assert (done.exit_code, done.signal) == (7, None)
    assert done.finished_at is not None and done.finished_at >= done.started_at
    assert shell.get(started.id) == done
    assert shell.list() == [done]


async def test_the_foreground_timeout_does_not_bound_a_background_task(
    shell: LocalShell,
) -> None:
    started = await shell.start(spec(shell, "sleep 0.3; echo done", timeout_ms=50))
    done = await shell.wait(started.id)
    assert (done.status, done.exit_code) == (TaskStatus.COMPLETED, 0)
    assert shell.read_output(started.id).stdout == "done\n"


async def test_read_output_returns_only_output_not_read_before(
    shell: LocalShell, tmp_path: Path
) -> None:
    gate, latch = Gate(tmp_path / "gate"), Latch(tmp_path / "latch")
    command = f"echo one; echo oops >&2; echo ready > {gate}; read x < {latch}; echo two"
    task = await shell.start(spec(shell, command))
    await gate.line()
    first = shell.read_output(task.id)
    assert (first.stdout, first.stderr) == ("one\n", "oops\n")
    assert first.task.status is TaskStatus.RUNNING
    again = shell.read_output(task.id)
    assert (again.stdout, again.stderr) == ("", "")
    await latch.release()
    await shell.wait(task.id)
    last = shell.read_output(task.id)
    assert (last.stdout, last.stderr) == ("two\n", "")
    assert last.task.status is TaskStatus.COMPLETED
    assert shell.read_output(task.id).stdout == ""


async def test_unread_output_beyond_the_cap_is_reported_truncated_with_its_spill(
    shell: LocalShell,
) -> None:
    task = await shell.start(spec(shell, "seq 1 50000", max_output_bytes=500))
    await shell.wait(task.id)
    read = shell.read_output(task.id)
    assert read.stdout_truncated and not read.stderr_truncated
    assert read.stdout.endswith("49999\n50000\n") and len(read.stdout) <= 500
    assert read.stdout_spill is not None
    assert text_of(read.stdout_spill) == "".join(f"{n}\n" for n in range(1, 50_001))
    after = shell.read_output(task.id)
    assert (after.stdout, after.stdout_truncated) == ("", False)
    assert after.stdout_spill == read.stdout_spill


async def test_kill_stops_the_whole_process_tree(shell: LocalShell, tmp_path: Path) -> None:
    gate = Gate(tmp_path / "gate")
    command = f"sleep 30 & (sleep 30 & sleep 30 & echo $$ > {gate}; wait) & wait"
    task = await shell.start(spec(shell, command, owner="a"))
    pgid = int(await gate.line())
    assert len(live_members(pgid)) == 5
    killed = await shell.kill(task.id)
    assert killed.status is TaskStatus.KILLED
    assert (killed.exit_code, killed.signal) == (None, "SIGTERM")
    assert await gone(pgid)


async def test_kill_escalates_to_sigkill_for_a_tree_that_traps_term(
    shell: LocalShell, tmp_path: Path
) -> None:
    gate = Gate(tmp_path / "gate")
    command = f"trap '' TERM; sleep 30 & sleep 30 & echo $$ > {gate}; wait"
    task = await shell.start(spec(shell, command))
    pgid = int(await gate.line())
    loop = asyncio.get_running_loop()
    began = loop.time()
    killed = await shell.kill(task.id)
    assert loop.time() - began >= GRACE_MS / 1000
    assert (killed.status, killed.signal) == (TaskStatus.KILLED, "SIGKILL")
    assert await gone(pgid)


async def test_a_task_leaves_nothing_in_its_group_when_it_exits(
    shell: LocalShell, tmp_path: Path
) -> None:
    gate = Gate(tmp_path / "gate")
    task = await shell.start(spec(shell, f"sleep 30 > /dev/null 2>&1 & echo $$ $! > {gate}"))
    pgid, leftover = map(int, (await gate.line()).split())
    done = await shell.wait(task.id)
    assert (done.status, done.exit_code) == (TaskStatus.COMPLETED, 0)
    assert not alive(leftover)
    assert await gone(pgid)


async def test_killing_a_finished_task_returns_it_unchanged(shell: LocalShell) -> None:
    task = await shell.start(spec(shell, "exit 3"))
    done = await shell.wait(task.id)
    assert await shell.kill(task.id) == done
    assert done.status is TaskStatus.COMPLETED


async def test_unknown_ids_are_refused_or_absent(shell: LocalShell) -> None:
    assert shell.get("bash-99") is None
    with pytest.raises(TaskNotFoundError, match="bash-99"):
        shell.read_output("bash-99")
    with pytest.raises(TaskNotFoundError):
        await shell.kill("bash-99")
    with pytest.raises(TaskNotFoundError):
        await shell.wait("bash-99")


async def test_the_owner_is_stored_and_read_only_through_owner_of(shell: LocalShell) -> None:
    owned = await shell.start(spec(shell, "true", owner="session-a"))
    unowned = await shell.start(spec(shell, "true"))
    empty = await shell.start(spec(shell, "true", owner=""))
    assert shell.owner_of(owned.id) == "session-a"
    assert shell.owner_of(unowned.id) is None
    assert shell.owner_of(empty.id) == ""
    assert shell.owner_of("bash-99") is None
    for task in (owned, await shell.wait(owned.id), *shell.list()):
        assert not hasattr(task, "owner")
    assert shell.owner_of(owned.id) == "session-a"


async def test_kill_owned_by_kills_only_that_owners_tasks(shell: LocalShell) -> None:
    a1 = await shell.start(spec(shell, "sleep 30", owner="a"))
    a2 = await shell.start(spec(shell, "sleep 30", owner="a"))
    a_done = await shell.start(spec(shell, "true", owner="a"))
    await shell.wait(a_done.id)
    others = [
        await shell.start(spec(shell, "sleep 30", owner=owner)) for owner in ("b", None, "", "ab")
    ]
    killed = await shell.kill_owned_by("a")
    assert sorted(t.id for t in killed) == sorted([a1.id, a2.id])
    assert all(t.status is TaskStatus.KILLED for t in killed)
    assert shell.get(a_done.id).status is TaskStatus.COMPLETED  # type: ignore[union-attr]
    assert all(shell.get(t.id).status is TaskStatus.RUNNING for t in others)  # type: ignore[union-attr]
    empty_owned = await shell.kill_owned_by("")
    assert [t.id for t in empty_owned] == [others[2].id]
    assert await shell.kill_owned_by("nobody") == []


async def test_an_owner_may_run_only_so_many_tasks_at_once(
    runtime: Runtime, spill_parent: Path
) -> None:
    await runtime.ctx.plugin(shell_plugin, {"max_background_per_owner": 2, "kill_grace_ms": 100})
    shell = runtime.ctx.get(SHELL)
    first = await shell.start(spec(shell, "sleep 30", owner="a"))
    await shell.start(spec(shell, "sleep 30", owner="a"))
    with pytest.raises(TaskLimitError, match="owner 'a' already runs 2 background tasks, the most"):
        await shell.start(spec(shell, "sleep 30", owner="a"))
    await shell.start(spec(shell, "sleep 30", owner="b"))
    await shell.start(spec(shell, "sleep 30"))
    await shell.start(spec(shell, "sleep 30"))
    with pytest.raises(TaskLimitError, match="2 unowned background tasks are already running"):
        await shell.start(spec(shell, "sleep 30"))
    await shell.kill(first.id)
    await shell.start(spec(shell, "sleep 30", owner="a"))


async def test_concurrent_starts_cannot_exceed_the_limit(runtime: Runtime) -> None:
    await runtime.ctx.plugin(shell_plugin, {"max_background_per_owner": 2, "kill_grace_ms": 100})
    shell = runtime.ctx.get(SHELL)
    outcomes = await asyncio.gather(
        *(shell.start(spec(shell, "sleep 30", owner="a")) for _ in range(5)),
        return_exceptions=True,
    )
    assert sum(isinstance(o, TaskLimitError) for o in outcomes) == 3
    assert len(shell.list()) == 2
