"""Crash repair: closing a turn a dead process left open."""

from __future__ import annotations

from tether.llm import ToolMessage
from tether.session import (
    Event,
    Interrupted,
    Session,
    StepEnd,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    closing_payloads,
    derive_messages,
    repair,
)
from tether.session.repair import OUTCOME_UNKNOWN

from .builders import HEADER, answer, call, complete_turn, new_session, open_step, started, user


def test_repair_closes_open_turn_distinguishing_started_tools() -> None:
    session = new_session()
    complete_turn(session)
    turn, step = open_step(session)
    session.append(user("u2"))
    ran, never_ran = call("c7", "bash"), call("c8", "write")
    session.append(answer(ran, never_ran))
    session.append(started(ran))
    stored = Session.restore(HEADER, session.events)
    seen: list[Event] = []
    stored.observe(lambda _, event: seen.append(event))

    closing = repair(stored)

    assert seen == closing
    payloads = [event.payload for event in closing]
    assert [type(p) for p in payloads] == [ToolResultEvent, ToolResultEvent, StepEnd, TurnEnd]
    ran_result, never_ran_result = payloads[0], payloads[1]
    assert isinstance(ran_result, ToolResultEvent) and isinstance(never_ran_result, ToolResultEvent)
    assert (ran_result.id, ran_result.name, ran_result.is_error) == ("c7", "bash", True)
    assert "started" in ran_result.content and "outcome is unknown" in ran_result.content
    assert (never_ran_result.id, never_ran_result.name, never_ran_result.is_error) == (
        "c8",
        "write",
        True,
    )
    assert "before it ran" in never_ran_result.content
    assert payloads[2:] == [StepEnd(turn, step), TurnEnd(turn, Interrupted())]
    assert (stored.open_turn, stored.open_step, stored.pending_tool_calls) == (None, None, ())
    # Everything already written is kept, and every tool call now has an answer.
    assert list(stored.events[: len(session.events)]) == list(session.events)
    results = [m for m in derive_messages(stored) if isinstance(m, ToolMessage)]
    assert [m.call_id for m in results] == ["c1", "c7", "c8"]


def test_repair_of_a_turn_without_an_open_step_only_ends_it() -> None:
    session = new_session()
    session.append(TurnStart(1))
    assert closing_payloads(session) == [TurnEnd(1, Interrupted())]


def test_closing_payloads_is_empty_when_no_turn_is_open() -> None:
    session = new_session()
    assert closing_payloads(session) == []
    complete_turn(session)
    assert closing_payloads(session) == []
    assert repair(session) == []


def test_closing_payloads_leaves_the_session_unchanged() -> None:
    session = new_session()
    open_step(session)
    session.append(answer(call("c1")))
    before = list(session.events)
    assert len(closing_payloads(session)) == 3
    assert list(session.events) == before
    assert session.open_step == 1


def test_a_started_call_with_side_effects_is_repaired_as_outcome_unknown_naming_its_key() -> None:
    session = new_session()
    open_step(session)
    block = call("c1", "deploy")
    session.append(answer(block))
    session.append(ToolCallEvent(id="c1", name="deploy", arguments={}, idempotency_key="s/c1"))
    [result, *_] = [event.payload for event in repair(session)]
    assert isinstance(result, ToolResultEvent) and result.is_error
    assert OUTCOME_UNKNOWN in result.content
    assert "may or may not have taken effect" in result.content
    assert "it was not run again" in result.content
    assert "Its idempotency key was s/c1." in result.content


def test_a_started_call_of_a_rerunnable_tool_is_repaired_as_safe_to_run_again() -> None:
    session = new_session()
    open_step(session)
    session.append(answer(call("c1", "read")))
    session.append(ToolCallEvent(id="c1", name="read", arguments={}, rerunnable=True))
    [result, *_] = [event.payload for event in repair(session)]
    assert isinstance(result, ToolResultEvent) and result.is_error
    assert OUTCOME_UNKNOWN not in result.content
    assert "running it again is safe" in result.content
