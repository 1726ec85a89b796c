"""Spend budgets are enforced before spending: reserve (logged, on disk), send, settle.

The model is the scripted adapter of :mod:`tests.agent.world`, reporting usage;
the store is JSONL on disk, so "on disk before the request" is read from the file.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent.world import Script, World, build_world
from tether.agent import AgentOptions, UserMessage
from tether.llm.chunks import Finish, StreamChunk, TextDelta, Usage
from tether.llm.request import ModelRequest
from tether.loop.budget import BUDGETS
from tether.runtime import CancelSignal
from tether.session import Session
from tether.session.budget import Budget

PRICED = {
    "models": {
        "scripted": {"prices": {"input": 1000.0, "output": 2000.0}},
    }
}
"""USD 0.001 an input token, 0.002 an output token: a request costs cents."""


def spending(text: str, input_tokens: int, output_tokens: int) -> Script:
    async def script(request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamChunk]:
        yield TextDelta(text)
        yield Usage(input_tokens=input_tokens, output_tokens=output_tokens)
        yield Finish("stop")

    return script


def on_disk(world: World, session: Session) -> list[dict[str, Any]]:
    path = next(world.data_dir.rglob(f"{session.id}.jsonl"))
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def of_type(session: Session, kind: str) -> list[dict[str, Any]]:
    return [dict(event.data) for event in session.events if event.type == kind]


def reasons(session: Session) -> list[str]:
    return [
        str(event.data["reason"]["kind"]) for event in session.events if event.type == "turn/end"
    ]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    built = await build_world(tmp_path, loop_config={"reserve_output": 100})
    try:
        yield built
    finally:
        await built.runtime.dispose()


@pytest.fixture
async def priced(tmp_path: Path) -> AsyncIterator[World]:
    built = await build_world(tmp_path, loop_config={"reserve_output": 100}, llm_config=PRICED)
    try:
        yield built
    finally:
        await built.runtime.dispose()


def lean(budget: Budget) -> AgentOptions:
    """Options whose requests are small (a one-character system prompt, no tools):
    each reserves about 110 tokens, 100 of them for the output."""
    return AgentOptions(model="scripted", system=".", tools=(), budget=budget)


async def prompt(agent: Any, text: str) -> None:
    agent.followup(UserMessage.text(text))
    await agent.when_idle()


async def test_a_request_past_the_token_budget_is_not_sent_and_the_turn_ends_budget(
    world: World,
) -> None:
    options = lean(Budget(tokens=400))
    agent = (await world.get("agents").create(cwd="/w", options=options)).agent
    world.model.queue(spending("one", 250, 80), spending("two", 250, 80))
    await prompt(agent, "first")
    await prompt(agent, "second")
    assert reasons(agent.session) == ["completed", "budget"]
    assert len(world.model.requests) == 1
    # Sent with the reserved output as its limit: the reservation bounds the answer.
    assert world.model.requests[0].max_tokens == 100
    (receipt,) = of_type(agent.session, "budget/exhausted")
    assert receipt["budget"] == "session"
    assert receipt["unit"] == "tokens"
    assert receipt["limit"] == 400
    assert receipt["spent"] == 330
    assert receipt["spent"] + receipt["reserving"] > 400
    kinds = [event.type for event in agent.session.events]
    assert kinds[-3:] == ["budget/exhausted", "step/end", "turn/end"]


async def test_the_reservation_is_on_disk_before_the_request_is_sent(world: World) -> None:
    options = lean(Budget(tokens=10_000))
    agent = (await world.get("agents").create(cwd="/w", options=options)).agent
    seen: list[list[str]] = []

    async def script(request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamChunk]:
        seen.append([str(record.get("type")) for record in on_disk(world, agent.session)])
        yield TextDelta("hi")
        yield Usage(input_tokens=30, output_tokens=5)
        yield Finish("stop")

    world.model.queue(script)
    await prompt(agent, "go")
    assert "budget/reserved" in seen[0]
    (reserved,) = of_type(agent.session, "budget/reserved")
    (settled,) = of_type(agent.session, "budget/settled")
    assert reserved["purpose"] == "step"
    assert reserved["tokens"] >= 100  # its input estimate plus the 100 reserved for output
    assert settled == {"id": reserved["id"], "tokens": 35, "usd": None}


async def test_a_turn_budget_starts_again_with_each_turn(world: World) -> None:
    options = lean(Budget(turn_tokens=300))
    agent = (await world.get("agents").create(cwd="/w", options=options)).agent
    world.model.queue(*(spending(f"answer {n}", 20, 80) for n in range(3)))
    for n in range(3):
        await prompt(agent, f"prompt {n}")
    assert reasons(agent.session) == ["completed"] * 3
    assert len(world.model.requests) == 3
    ledger = world.loop.ctx.get(BUDGETS).of(agent.id)  # type: ignore[union-attr]
    assert ledger is not None
    assert ledger.describe() == "budget: 100 tokens of 300 tokens this turn"


async def test_a_usd_budget_is_kept_at_the_catalogs_prices(priced: World) -> None:
    options = lean(Budget(usd=0.4))
    agent = (await priced.get("agents").create(cwd="/w", options=options)).agent
    priced.model.queue(spending("one", 100, 50), spending("two", 100, 50))
    await prompt(agent, "first")
    (settled,) = of_type(agent.session, "budget/settled")
    assert settled["usd"] == pytest.approx(0.1 + 0.1)
    await prompt(agent, "second")
    assert reasons(agent.session) == ["completed", "budget"]
    (receipt,) = of_type(agent.session, "budget/exhausted")
    assert receipt["unit"] == "usd"
    assert receipt["spent"] == pytest.approx(0.2)
    assert len(priced.model.requests) == 1


async def test_a_usd_budget_on_a_model_without_prices_sends_nothing(world: World) -> None:
    options = lean(Budget(usd=1.0))
    agent = (await world.get("agents").create(cwd="/w", options=options)).agent
    await prompt(agent, "go")
    (end,) = [event.data["reason"] for event in agent.session.events if event.type == "turn/end"]
    assert end["kind"] == "error"
    assert end["code"] == "unpriced"
    assert "no prices" in end["error"]
    assert world.model.requests == []


async def test_retries_reserve_again_and_count(tmp_path: Path) -> None:
    world = await build_world(tmp_path, loop_config={"reserve_output": 100})
    try:
        from tether.loop import retry

        await world.ctx.plugin(retry, {"base_delay": 0.0, "max_delay": 0.0})

        async def failing(
            request: ModelRequest, signal: CancelSignal
        ) -> AsyncIterator[StreamChunk]:
            yield Usage(input_tokens=50, output_tokens=0)
            yield Finish("error", error="overloaded", error_code="server")

        options = lean(Budget(tokens=260))
        agent = (await world.get("agents").create(cwd="/w", options=options)).agent
        world.model.queue(*([failing] * 10))
        await prompt(agent, "go")
        settled = of_type(agent.session, "budget/settled")
        assert [entry["tokens"] for entry in settled] == [50] * len(settled)
        assert reasons(agent.session) == ["budget"]
        # Every attempt reserved before it was sent; the one that did not fit was not sent.
        assert len(world.model.requests) == len(settled) >= 2
        assert len(of_type(agent.session, "budget/reserved")) == len(settled)
    finally:
        await world.runtime.dispose()


async def test_a_resumed_session_keeps_what_it_spent(tmp_path: Path) -> None:
    options = lean(Budget(tokens=400))
    world = await build_world(tmp_path, loop_config={"reserve_output": 100})
    try:
        handle = await world.get("agents").create(cwd="/w", options=options)
        world.model.queue(spending("one", 250, 80))
        await prompt(handle.agent, "first")
        session_id = handle.agent.id
        await handle.dispose()
    finally:
        await world.runtime.dispose()
    world = await build_world(tmp_path, loop_config={"reserve_output": 100})
    try:
        handle = await world.get("agents").resume(session_id, options=options)
        world.model.queue(spending("two", 250, 80))
        await prompt(handle.agent, "second")
        assert reasons(handle.agent.session) == ["completed", "budget"]
        assert world.model.requests == []
        (receipt,) = of_type(handle.agent.session, "budget/exhausted")
        assert receipt["spent"] == 330
    finally:
        await world.runtime.dispose()


async def test_an_agent_without_a_budget_logs_no_reservation(world: World) -> None:
    agent = (await world.get("agents").create(cwd="/w")).agent
    world.model.queue(spending("one", 20, 80))
    await prompt(agent, "go")
    assert of_type(agent.session, "budget/reserved") == []
    assert world.model.requests[0].max_tokens is None


def with_usage(script: Script, input_tokens: int, output_tokens: int) -> Script:
    """``script``'s chunks, with usage reported before its finish."""

    async def reporting(request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamChunk]:
        async for chunk in script(request, signal):
            if isinstance(chunk, Finish):
                yield Usage(input_tokens=input_tokens, output_tokens=output_tokens)
            yield chunk

    return reporting


async def test_a_child_agent_draws_on_its_roots_budget(tmp_path: Path) -> None:
    from tests.plugins.test_tool_subagent import subagent_world, task_call

    world = await subagent_world(tmp_path)
    try:
        # Each request reserves about 8,500 tokens (8,192 for its output): the
        # parent's first and the child's fit in 16,000; once the child spent
        # 8,250 of them, the parent's second does not.
        options = AgentOptions(
            model="scripted", system=".", tools=("task",), budget=Budget(tokens=16_000)
        )
        parent = (await world.get("agents").create(cwd="/w", options=options)).agent
        world.model.queue(
            with_usage(task_call("do it"), 20, 30),
            spending("child done", 250, 8000),
            spending("never sent", 20, 30),
        )
        await prompt(parent, "go")
        assert len(world.model.requests) == 2
        assert reasons(parent.session) == ["budget"]
        reserved = of_type(parent.session, "budget/reserved")
        (child_id,) = {entry["session"] for entry in reserved} - {None}
        child = world.get("sessions").get(child_id)
        # The child's reservation is in its root's log; the child logs none of its own.
        assert child is None or of_type(child, "budget/reserved") == []
        assert [entry["session"] for entry in reserved] == [None, child_id]
        (receipt,) = of_type(parent.session, "budget/exhausted")
        assert receipt["spent"] == 50 + 8250
    finally:
        await world.runtime.dispose()


async def test_a_compaction_between_turns_draws_on_the_budget(world: World) -> None:
    from tether.loop.compaction import COMPACTION

    options = lean(Budget(tokens=100_000))
    agent = (await world.get("agents").create(cwd="/w", options=options)).agent
    world.model.queue(*(spending(f"answer {n}", 20, 30) for n in range(4)))
    for n in range(4):
        await prompt(agent, f"prompt {n} " + "words " * 50)
    world.model.queue(spending("the summary", 400, 60))
    compacted = await world.ctx.get(COMPACTION).compact(agent)  # type: ignore[union-attr]
    assert compacted is not None
    reserved = of_type(agent.session, "budget/reserved")
    assert [entry["purpose"] for entry in reserved] == ["step"] * 4 + ["compaction"]
    assert of_type(agent.session, "budget/settled")[-1]["tokens"] == 460


def test_the_day_ledger_folds_what_it_holds_and_skips_a_torn_line(tmp_path: Path) -> None:
    from tether.loop.day_budget import DayLedger

    ledger = DayLedger(tmp_path / "budget")
    assert (
        ledger.reserve("2026-12-06", {"id": "a", "tokens": 100, "usd": 0.5}, lambda s: True) is None
    )
    assert (
        ledger.reserve("2026-12-06", {"id": "b", "tokens": 50, "usd": None}, lambda s: True) is None
    )
    ledger.settle("2026-12-06", {"id": "a", "tokens": 30, "usd": 0.1})
    path = tmp_path / "budget" / "2026-12-06.jsonl"
    with path.open("a") as file:
        file.write('{"id": "c", "tok')  # a write a crash cut short
    spent = ledger.spent("2026-12-06")
    assert (spent.tokens, spent.usd) == (80, pytest.approx(0.1))
    # The next entry starts a line of its own: the torn one does not swallow it.
    assert ledger.reserve("2026-12-06", {"id": "e", "tokens": 20, "usd": 0}, lambda s: True) is None
    spent = ledger.spent("2026-12-06")
    assert (spent.tokens, spent.usd) == (100, pytest.approx(0.1))
    refused = ledger.reserve("2026-12-06", {"id": "d", "tokens": 1, "usd": 0}, lambda s: False)
    assert refused is not None and refused.tokens == 100
    assert ledger.spent("2026-12-07").tokens == 0
    assert oct(path.stat().st_mode & 0o777) == "0o600"
