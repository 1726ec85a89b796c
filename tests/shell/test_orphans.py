"""The record of running groups: a sweep kills what dead owners left, never a reused pid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.shell.support import Gate, alive, spec
from tether.runtime import Runtime
from tether.shell import LocalShell
from tether.shell import local as shell_plugin
from tether.shell.definition import SHELL
from tether.shell.guard import OrphanGuard
from tether.shell.orphans import GroupLedger, GroupRecord, Owner, start_time, state_path


@contextmanager
def stray_group() -> Iterator[subprocess.Popen[bytes]]:
    """A ``sleep`` leading a group of its own, as a crashed tether's command would."""
    process = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def dead_owner() -> Owner:
    """An owner that has exited (a process that ran and was reaped)."""
    process = subprocess.Popen(["true"])
    pid = process.pid
    start = start_time(pid) or 1
    process.wait()
    return Owner(pid, start)


def test_a_sweep_kills_the_groups_of_a_dead_owner_and_forgets_them(tmp_path: Path) -> None:
    path = state_path(tmp_path)
    with stray_group() as stray:
        GroupLedger(path, dead_owner()).add(stray.pid, "bash-1")
        swept = GroupLedger(path).sweep()
        assert [item.killed for item in swept] == [(stray.pid,)]
        assert stray.wait(timeout=5) == -signal.SIGKILL
    assert GroupLedger(path).records() == []


def test_a_sweep_leaves_the_groups_of_a_live_owner(tmp_path: Path) -> None:
    path = state_path(tmp_path)
    with stray_group() as stray:
        GroupLedger(path).add(stray.pid, "run-1")  # owned by this (live) process
        assert GroupLedger(path).sweep() == []
        assert alive(stray.pid)
        assert [record.pgid for record in GroupLedger(path).records()] == [stray.pid]


def test_a_reused_pid_is_never_killed(tmp_path: Path) -> None:
    path = state_path(tmp_path)
    with stray_group() as unrelated:
        started = start_time(unrelated.pid)
        assert started is not None
        # The record names the same pid, but a leader that started at another time.
        owner = dead_owner()
        record = GroupRecord(unrelated.pid, started - 1, owner.pid, owner.start, "bash-9")
        path.write_text(json.dumps({"version": 1, "groups": [_as_dict(record)]}))
        swept = GroupLedger(path).sweep()
        assert [(item.reused, item.killed) for item in swept] == [(True, ())]
        assert alive(unrelated.pid)
    assert GroupLedger(path).records() == []


def test_an_unreadable_state_file_counts_as_empty(tmp_path: Path) -> None:
    path = state_path(tmp_path)
    path.write_text("{not json")
    assert GroupLedger(path).sweep() == []
    with stray_group() as stray:
        GroupLedger(path).add(stray.pid, "bash-1")
        assert [record.pgid for record in GroupLedger(path).records()] == [stray.pid]


async def test_a_command_is_recorded_while_it_runs_and_dies_with_tether(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    async with Runtime() as runtime:
        await runtime.ctx.plugin(shell_plugin, {"state_dir": str(state), "cwd": str(tmp_path)})
        shell = runtime.ctx.get(SHELL)
        assert isinstance(shell, LocalShell)
        gate = Gate(tmp_path / "gate")
        task = await shell.start(spec(shell, f"echo $$ > {gate}; exec sleep 300"))
        pid = int(await gate.line())
        shell._core.guard.flush()  # written soon after a change; now, for the test
        records = GroupLedger(state_path(state)).records()
        assert [(r.pgid, r.label, r.owner_pid) for r in records] == [(pid, task.id, os.getpid())]
        await shell.kill(task.id)
        shell._core.guard.flush()
        assert GroupLedger(state_path(state)).records() == []
        # The command's leader asks the kernel for its own parent-death signal.
        result = await shell.run(spec(shell, f"exec {sys.executable} -c {PDEATHSIG_PROBE!r}"))
        assert result.stdout.strip() == str(int(signal.SIGKILL))


PDEATHSIG_PROBE = (
    "import ctypes; v = ctypes.c_int(); "
    "ctypes.CDLL(None).prctl(2, ctypes.byref(v), 0, 0, 0); print(v.value)"
)
"""Prints the parent-death signal of the process it runs in (``PR_GET_PDEATHSIG`` is 2)."""


def test_a_child_whose_parent_died_before_it_was_armed_exits() -> None:
    # The check after arming: a parent pid that is not the real one means "already orphaned".
    from tether.shell.parent_death import die_with_parent

    arm = die_with_parent(os.getppid())  # "the parent" is not the child's parent
    assert arm is not None
    child = subprocess.Popen(["sleep", "300"], preexec_fn=arm)  # noqa: PLW1509
    assert child.wait(timeout=5) == 125


def _as_dict(record: GroupRecord) -> dict[str, object]:
    return {
        "pgid": record.pgid,
        "leader_start": record.leader_start,
        "owner_pid": record.owner_pid,
        "owner_start": record.owner_start,
        "label": record.label,
    }


async def test_two_executors_of_one_process_keep_each_others_records(tmp_path: Path) -> None:
    path = state_path(tmp_path)
    first, second = OrphanGuard(path), OrphanGuard(path)
    with stray_group() as one, stray_group() as two:
        first.track(one.pid, "run-1")
        second.track(two.pid, "run-1")
        first.flush()
        second.flush()
        assert {r.pgid for r in GroupLedger(path).records()} == {one.pid, two.pid}
        first.untrack(one.pid)
        first.flush()
        assert {r.pgid for r in GroupLedger(path).records()} == {two.pid}
        second.untrack(two.pid)
        await first.close()
        await second.close()
    assert GroupLedger(path).records() == []


async def test_closing_one_executor_leaves_the_running_commands_of_another(
    tmp_path: Path,
) -> None:
    path = state_path(tmp_path)
    first, second = OrphanGuard(path), OrphanGuard(path)
    with stray_group() as one, stray_group() as two:
        first.track(one.pid, "run-1")
        second.track(two.pid, "run-1")
        first.flush()
        second.flush()
        first.untrack(one.pid)
        watchdog = first.watchdog_pid
        await first.close()  # its watchdog has exited when close returns
        assert watchdog is not None and start_time(watchdog) is None
        assert two.poll() is None, "the other executor's command was killed"
        assert {r.pgid for r in GroupLedger(path).records()} == {two.pid}
        second.untrack(two.pid)
        await second.close()


def test_a_group_whose_leader_already_exited_is_still_recorded(tmp_path: Path) -> None:
    # ``cmd & exit``: the leader is a zombie by the time it is tracked, while
    # what it started runs on in its group.
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 300 & exit 0"], start_new_session=True, stdout=subprocess.DEVNULL
    )
    try:
        os.waitid(os.P_PID, leader.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
        record = GroupLedger(state_path(tmp_path)).record(leader.pid, "run-1")
        assert record is not None and record.pgid == leader.pid
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()
