"""A cancelled turn closes with one receipt of what the stop did to each process and child."""

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.agent.world import World, build_world, call, say
from tests.plugins.test_tool_subagent import background_child, subagent_world
from tests.shell.support import Gate, alive
from tether.agent import Agent, UserMessage
from tether.cli.render import transcript

BOUND = 1.0
"""Seconds a SIGTERM-honouring command may take to go here (bench_shell measures it closely)."""


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    built = await build_world(tmp_path, shell={"wake_idle_owner": False})
    try:
        yield built
    finally:
        await built.runtime.dispose()


async def start_foreground(world: World, agent: Agent, gate: Gate, call_id: str) -> int:
    """A foreground ``bash`` call that holds the turn; its leader's pid once it runs."""
    command = json.dumps({"command": f"echo $$ > {gate}; exec sleep 30"})
    world.model.queue(call("bash", command, call_id=call_id), say("never"))
    agent.followup(UserMessage.text("run it"))
    return int(await gate.line())


def receipts(agent: Agent) -> list[dict[str, object]]:
    return [dict(e.data) for e in agent.session.events if e.type == "tool/stopped"]


async def test_a_cancelled_turn_closes_with_a_receipt_of_its_running_call(
    world: World, tmp_path: Path
) -> None:
    agent = (await world.get("agents").create(cwd="/")).agent
    pid = await start_foreground(world, agent, Gate(tmp_path / "gate"), "c-fg")
    agent.cancel()
    await agent.when_idle()
    assert not alive(pid)
    types = [e.type for e in agent.session.events]
    assert types[-2:] == ["tool/stopped", "turn/end"]
    [receipt] = receipts(agent)
    assert receipt["turn"] == 1 and receipt["cause"] == "user"
    [entry] = receipt["stopped"]  # type: ignore[misc]
    assert entry["kind"] == "call" and entry["id"] == "c-fg" and entry["pgid"] == pid
    assert list(entry["signals"]) == ["SIGTERM"]
    assert entry["exit_signal"] == "SIGTERM" and entry["exit_code"] is None
    assert 0 <= entry["seconds"] < BOUND
    shown = "\n".join(transcript(agent.session))
    assert f"stopped call c-fg: process group {pid}, sent SIGTERM" in shown


async def test_disposing_mid_turn_receipts_the_background_tasks_it_killed(
    world: World, tmp_path: Path
) -> None:
    handle = await world.get("agents").create(cwd="/")
    agent = handle.agent
    started = json.dumps({"command": "sleep 30", "run_in_background": True})
    world.model.queue(call("bash", started, call_id="c-bg"), say("started"))
    agent.followup(UserMessage.text("start it"))
    await agent.when_idle()
    task = world.get("shell").get("bash-1")
    assert task is not None
    await start_foreground(world, agent, Gate(tmp_path / "gate"), "c-fg")
    await handle.dispose()
    [receipt] = receipts(agent)
    assert receipt["cause"] == "disposed"
    stopped = {(e["kind"], e["id"]): e for e in receipt["stopped"]}  # type: ignore[attr-defined]
    assert set(stopped) == {("call", "c-fg"), ("task", "bash-1")}
    for entry in stopped.values():
        assert list(entry["signals"]) == ["SIGTERM"]
    assert world.get("shell").get("bash-1").stop is not None


async def test_a_turn_that_stopped_nothing_has_no_receipt(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/")).agent
    world.model.queue(say("hello"))
    agent.followup(UserMessage.text("hi"))
    await agent.when_idle()
    assert receipts(agent) == []


async def test_disposing_an_idle_agent_receipts_the_background_tasks_it_killed(
    world: World, tmp_path: Path
) -> None:
    handle = await world.get("agents").create(cwd="/")
    agent = handle.agent
    gate = Gate(tmp_path / "gate")
    started = json.dumps({"command": f"echo $$ > {gate}; exec sleep 30", "run_in_background": True})
    world.model.queue(call("bash", started, call_id="c-bg"), say("started"))
    agent.followup(UserMessage.text("start it"))
    await agent.when_idle()
    pid = int(await gate.line())
    await handle.dispose()
    assert not alive(pid)
    [receipt] = receipts(agent)
    assert receipt["turn"] == 1 and receipt["cause"] == "disposed"
    [entry] = receipt["stopped"]  # type: ignore[misc]
    assert entry["kind"] == "task" and entry["id"] == "bash-1" and entry["pgid"] == pid
    assert entry["exit_signal"] == "SIGTERM" and 0 <= entry["seconds"] < BOUND
    # The receipt is durable: dispose returned after it reached the disk.
    records = (world.data_dir / "sessions" / f"{agent.id}.jsonl").read_text().splitlines()
    assert json.loads(records[-1])["type"] == "tool/stopped"


@pytest.fixture
async def family(tmp_path: Path) -> AsyncIterator[World]:
    """A world with the bash tools and the subagent tools."""
    built = await subagent_world(tmp_path, shell={"wake_idle_owner": False})
    try:
        yield built
    finally:
        await built.runtime.dispose()


async def test_a_turn_that_stops_a_command_and_a_child_closes_with_one_receipt_of_both(
    family: World, tmp_path: Path
) -> None:
    parent = (await family.get("agents").create(cwd="/")).agent
    child = await background_child(family, parent, "kid-held")
    pid = await start_foreground(family, parent, Gate(tmp_path / "gate"), "c-fg")
    parent.cancel()
    await parent.when_idle()
    assert not alive(pid)
    types = [e.type for e in parent.session.events]
    assert types.count("tool/stopped") == 1
    assert types[-2:] == ["tool/stopped", "turn/end"]
    [receipt] = receipts(parent)
    assert receipt["turn"] == 2 and receipt["cause"] == "user"
    [command] = receipt["stopped"]  # type: ignore[misc]
    assert command["kind"] == "call" and command["id"] == "c-fg" and command["pgid"] == pid
    [stopped_child] = receipt["agents"]  # type: ignore[misc]
    assert stopped_child["id"] == child.id and stopped_child["cause"] == "parent"


async def test_disposing_an_idle_agent_receipts_its_tasks_and_children_once(
    family: World, tmp_path: Path
) -> None:
    handle = await family.get("agents").create(cwd="/")
    parent = handle.agent
    child = await background_child(family, parent, "kid-idle")
    gate = Gate(tmp_path / "gate")
    started = json.dumps({"command": f"echo $$ > {gate}; exec sleep 30", "run_in_background": True})
    family.model.queue(call("bash", started, call_id="c-bg"), say("started"))
    parent.followup(UserMessage.text("start it"))
    await parent.when_idle()
    pid = int(await gate.line())
    await handle.dispose()
    assert not alive(pid)
    [receipt] = receipts(parent)
    assert receipt["turn"] == 2 and receipt["cause"] == "disposed"
    assert [e["id"] for e in receipt["stopped"]] == ["bash-1"]  # type: ignore[attr-defined]
    assert [a["id"] for a in receipt["agents"]] == [child.id]  # type: ignore[attr-defined]


def driver_task(agent: Agent) -> asyncio.Task[object]:
    [task] = [t for t in asyncio.all_tasks() if t.get_name() == f"agent:{agent.id}"]
    return task


def stored_types(world: World, agent: Agent) -> list[str]:
    records = (world.data_dir / "sessions" / f"{agent.id}.jsonl").read_text().splitlines()
    return [json.loads(record).get("type") for record in records]


async def test_a_driver_cancelled_from_outside_closes_its_turn_with_a_stored_receipt(
    world: World, tmp_path: Path
) -> None:
    agent = (await world.get("agents").create(cwd="/")).agent
    pid = await start_foreground(world, agent, Gate(tmp_path / "gate"), "c-fg")
    driver = driver_task(agent)
    driver.cancel()  # a task group or a host tearing down, not agent.cancel()
    await asyncio.wait({driver})
    assert driver.cancelled()
    assert not alive(pid)
    assert [e.type for e in agent.session.events][-2:] == ["tool/stopped", "turn/end"]
    [receipt] = receipts(agent)
    assert receipt["turn"] == 1 and receipt["cause"] == "task-cancelled"
    [entry] = receipt["stopped"]  # type: ignore[misc]
    assert entry["kind"] == "call" and entry["id"] == "c-fg" and entry["pgid"] == pid
    assert entry["exit_signal"] == "SIGTERM" and 0 <= entry["seconds"] < BOUND
    end = agent.session.events[-1].data
    assert end["reason"] == {"kind": "aborted", "cause": "task-cancelled"}
    # Stored before the cancellation went on: nothing flushed it since.
    assert stored_types(world, agent)[-2:] == ["tool/stopped", "turn/end"]


async def test_a_driver_cancelled_from_outside_after_agent_cancel_writes_one_receipt(
    world: World, tmp_path: Path
) -> None:
    agent = (await world.get("agents").create(cwd="/")).agent
    pid = await start_foreground(world, agent, Gate(tmp_path / "gate"), "c-fg")
    driver = driver_task(agent)
    agent.cancel()
    driver.cancel()
    await asyncio.wait({driver})
    assert not alive(pid)
    types = [e.type for e in agent.session.events]
    assert types.count("tool/stopped") == 1 and types.count("turn/end") == 1
    assert types[-2:] == ["tool/stopped", "turn/end"]
    [receipt] = receipts(agent)
    assert receipt["cause"] == "user"
    assert stored_types(world, agent)[-2:] == ["tool/stopped", "turn/end"]


async def test_a_turn_whose_own_task_is_cancelled_with_every_task_still_closes_with_a_receipt(
    world: World, tmp_path: Path
) -> None:
    agent = (await world.get("agents").create(cwd="/")).agent
    pid = await start_foreground(world, agent, Gate(tmp_path / "gate"), "c-fg")
    driver = driver_task(agent)
    [turn] = [t for t in asyncio.all_tasks() if t.get_name() == f"agent:{agent.id}:turn"]
    # What the event loop's shutdown does: every task is cancelled at once.
    turn.cancel()
    driver.cancel()
    await asyncio.wait({driver, turn})
    assert not alive(pid)
    assert [e.type for e in agent.session.events][-2:] == ["tool/stopped", "turn/end"]
    [receipt] = receipts(agent)
    assert receipt["cause"] == "task-cancelled"
    [entry] = receipt["stopped"]  # type: ignore[misc]
    assert entry["kind"] == "call" and entry["id"] == "c-fg" and entry["pgid"] == pid
    assert entry["exit_signal"] == "SIGTERM"
    assert agent.session.events[-1].data["reason"] == {"kind": "aborted", "cause": "task-cancelled"}
    assert stored_types(world, agent)[-2:] == ["tool/stopped", "turn/end"]


async def test_a_turn_whose_own_task_alone_is_cancelled_stores_its_receipt_and_ends_the_driver(
    world: World, tmp_path: Path
) -> None:
    from tether.agent import AgentDisposedError

    agent = (await world.get("agents").create(cwd="/")).agent
    pid = await start_foreground(world, agent, Gate(tmp_path / "gate"), "c-fg")
    driver = driver_task(agent)
    [turn] = [t for t in asyncio.all_tasks() if t.get_name() == f"agent:{agent.id}:turn"]
    turn.cancel()
    await asyncio.wait({driver})
    assert not alive(pid)
    [receipt] = receipts(agent)
    assert receipt["cause"] == "task-cancelled" and len(receipt["stopped"]) == 1  # type: ignore[arg-type]
    assert stored_types(world, agent)[-2:] == ["tool/stopped", "turn/end"]
    with pytest.raises(AgentDisposedError):
        agent.followup(UserMessage.text("next"))
