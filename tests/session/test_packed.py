"""A session holds the events of its closed turns packed, as their stored lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tether.session.packed as packed_module
from tether.content import TextBlock
from tether.loop.history import History
from tether.persist.backends import JsonlBackend
from tether.persist.service import _load
from tether.session import (
    AssistantChunk,
    AssistantMessageEvent,
    Completed,
    EventPayload,
    EventRegistry,
    RetryEvent,
    Session,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
    derive_messages,
)
from tether.session.events import Event
from tether.session.log import UNPACKED_LIMIT
from tether.session.packed import PackedEvents, encode_events
from tether.session.settings import ConfigChanged

from .builders import HEADER, new_session

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
texts = st.text(max_size=40)
payloads: st.SearchStrategy[EventPayload] = st.one_of(
    st.builds(TurnStart, turn=st.integers(1, 10**6)),
    st.builds(StepStart, turn=st.integers(1, 99), step=st.integers(1, 99)),
    st.builds(StepEnd, turn=st.integers(1, 99), step=st.integers(1, 99)),
    st.builds(AssistantChunk, kind=st.sampled_from(("text", "reasoning")), delta=texts),
    st.builds(
        UserMessageEvent,
        id=st.text(min_size=1, max_size=8),
        source=st.just("user"),
        content=st.lists(st.builds(TextBlock, texts), min_size=1, max_size=3).map(tuple),
    ),
    st.builds(
        AssistantMessageEvent,
        content=st.tuples(st.builds(TextBlock, texts)),
        finish=st.sampled_from(("stop", "length")),
        interrupted=st.booleans(),
    ),
    st.builds(
        ToolCallEvent,
        id=st.text(min_size=1, max_size=8),
        name=st.just("bash"),
        arguments=st.dictionaries(st.text(max_size=5), json_values, max_size=3),
    ),
    st.builds(
        ToolResultEvent,
        id=st.text(min_size=1, max_size=8),
        name=st.just("bash"),
        content=texts,
        is_error=st.booleans(),
    ),
    st.builds(TurnEnd, turn=st.integers(1, 99), reason=st.just(Completed())),
    st.builds(ConfigChanged, option=st.just("model"), value=st.text(min_size=1, max_size=8)),
)
times = st.floats(min_value=0, max_value=4e9, allow_nan=False)


@settings(max_examples=200)
@given(st.lists(st.tuples(payloads, times), max_size=30))
def test_an_event_packed_reads_back_equal_to_itself(
    items: list[tuple[EventPayload, float]],
) -> None:
    events = [Event.from_payload(p, seq=seq, time=t) for seq, (p, t) in enumerate(items)]
    log = PackedEvents()
    log.extend(events)
    log.pack()

    assert log.packed == len(events) == len(log)
    assert list(log) == events
    assert [log[i] for i in range(len(events))] == events
    assert [type(event.payload) for event in log] == [type(event.payload) for event in events]
    assert [event.payload for event in log] == [event.payload for event in events]


def test_text_no_line_can_hold_stays_decoded_in_place() -> None:
    lone = "half a pair: \ud800"
    events = [
        Event.from_payload(AssistantChunk("text", "a"), seq=0, time=1.0),
        Event.from_payload(AssistantChunk("text", lone), seq=1, time=2.0),
        Event.from_payload(AssistantChunk("text", "b"), seq=2, time=3.0),
    ]
    log = PackedEvents()
    log.extend(events)
    log.pack()

    assert list(log) == events
    assert log[1] is events[1]
    assert log[2] == events[2]


def _turn(session: Session, number: int, chunks: int = 3) -> list[Event]:
    appended = [
        session.append(TurnStart(number)),
        session.append(StepStart(number, 1)),
        session.append(UserMessageEvent(f"u{number}", "user", (TextBlock(f"q{number}"),))),
    ]
    appended += [session.append(AssistantChunk("text", f"w{i} ")) for i in range(chunks)]
    appended += [
        session.append(AssistantMessageEvent((TextBlock(f"a{number}"),), "stop")),
        session.append(StepEnd(number, 1)),
        session.append(TurnEnd(number, Completed())),
    ]
    return appended


def test_a_closed_turn_is_held_packed_once_the_next_begins() -> None:
    session = new_session()
    first = _turn(session, 1)
    assert session.events.packed == 0  # the last turn is held as appended

    session.append(TurnStart(2))

    assert session.events.packed == len(first)
    assert list(session.events)[: len(first)] == first
    assert session.events[len(first)].type == "turn/start"


def test_turns_packed_as_they_go_are_joined_into_blocks_made_at_their_final_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A live session's log costs its lines: no block is grown in place.
    monkeypatch.setattr(packed_module, "BLOCK", 2048)
    session = new_session()
    appended = [event for number in range(1, 41) for event in _turn(session, number)]
    appended.append(session.append(TurnStart(41)))
    appended.append(session.append(StepStart(41, 1)))
    lone = session.append(AssistantChunk("text", "half a pair: \ud800"))
    appended.append(lone)
    appended.append(session.append(StepEnd(41, 1)))
    appended.append(session.append(TurnEnd(41, Completed())))
    appended += _turn(session, 42)
    session.append(TurnStart(43))

    log = session.events._events
    blocks = log._blocks
    assert all(type(block.lines) is bytes for block in blocks)
    assert all(len(block.lines) >= 2048 for block in blocks[:-3])
    packable = [event for event in appended if event is not lone]
    size = sum(len(block.lines) for block in blocks)
    assert size == len(encode_events(packable))
    assert len(blocks) <= size // 2048 + 2
    assert list(session.events)[: len(appended)] == appended
    assert session.events[lone.seq] is lone
    assert derive_messages(session) == derive_messages(appended)


def test_an_open_turn_past_the_limit_is_packed_too() -> None:
    session = new_session()
    session.append(TurnStart(1))
    session.append(StepStart(1, 1))
    for _ in range(UNPACKED_LIMIT + 10):
        session.append(AssistantChunk("text", "x"))

    assert session.events.packed >= UNPACKED_LIMIT
    assert len(session.events) == UNPACKED_LIMIT + 12
    assert all(event.seq == seq for seq, event in enumerate(session.events))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=25), st.data())
def test_reads_keep_order_and_length_while_appends_go_on(
    turns: list[int], data: st.DataObject
) -> None:
    session = new_session()
    appended: list[Event] = []
    for number, chunks in enumerate(turns, 1):
        appended += _turn(session, number, chunks)
        events = session.events
        assert len(events) == len(appended)
        start = data.draw(st.integers(-len(appended) - 2, len(appended) + 2))
        stop = data.draw(st.integers(-len(appended) - 2, len(appended) + 2))
        step = data.draw(st.sampled_from((1, 1, 2, 3, -1, -2)))
        assert events[start:stop:step] == tuple(appended[start:stop:step])
        index = data.draw(st.integers(-len(appended), len(appended) - 1))
        assert events[index] == appended[index]
        assert list(reversed(events)) == appended[::-1]
        low = max(0, min(start, len(appended)))
        assert list(events.between(low)) == appended[low:]
        names = frozenset({"user/message", "turn/end"})
        assert list(events.of_types(names, low)) == [e for e in appended[low:] if e.type in names]
    with pytest.raises(IndexError):
        session.events[len(appended)]


def test_a_read_under_way_when_a_turn_begins_yields_every_event_once_in_order() -> None:
    """A reader that walks a live log across a pause (a replay waiting for its
    client) sees what it asked for even when a turn begins meanwhile and packs the
    events it had not reached yet."""
    session = new_session()
    appended = _turn(session, 1) + _turn(session, 2)
    packed = session.events.packed
    assert 0 < packed < len(appended)  # turn 1 packed, turn 2 held as appended
    names = frozenset({"user/message", "assistant/chunk", "turn/end"})
    reads = session.events.between(0, len(appended)), session.events.of_types(names)
    firsts = [next(read) for read in reads]
    appended.append(session.append(TurnStart(3)))  # packs turn 2 under the readers
    assert session.events.packed > packed
    assert [firsts[0], *reads[0]] == appended[:-1]
    assert [firsts[1], *reads[1]] == [e for e in appended[:-1] if e.type in names]


def test_a_restored_session_holds_its_events_packed_and_equal() -> None:
    registry = EventRegistry()
    session = new_session(registry)
    appended = [event for number in (1, 2, 3) for event in _turn(session, number)]

    restored = Session.restore(HEADER, [Event.from_record(e.to_record()) for e in appended])

    assert restored.events.packed == len(appended)
    assert list(restored.events) == appended


def test_a_load_holds_the_log_packed_as_stored(tmp_path: Path) -> None:
    backend = JsonlBackend(tmp_path)
    session = new_session()
    appended = [event for number in (1, 2, 3) for event in _turn(session, number, 50)]
    retry = session.append(TurnStart(4)), session.append(StepStart(4, 1))
    appended += [*retry, session.append(RetryEvent(1, "529", "overloaded", 1.0))]
    backend.write(HEADER.to_record(), [event.to_stored_record() for event in session.events])

    loaded, _ = _load(backend, HEADER.id)

    # Everything but what repair closes the open turn with.
    assert loaded.events.packed == len(appended)
    assert list(loaded.events)[: len(appended)] == appended
    assert derive_messages(loaded) == derive_messages(session)


def test_the_history_decodes_only_what_was_appended_since_its_last_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = new_session()
    for number in range(1, 40):
        _turn(session, number, 20)
    history = History(session)
    history.messages()
    decoded: list[int] = []
    decoder = packed_module._DECODER

    class Counting:
        def lines(self, block: bytes, first_seq: int = 0) -> list[Event] | None:
            decoded.append(block.count(b"\n"))
            return decoder.lines(block, first_seq)

    monkeypatch.setattr(packed_module, "_DECODER", Counting())
    new = _turn(session, 40, 20)
    session.append(TurnStart(41))  # packs turn 40

    messages = history.messages()
    read = sum(decoded)

    assert read <= len(new)
    assert messages == tuple(derive_messages(session))
