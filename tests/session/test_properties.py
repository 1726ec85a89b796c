"""Property: whatever is appended, the log stays valid and restorable.

Random operation sequences, mostly valid and sometimes off by one, are applied
both to a `Session` and to a small reference model of the invariants written
independently here. The session must accept exactly what the model accepts,
leave itself untouched when it rejects, and restore (from JSON records) to the
same state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from hypothesis import given
from hypothesis import strategies as st

from tether.llm import TextBlock
from tether.session import (
    AssistantChunk,
    AssistantMessageEvent,
    Completed,
    Event,
    EventPayload,
    InboxSpliced,
    Session,
    SessionInvariantError,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
    derive_messages,
)

from .builders import HEADER, call, new_session, snapshot, user


@dataclass(frozen=True)
class Model:
    open_turn: int | None = None
    open_step: int | None = None
    last_turn: int = 0
    last_step: int = 0
    requested: dict[str, str] = field(default_factory=dict)  # id -> tool name
    started: frozenset[str] = frozenset()
    resulted: frozenset[str] = frozenset()


def advance(model: Model, payload: EventPayload) -> Model | None:
    """The model after ``payload``, or None if the payload breaks the log."""
    in_step = model.open_step is not None
    if isinstance(payload, TurnStart):
        if model.open_turn is None and payload.turn == model.last_turn + 1:
            return replace(model, open_turn=payload.turn, last_turn=payload.turn, last_step=0)
        return None
    if isinstance(payload, TurnEnd):
        if not in_step and model.open_turn is not None and payload.turn == model.open_turn:
            return replace(model, open_turn=None)
        return None
    if isinstance(payload, StepStart):
        if model.open_turn == payload.turn and not in_step and payload.step == model.last_step + 1:
            return replace(
                model,
                open_step=payload.step,
                last_step=payload.step,
                requested={},
                started=frozenset(),
                resulted=frozenset(),
            )
        return None
    if isinstance(payload, StepEnd):
        if in_step and (payload.turn, payload.step) == (model.open_turn, model.open_step):
            return replace(
                model, open_step=None, requested={}, started=frozenset(), resulted=frozenset()
            )
        return None
    if isinstance(payload, UserMessageEvent | AssistantChunk):
        return model if in_step else None
    if isinstance(payload, AssistantMessageEvent):
        ids = [block.id for block in payload.tool_calls]
        if not in_step or any(i in model.requested for i in ids):
            return None
        names = {block.id: block.name for block in payload.tool_calls}
        return replace(model, requested={**model.requested, **names})
    if isinstance(payload, ToolCallEvent | ToolResultEvent):
        known = in_step and model.requested.get(payload.id) == payload.name
        if not known or payload.id in model.resulted:
            return None
        if isinstance(payload, ToolCallEvent):
            if payload.id in model.started:
                return None
            return replace(model, started=model.started | {payload.id})
        return replace(model, resulted=model.resulted | {payload.id})
    assert isinstance(payload, InboxSpliced)
    return model


KINDS = (
    "turn_start",
    "turn_end",
    "step_start",
    "step_end",
    "user",
    "chunk",
    "answer",
    "tool_call",
    "tool_result",
    "splice",
)


def sensible_kinds(model: Model) -> tuple[str, ...]:
    """Kinds that can be valid in the model's state, so that sequences get far."""
    if model.open_turn is None:
        return ("turn_start", "turn_start", "splice")
    if model.open_step is None:
        return ("step_start", "step_start", "turn_end")
    return ("user", "chunk", "answer", "tool_call", "tool_result", "tool_result", "step_end")


@dataclass(frozen=True)
class Op:
    wild: bool  # any kind, rather than one that can be valid now
    pick: int
    off: int  # mostly right, sometimes off by one
    flag: bool


operations = st.lists(
    st.builds(
        Op,
        wild=st.integers(0, 9).map(lambda n: n == 0),
        pick=st.integers(0, 99),
        off=st.sampled_from((0, 0, 0, 0, 0, 0, 0, 0, 1, -1)),
        flag=st.booleans(),
    ),
    min_size=20,
    max_size=120,
)


def build(op: Op, model: Model, n: int) -> EventPayload:
    kinds = KINDS if op.wild else sensible_kinds(model)
    kind = kinds[op.pick % len(kinds)]
    off, flag = op.off, op.flag
    turn = model.open_turn or model.last_turn or 1
    if kind == "turn_start":
        return TurnStart(max(1, model.last_turn + 1 + off))
    if kind == "turn_end":
        return TurnEnd(max(1, turn + off), Completed())
    if kind == "step_start":
        return StepStart(max(1, turn + (off if flag else 0)), max(1, model.last_step + 1 + off))
    if kind == "step_end":
        return StepEnd(turn, max(1, (model.open_step or model.last_step or 1) + off))
    if kind == "user":
        return user(f"u{n}")
    if kind == "chunk":
        return AssistantChunk("text", "x")
    # Mostly ids and names the step requested; sometimes others.
    known = sorted(model.requested)
    ident = known[op.pick % len(known)] if known and not off else "abc"[op.pick % 3]
    name = "other" if flag and off else model.requested.get(ident, "bash")
    if kind == "answer":
        fresh = f"{ident}{n}" if off == 0 else ident
        calls = (call(fresh, name),) + ((call(f"{fresh}x"),) if flag else ())
        return AssistantMessageEvent((TextBlock("t"), *calls), "tool_calls")
    if kind == "tool_call":
        return ToolCallEvent(ident, name, {"command": "ls"})
    if kind == "tool_result":
        return ToolResultEvent(ident, name, "out", is_error=flag)
    return InboxSpliced("steering" if flag else "queued", "insert", messages=(user(f"m{n}"),))


@given(operations)
def test_random_operations_never_break_the_invariants(ops: list[Op]) -> None:
    session = new_session()
    model = Model()
    for n, op in enumerate(ops):
        payload = build(op, model, n)
        expected = advance(model, payload)
        before = snapshot(session)
        try:
            session.append(payload)
        except SessionInvariantError:
            assert expected is None, f"valid {payload!r} was rejected"
            assert snapshot(session) == before
        else:
            assert expected is not None, f"invalid {payload!r} was accepted"
            model = expected
        assert (session.open_turn, session.open_step, session.last_turn) == (
            model.open_turn,
            model.open_step,
            model.last_turn,
        )
        assert {p.call.id for p in session.pending_tool_calls} == (
            set(model.requested) - model.resulted
        )

    records = json.loads(json.dumps([event.to_record() for event in session.events]))
    restored = Session.restore(HEADER, [Event.from_record(record) for record in records])
    assert snapshot(restored) == snapshot(session)
    assert derive_messages(restored) == derive_messages(session)
