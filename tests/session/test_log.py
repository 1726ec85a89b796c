"""The in-memory session log: append, invariants, observers, restore."""

from __future__ import annotations

import logging

import pytest

from tether.session import (
    AssistantChunk,
    Completed,
    Event,
    EventFormatError,
    EventPayload,
    EventRegistry,
    HeaderFormatError,
    InboxSpliced,
    Lineage,
    PendingToolCall,
    ReentrantAppendError,
    Session,
    SessionHeader,
    SessionInvariantError,
    StepEnd,
    StepStart,
    TurnEnd,
    TurnStart,
    UnknownEventTypeError,
)

from .builders import (
    HEADER,
    FakeClock,
    answer,
    call,
    complete_turn,
    new_session,
    open_step,
    result,
    snapshot,
    started,
    user,
)
from .test_events import Retry


def test_seq_is_the_index_and_time_comes_from_the_clock() -> None:
    session = Session(HEADER, clock=FakeClock(start=100.0))
    complete_turn(session)
    assert [event.seq for event in session.events] == list(range(len(session.events)))
    assert [event.time for event in session.events] == [
        101.0 + index for index in range(len(session.events))
    ]
    assert session.id == "s-1"
    assert session.header is HEADER


def test_append_returns_the_recorded_event() -> None:
    session = new_session()
    event = session.append(TurnStart(1))
    assert event is session.events[0]
    assert event.payload == TurnStart(1)
    assert event.to_record()["data"] == {"turn": 1}


def test_rejected_append_changes_nothing() -> None:
    session = new_session()
    turn, step = open_step(session)
    block = call("c1")
    session.append(answer(block))
    before = snapshot(session)
    seen: list[Event] = []
    session.observe(lambda _, event: seen.append(event))
    for payload in (
        TurnStart(turn + 1),
        TurnEnd(turn, Completed()),
        StepStart(turn, step + 1),
        StepEnd(turn, step + 1),
        result(call("c2")),
        answer(block),
    ):
        with pytest.raises(SessionInvariantError):
            session.append(payload)
        assert snapshot(session) == before
    assert seen == []


def test_turns_never_nest() -> None:
    session = new_session()
    session.append(TurnStart(1))
    with pytest.raises(SessionInvariantError, match="turn 1 is still open; turns never nest"):
        session.append(TurnStart(2))


def test_turns_are_numbered_consecutively_from_one() -> None:
    session = new_session()
    with pytest.raises(SessionInvariantError, match="turn/start 2: the next turn is 1"):
        session.append(TurnStart(2))
    complete_turn(session)
    with pytest.raises(SessionInvariantError, match="turn/start 1: the next turn is 2"):
        session.append(TurnStart(1))
    session.append(TurnStart(2))
    assert (session.open_turn, session.last_turn) == (2, 2)


def test_turn_end_closes_only_the_open_turn_once_its_step_is_closed() -> None:
    session = new_session()
    with pytest.raises(SessionInvariantError, match="turn/end 1: no turn is open"):
        session.append(TurnEnd(1, Completed()))
    open_step(session)
    with pytest.raises(SessionInvariantError, match="turn/end 2: the open turn is 1"):
        session.append(TurnEnd(2, Completed()))
    with pytest.raises(SessionInvariantError, match="turn/end 1: step 1 is still open"):
        session.append(TurnEnd(1, Completed()))
    session.append(StepEnd(1, 1))
    session.append(TurnEnd(1, Completed()))
    assert session.open_turn is None
    assert session.last_turn == 1


def test_steps_live_inside_the_open_turn_numbered_per_turn() -> None:
    session = new_session()
    with pytest.raises(SessionInvariantError, match=r"step/start 1\.1: no turn is open"):
        session.append(StepStart(1, 1))
    session.append(TurnStart(1))
    with pytest.raises(SessionInvariantError, match=r"step/start 2\.1: the open turn is 1"):
        session.append(StepStart(2, 1))
    with pytest.raises(SessionInvariantError, match=r"step/start 1\.2: the next step is 1"):
        session.append(StepStart(1, 2))
    session.append(StepStart(1, 1))
    session.append(StepEnd(1, 1))
    session.append(StepStart(1, 2))
    session.append(StepEnd(1, 2))
    session.append(TurnEnd(1, Completed()))
    session.append(TurnStart(2))
    session.append(StepStart(2, 1))
    assert (session.open_turn, session.open_step) == (2, 1)


def test_steps_never_nest_and_step_end_matches_the_open_step() -> None:
    session = new_session()
    open_step(session)
    with pytest.raises(SessionInvariantError, match="step 1 is still open; steps never nest"):
        session.append(StepStart(1, 2))
    with pytest.raises(SessionInvariantError, match=r"step/end 1\.2: the open step is 1\.1"):
        session.append(StepEnd(1, 2))
    session.append(StepEnd(1, 1))
    with pytest.raises(SessionInvariantError, match=r"step/end 1\.1: no step is open"):
        session.append(StepEnd(1, 1))


@pytest.mark.parametrize(
    "payload",
    [
        user(),
        AssistantChunk("text", "x"),
        answer(),
        result(call("c1")),
        started(call("c1")),
    ],
    ids=lambda p: p.type,
)
def test_conversation_events_only_inside_an_open_step(payload: EventPayload) -> None:
    session = new_session()
    with pytest.raises(SessionInvariantError, match="only allowed inside an open step"):
        session.append(payload)
    session.append(TurnStart(1))
    with pytest.raises(SessionInvariantError, match="only allowed inside an open step"):
        session.append(payload)


def test_tool_result_must_match_call_in_same_step() -> None:
    session = new_session()
    turn, step = open_step(session)
    block = call("c1", "read")
    session.append(answer(block))
    with pytest.raises(SessionInvariantError, match=r"no assistant/message of step 1\.1 requested"):
        session.append(result(call("c2", "read")))
    with pytest.raises(SessionInvariantError, match="names tool 'bash', but 'read' was requested"):
        session.append(result(call("c1", "bash")))
    session.append(StepEnd(turn, step))
    session.append(StepStart(turn, step + 1))
    with pytest.raises(SessionInvariantError, match=r"no assistant/message of step 1\.2 requested"):
        session.append(result(block))


def test_tool_call_and_result_come_at_most_once_per_id() -> None:
    session = new_session()
    open_step(session)
    block = call("c1")
    session.append(answer(block))
    session.append(started(block))
    with pytest.raises(SessionInvariantError, match="tool/call 'c1': the call already started"):
        session.append(started(block))
    session.append(result(block))
    with pytest.raises(
        SessionInvariantError, match="tool/result 'c1': the call already has a result"
    ):
        session.append(result(block))


def test_tool_call_after_its_result_is_rejected() -> None:
    session = new_session()
    open_step(session)
    block = call("c1")
    session.append(answer(block))
    session.append(result(block))
    with pytest.raises(
        SessionInvariantError, match="tool/call 'c1': the call already has a result"
    ):
        session.append(started(block))


def test_tool_call_ids_are_unique_within_a_step() -> None:
    session = new_session()
    open_step(session)
    session.append(answer(call("c1")))
    with pytest.raises(SessionInvariantError, match=r"'c1' was already requested in step 1\.1"):
        session.append(answer(call("c1")))


def test_inbox_splices_and_plugin_events_may_come_anywhere() -> None:
    registry = EventRegistry()
    registry.register(Retry)
    session = new_session(registry)
    splice = InboxSpliced("queued", "insert", messages=(user("m1"),))
    session.append(splice)
    session.append(Retry(1))
    open_step(session)
    session.append(InboxSpliced("queued", "claim", ids=("m1",)))
    session.append(Retry(2))
    assert [event.type for event in session.events] == [
        "agent/inbox/spliced",
        "demo/note",
        "turn/start",
        "step/start",
        "agent/inbox/spliced",
        "demo/note",
    ]


def test_append_rejects_a_payload_class_the_registry_does_not_hold() -> None:
    session = new_session()
    with pytest.raises(
        UnknownEventTypeError, match="Retry is not registered for event type 'demo/note'"
    ):
        session.append(Retry(1))
    with pytest.raises(TypeError, match="expected an EventPayload"):
        session.append("turn/start")  # type: ignore[arg-type]
    assert len(session.events) == 0


def test_pending_tool_calls_distinguish_started_from_never_started() -> None:
    session = new_session()
    assert session.pending_tool_calls == ()
    turn, step = open_step(session)
    first, second, third = call("c1"), call("c2"), call("c3")
    session.append(answer(first, second, third))
    first_started = started(first)
    session.append(first_started)
    session.append(started(second))
    session.append(result(second))
    assert session.pending_tool_calls == (
        PendingToolCall(first, started=first_started),
        PendingToolCall(third, started=None),
    )
    session.append(result(first))
    session.append(result(third))
    session.append(StepEnd(turn, step))
    assert session.pending_tool_calls == ()


def test_observers_see_each_append_in_registration_order() -> None:
    session = new_session()
    calls: list[tuple[str, int]] = []
    session.observe(lambda s, e: calls.append(("a", e.seq)))
    session.observe(lambda s, e: calls.append(("b", e.seq)))
    session.append(TurnStart(1))
    session.append(StepStart(1, 1))
    assert calls == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]


def test_observer_sees_the_event_already_recorded() -> None:
    session = new_session()
    seen: list[tuple[int, int | None]] = []
    session.observe(lambda s, e: seen.append((len(s.events), s.open_turn)))
    session.append(TurnStart(1))
    assert seen == [(1, 1)]


def test_raising_observer_is_contained(caplog: pytest.LogCaptureFixture) -> None:
    session = new_session()
    seen: list[int] = []

    def broken(_: Session, event: Event) -> None:
        raise RuntimeError("observer bug")

    session.observe(broken)
    session.observe(lambda _, event: seen.append(event.seq))
    with caplog.at_level(logging.ERROR, logger="tether.session.log"):
        event = session.append(TurnStart(1))
    assert session.events[-1] is event
    assert seen == [0]
    [record] = caplog.records
    assert "observer" in record.getMessage() and "turn/start (seq 0)" in record.getMessage()
    assert record.exc_info is not None and "observer bug" in str(record.exc_info[1])


def test_append_from_observer_is_rejected() -> None:
    session = new_session()
    errors: list[Exception] = []

    def appender(s: Session, event: Event) -> None:
        try:
            s.append(StepStart(1, 1))
        except ReentrantAppendError as error:
            errors.append(error)

    session.observe(appender)
    session.append(TurnStart(1))
    assert len(errors) == 1
    assert "observers must not append" in str(errors[0])
    assert len(session.events) == 1
    # The guard is lifted once publication ends.
    session.append(StepStart(1, 1))
    assert len(errors) == 2


def test_observer_list_is_snapshotted_at_dispatch() -> None:
    session = new_session()
    calls: list[str] = []

    def late(_: Session, event: Event) -> None:
        calls.append(f"late {event.seq}")

    def second(_: Session, event: Event) -> None:
        calls.append(f"second {event.seq}")

    def first(s: Session, event: Event) -> None:
        calls.append(f"first {event.seq}")
        if event.seq == 0:
            s.observe(late)
            remove_second()

    session.observe(first)
    remove_second = session.observe(second)
    session.append(TurnStart(1))
    session.append(StepStart(1, 1))
    # The change made during seq 0's publication applies from seq 1 on.
    assert calls == ["first 0", "second 0", "first 1", "late 1"]


def test_observer_removal_is_idempotent_and_removes_only_its_registration() -> None:
    session = new_session()
    calls: list[int] = []

    def observer(_: Session, event: Event) -> None:
        calls.append(event.seq)

    remove_first = session.observe(observer)
    session.observe(observer)
    remove_first()
    remove_first()
    session.append(TurnStart(1))
    assert calls == [0]


def test_events_view_is_read_only_and_live() -> None:
    session = new_session()
    events = session.events
    session.append(TurnStart(1))
    assert len(events) == 1
    assert events[0:1] == (session.events[0],)
    with pytest.raises(TypeError):
        events[0] = events[0]  # type: ignore[index]
    assert not hasattr(events, "append")


def test_restore_reproduces_the_session_state() -> None:
    registry = EventRegistry()
    registry.register(Retry)
    session = new_session(registry)
    complete_turn(session)
    open_step(session)
    session.append(Retry(1))
    block = call("c9")
    session.append(answer(block))
    session.append(started(block))

    restored = Session.restore(HEADER, session.events, registry=registry)
    assert snapshot(restored) == snapshot(session)
    assert list(restored.events) == list(session.events)
    records = [event.to_record() for event in session.events]
    from_records = Session.restore(
        HEADER, [Event.from_record(r, registry) for r in records], registry=registry
    )
    assert snapshot(from_records) == snapshot(session)
    # A restored session goes on where the stored one stopped.
    restored.append(result(block))
    assert restored.events[-1].seq == len(session.events)


def test_restore_rejects_seq_gap() -> None:
    session = new_session()
    complete_turn(session)
    events = list(session.events)
    del events[3]
    with pytest.raises(SessionInvariantError, match="seq 4: expected seq 3") as raised:
        Session.restore(HEADER, events)
    assert raised.value.seq == 4


def test_restore_rejects_a_log_not_starting_at_seq_zero() -> None:
    session = new_session()
    complete_turn(session)
    with pytest.raises(SessionInvariantError, match="seq 1: expected seq 0"):
        Session.restore(HEADER, list(session.events)[1:])


def test_restore_names_the_seq_that_breaks_an_invariant() -> None:
    events = [
        Event("turn/start", 0, 1.0, {"turn": 1}),
        Event("step/start", 1, 2.0, {"turn": 1, "step": 1}),
        Event("turn/end", 2, 3.0, {"turn": 1, "reason": {"kind": "completed"}}),
    ]
    with pytest.raises(
        SessionInvariantError, match="seq 2: turn/end 1: step 1 is still open"
    ) as raised:
        Session.restore(HEADER, events)
    assert raised.value.seq == 2


def test_restore_places_loaded_chunks_by_the_same_invariants() -> None:
    session = new_session()
    open_step(session)
    session.append(AssistantChunk("text", "hi"))
    session.append(StepEnd(1, 1))
    records = [event.to_record() for event in session.events]
    loaded = [Event.from_record(record) for record in records]

    restored = Session.restore(HEADER, loaded)

    assert [event.payload for event in restored.events] == [
        event.payload for event in session.events
    ]
    stray = Event.from_record({**records[2], "seq": 4})
    with pytest.raises(
        SessionInvariantError, match="seq 4: assistant/chunk: only allowed inside an open step"
    ) as raised:
        Session.restore(HEADER, [*loaded, stray])
    assert raised.value.seq == 4


def test_restore_decodes_events_built_without_a_payload() -> None:
    restored = Session.restore(HEADER, [Event("turn/start", 0, 1.0, {"turn": 1})])
    assert restored.events[0].payload == TurnStart(1)
    assert restored.open_turn == 1
    with pytest.raises(
        EventFormatError, match="seq 0: turn/start: Object missing required field `turn`"
    ):
        Session.restore(HEADER, [Event("turn/start", 0, 1.0, {})])


def test_restore_keeps_ignorable_events_opaque_and_rejects_unknown_ones() -> None:
    stored = [Event("turn/start", 0, 1.0, {"turn": 1}), Event("demo/note", 1, 2.0, {"attempt": 1})]
    with pytest.raises(UnknownEventTypeError, match="seq 1: unknown event type 'demo/note'"):
        Session.restore(HEADER, stored)
    registry = EventRegistry()
    registry.ignore("demo/note")
    restored = Session.restore(HEADER, stored, registry=registry)
    assert restored.events[1] == stored[1]
    assert restored.events[1].payload is None


def test_header_record_round_trips() -> None:
    header = SessionHeader("s-2", 5, "/tmp", Lineage("s-1", 12), {"title": "demo"})
    record = header.to_record()
    assert record == {
        "id": "s-2",
        "created_at": 5.0,
        "cwd": "/tmp",
        "lineage": {"parent": "s-1", "seed_length": 12},
        "meta": {"title": "demo"},
    }
    assert SessionHeader.from_record(record) == header
    assert SessionHeader.from_record(HEADER.to_record()) == HEADER


def test_header_meta_is_a_read_only_copy() -> None:
    meta = {"title": "demo"}
    header = SessionHeader("s", 0.0, "/", meta=meta)
    meta["title"] = "changed"
    assert header.meta == {"title": "demo"}
    with pytest.raises(TypeError):
        header.meta["title"] = "x"  # type: ignore[index]


def test_headers_are_immutable_values_that_hash_despite_their_meta() -> None:
    header = SessionHeader("s", 1, "/", Lineage("p", 2), {"title": "demo"})
    same = SessionHeader("s", 1.0, "/", Lineage("p", 2), {"title": "demo"})
    relabelled = SessionHeader("s", 1.0, "/", Lineage("p", 2), {"title": "other"})

    assert header == same
    assert hash(header) == hash(same)
    assert header != relabelled
    assert {header, same, relabelled, SessionHeader("t", 1.0, "/")} == {
        header,
        relabelled,
        SessionHeader("t", 1.0, "/"),
    }
    with pytest.raises(AttributeError):
        header.cwd = "/elsewhere"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("record", "fragment"),
    [
        ("s-1", "header record must be an object"),
        ({"id": "s"}, "header record has fields \\['id'\\]"),
        (
            {"id": "", "created_at": 0, "cwd": "/", "lineage": None, "meta": {}},
            "header id must be a non-empty str",
        ),
        (
            {"id": "s", "created_at": "now", "cwd": "/", "lineage": None, "meta": {}},
            "header created_at must be a finite number",
        ),
        (
            {"id": "s", "created_at": 0, "cwd": "/", "lineage": {"parent": "p"}, "meta": {}},
            r"header lineage has fields \['parent'\], expected \['parent', 'seed_length'\]",
        ),
        (
            {
                "id": "s",
                "created_at": 0,
                "cwd": "/",
                "lineage": {"parent": "p", "seed_length": -1},
                "meta": {},
            },
            "lineage seed_length must be an int >= 0, got -1",
        ),
        (
            {"id": "s", "created_at": 0, "cwd": "/", "lineage": None, "meta": {"a": 1}},
            "header meta must map str to str",
        ),
    ],
)
def test_header_from_record_rejects_malformed_records(record: object, fragment: str) -> None:
    with pytest.raises(HeaderFormatError, match=fragment):
        SessionHeader.from_record(record)  # type: ignore[arg-type]


def test_session_requires_a_header() -> None:
    with pytest.raises(TypeError, match="expected a SessionHeader"):
        Session({"id": "s"})  # type: ignore[arg-type]
