"""Who owns what: the executor owns tasks, callers own listeners, completions await delivery."""

import asyncio
import logging
from pathlib import Path

import pytest

from tests.shell.support import Gate, alive, entries, gone, spec
from tether.runtime import Context, Fiber, Runtime
from tether.shell import LocalShell, ShellError, TaskDone, TaskStatus


async def test_unloading_the_executor_kills_every_command_and_awaits_them(
    shell: LocalShell, shell_fiber: Fiber, tmp_path: Path, spill_parent: Path
) -> None:
    commands = [
        "sleep 30",
        "sleep 30 & (sleep 30 & sleep 30) & wait",
        "trap '' TERM; sleep 30 & wait",
    ]
    gates = [Gate(tmp_path / f"gate{i}") for i in range(len(commands) + 1)]
    tasks = [
        await shell.start(spec(shell, f"echo $$ > {gate}; {command}", owner="a"))
        for gate, command in zip(gates, commands, strict=False)
    ]
    spilled = await shell.run(spec(shell, "seq 1 1000", max_output_bytes=10))
    assert spilled.stdout_spill is not None
    foreground = asyncio.create_task(shell.run(spec(shell, f"echo $$ > {gates[-1]}; sleep 30")))
    pgids = [int(await gate.line()) for gate in gates]

    await shell_fiber.dispose()

    assert not any(alive(pgid) for pgid in pgids)
    for pgid in pgids:
        assert await gone(pgid)
    assert all(shell.get(t.id).status is TaskStatus.KILLED for t in tasks)  # type: ignore[union-attr]
    result = await foreground
    assert result.aborted and not result.timed_out
    assert entries(spill_parent) == []
    with pytest.raises(ShellError, match="shut down"):
        await shell.start(spec(shell, "true"))
    with pytest.raises(ShellError, match="shut down"):
        await shell.run(spec(shell, "true"))


async def test_tasks_outlive_the_plugin_that_started_them(
    runtime: Runtime, shell: LocalShell
) -> None:
    started: list[str] = []

    async def consumer(ctx: Context, config: None) -> None:
        task = await ctx.shell.start(spec(ctx.shell, "sleep 30", owner="agent-1"))
        started.append(task.id)

    consumer.inject = ("shell",)  # type: ignore[attr-defined]
    fiber = await runtime.ctx.plugin(consumer)
    await fiber.dispose()
    assert shell.get(started[0]).status is TaskStatus.RUNNING  # type: ignore[union-attr]
    assert shell.owner_of(started[0]) == "agent-1"


async def test_a_done_listener_belongs_to_the_callers_fiber(
    runtime: Runtime, shell: LocalShell, shell_fiber: Fiber
) -> None:
    heard: list[TaskDone] = []

    async def consumer(ctx: Context, config: None) -> None:
        await ctx.shell.on_task_done(heard.append)

    consumer.inject = ("shell",)  # type: ignore[attr-defined]
    fiber = await runtime.ctx.plugin(consumer)
    first = await shell.start(spec(shell, "exit 1"))
    await shell.wait(first.id)
    assert [(d.id, d.task.exit_code) for d in heard] == [(first.id, 1)]

    await fiber.dispose()
    second = await shell.start(spec(shell, "true"))
    await shell.wait(second.id)
    assert [d.id for d in heard] == [first.id]
    assert shell_fiber.state == "active"


async def test_a_listener_can_be_removed_by_its_disposer(shell: LocalShell) -> None:
    heard: list[TaskDone] = []
    remove = await shell.on_task_done(heard.append)
    await remove()
    task = await shell.start(spec(shell, "true"))
    await shell.wait(task.id)
    assert heard == []


async def test_done_listeners_are_contained(
    shell: LocalShell, caplog: pytest.LogCaptureFixture
) -> None:
    heard: list[str] = []

    def broken(done: TaskDone) -> None:
        raise RuntimeError("listener bug")

    async def asynchronous(done: TaskDone) -> None:
        heard.append("never")

    await shell.on_task_done(broken)
    await shell.on_task_done(asynchronous)  # type: ignore[arg-type]
    await shell.on_task_done(lambda done: heard.append(done.id))
    with caplog.at_level(logging.ERROR, logger="tether.shell"):
        task = await shell.start(spec(shell, "true"))
        await shell.wait(task.id)
    assert heard == [task.id]
    assert "listener bug" in caplog.text
    assert "asynchronous" in caplog.text


async def test_a_done_notice_reports_how_the_task_ended(shell: LocalShell) -> None:
    heard: list[TaskDone] = []
    await shell.on_task_done(heard.append)
    task = await shell.start(spec(shell, "sleep 30"))
    killed = await shell.kill(task.id)
    assert [d.task for d in heard] == [killed]
    assert killed.status is TaskStatus.KILLED


async def test_a_completion_stays_pending_until_acknowledged(shell: LocalShell) -> None:
    heard: list[TaskDone] = []
    await shell.on_task_done(heard.append)
    first = await shell.start(spec(shell, "true"))
    second = await shell.start(spec(shell, "exit 2"))
    await shell.wait(first.id)
    await shell.wait(second.id)
    assert {d.id for d in heard} == {first.id, second.id}
    assert {d.id for d in shell.pending_completions()} == {first.id, second.id}
    assert shell.acknowledge(first.id)
    assert not shell.acknowledge(first.id)
    assert not shell.acknowledge("bash-99")
    assert [d.id for d in shell.pending_completions()] == [second.id]
    assert shell.pending_completions()[0].task.exit_code == 2


async def test_a_consumer_that_was_away_delivers_the_completions_it_missed(
    runtime: Runtime, shell: LocalShell
) -> None:
    delivered: list[str] = []

    async def consumer(ctx: Context, config: None) -> None:
        executor = ctx.shell

        def deliver(done: TaskDone) -> None:
            delivered.append(done.id)
            executor.acknowledge(done.id)

        await executor.on_task_done(deliver)
        for done in executor.pending_completions():
            deliver(done)

    consumer.inject = ("shell",)  # type: ignore[attr-defined]
    fiber = await runtime.ctx.plugin(consumer)
    before = await shell.start(spec(shell, "true"))
    await shell.wait(before.id)
    assert delivered == [before.id]

    await fiber.dispose()
    missed = await shell.start(spec(shell, "true"))
    await shell.wait(missed.id)
    assert delivered == [before.id]
    assert [d.id for d in shell.pending_completions()] == [missed.id]

    await runtime.ctx.plugin(consumer)
    assert delivered == [before.id, missed.id]
    assert shell.pending_completions() == []
