"""The event vocabulary, the stored Event record and the registry."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, Self

import pytest

from tether.llm import ImageRef, ReasoningBlock, TextBlock, ToolCallBlock
from tether.session import (
    Aborted,
    AssistantChunk,
    AssistantMessageEvent,
    Blocked,
    Completed,
    Errored,
    Event,
    EventFormatError,
    EventPayload,
    EventRegistry,
    EventTypeConflictError,
    InboxSpliced,
    Interrupted,
    MaxTokens,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    UnknownEventTypeError,
    UserMessageEvent,
)

from .builders import new_session, open_step, user


@dataclass(frozen=True, slots=True)
class Retry(EventPayload):
    """A plugin event type, as a plugin would define it."""

    type: ClassVar[str] = "demo/note"

    attempt: int

    def to_data(self) -> dict[str, object]:
        return {"attempt": self.attempt}

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Self:
        attempt = data["attempt"]
        if not isinstance(attempt, int):
            raise EventFormatError(f"demo/note: attempt must be an int, got {attempt!r}")
        return cls(attempt)


SAMPLES: list[EventPayload] = [
    TurnStart(1),
    *(
        TurnEnd(2, reason)
        for reason in (
            Completed(),
            Aborted("user"),
            Blocked(),
            Errored("boom"),
            MaxTokens(),
            Interrupted(),
        )
    ),
    StepStart(1, 2),
    StepEnd(1, 2),
    UserMessageEvent("u1", "user", (TextBlock("hi"), ImageRef("data:image/png;base64,AA"))),
    AssistantChunk("reasoning", "hm"),
    AssistantMessageEvent(
        (
            ReasoningBlock("think", "sig"),
            TextBlock("ok"),
            ToolCallBlock("c1", "bash", {"command": "ls", "env": {"A": ["1", 2, None, 1.5, True]}}),
        ),
        "tool_calls",
        interrupted=True,
        usage={"input": 10, "output": 2},
    ),
    ToolCallEvent("c1", "bash", {"command": "ls"}),
    ToolResultEvent("c1", "bash", "a\nb", is_error=True),
    InboxSpliced("queued", "insert", messages=(user("m1"), user("m2"))),
    InboxSpliced("steering", "cancel", ids=("m3",)),
]


@pytest.mark.parametrize("payload", SAMPLES, ids=lambda p: type(p).__name__)
def test_every_builtin_payload_round_trips_through_its_data(payload: EventPayload) -> None:
    assert type(payload).from_data(payload.to_data()) == payload


@pytest.mark.parametrize("payload", SAMPLES, ids=lambda p: type(p).__name__)
def test_event_record_round_trips_through_json(payload: EventPayload) -> None:
    event = Event.from_payload(payload, seq=7, time=12.5)
    record = event.to_record()
    loaded = Event.from_record(json.loads(json.dumps(record)))
    assert loaded == event
    assert loaded.payload == payload
    assert loaded.to_record() == record


def test_record_has_the_documented_shape() -> None:
    event = Event.from_payload(TurnEnd(3, Aborted("disposed")), seq=4, time=1.0)
    assert event.to_record() == {
        "type": "turn/end",
        "seq": 4,
        "time": 1.0,
        "data": {"turn": 3, "reason": {"kind": "aborted", "cause": "disposed"}},
    }


def test_inbox_splice_stores_full_messages_only_for_insert() -> None:
    insert = InboxSpliced("queued", "insert", messages=(user("m1", "do it"),))
    claim = InboxSpliced("queued", "claim", ids=("m1",))
    assert Event.from_payload(insert, seq=0, time=0.0).to_record()["data"] == {
        "queue": "queued",
        "op": "insert",
        "messages": [
            {"id": "m1", "source": "user", "content": [{"type": "text", "text": "do it"}]}
        ],
    }
    assert Event.from_payload(claim, seq=1, time=0.0).to_record()["data"] == {
        "queue": "queued",
        "op": "claim",
        "messages": [{"id": "m1"}],
    }


def test_event_data_is_deeply_immutable() -> None:
    arguments: dict[str, object] = {"command": "ls", "flags": ["-l"]}
    session = new_session()
    open_step(session)
    event = session.append(
        AssistantMessageEvent((ToolCallBlock("c1", "bash", arguments),), "tool_calls")
    )
    # The caller's own objects are copied, not shared.
    arguments["command"] = "rm -rf /"
    flags = arguments["flags"]
    assert isinstance(flags, list)
    flags.append("-a")
    content = event.data["content"]
    assert isinstance(content, tuple)
    block = content[0]
    assert isinstance(block, Mapping)
    assert block["arguments"] == {"command": "ls", "flags": ("-l",)}
    with pytest.raises(TypeError):
        event.data["seq"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        block["arguments"]["command"] = "x"
    with pytest.raises(AttributeError):
        content.append(1)  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.seq = 5  # type: ignore[misc]
    payload = event.payload
    assert isinstance(payload, AssistantMessageEvent)
    assert payload.tool_calls[0].arguments == {"command": "ls", "flags": ("-l",)}
    with pytest.raises(TypeError):
        payload.tool_calls[0].arguments["command"] = "x"  # type: ignore[index]


def test_events_compare_by_record_and_hash_despite_their_data_mapping() -> None:
    appended = Event.from_payload(TurnStart(1), seq=0, time=1.0)
    built = Event("turn/start", 0, 1.0, {"turn": 1})
    assert built == appended
    assert built.payload is None
    assert hash(built) == hash(appended)
    assert built != Event("turn/start", 0, 1.0, {"turn": 2})


def test_event_constructor_freezes_a_copy_of_its_data() -> None:
    data: dict[str, object] = {"items": [1, {"k": "v"}]}
    event = Event("demo/note", 0, 5, data)
    data["items"] = []
    assert event.data == {"items": (1, {"k": "v"})}
    assert event.time == 5.0 and isinstance(event.time, float)
    assert event.payload is None


def test_to_record_returns_fresh_plain_json() -> None:
    event = Event("x/y", 0, 1.0, {"a": [{"b": 1}]})
    record = event.to_record()
    data = record["data"]
    assert isinstance(data, dict)
    data["a"][0]["b"] = 2
    assert event.data == {"a": ({"b": 1},)}


@pytest.mark.parametrize(
    ("record", "fragment"),
    [
        ([], "event record must be an object"),
        (
            {"type": "turn/start", "seq": 0, "time": 1.0},
            "expected \\['data', 'seq', 'time', 'type'\\]",
        ),
        ({"type": "", "seq": 0, "time": 1.0, "data": {}}, "event type must be a non-empty str"),
        ({"type": "turn/start", "seq": -1, "time": 1.0, "data": {}}, "seq must be an int >= 0"),
        ({"type": "turn/start", "seq": True, "time": 1.0, "data": {}}, "seq must be an int >= 0"),
        ({"type": "turn/start", "seq": 0, "time": "now", "data": {}}, "time must be a finite"),
        ({"type": "turn/start", "seq": 0, "time": 1.0, "data": []}, "data must be an object"),
        (
            {"type": "turn/start", "seq": 0, "time": 1.0, "data": {}},
            "missing required field `turn`",
        ),
        (
            {"type": "turn/start", "seq": 0, "time": 1.0, "data": {"turn": 1, "x": 2}},
            "unknown field `x`",
        ),
        (
            {"type": "turn/start", "seq": 0, "time": 1.0, "data": {"turn": 0}},
            "turn must be an int >= 1",
        ),
        (
            {
                "type": "turn/end",
                "seq": 0,
                "time": 1.0,
                "data": {"turn": 1, "reason": {"kind": "nope"}},
            },
            "Invalid value 'nope' - at `\\$.reason.kind`",
        ),
        (
            {
                "type": "turn/end",
                "seq": 0,
                "time": 1.0,
                "data": {"turn": 1, "reason": {"kind": "aborted"}},
            },
            "missing required field `cause` - at `\\$.reason`",
        ),
        (
            {
                "type": "user/message",
                "seq": 0,
                "time": 1.0,
                "data": {"id": "u", "source": "user", "content": [{"type": "video"}]},
            },
            "Invalid value 'video' - at `\\$.content\\[0\\].type`",
        ),
        (
            {
                "type": "user/message",
                "seq": 0,
                "time": 1.0,
                "data": {"id": "u", "source": "user", "content": [{"type": "text", "text": 1}]},
            },
            "Expected `str`, got `int` - at `\\$.content\\[0\\].text`",
        ),
        (
            {
                "type": "assistant/message",
                "seq": 0,
                "time": 1.0,
                "data": {
                    "content": [{"type": "image", "url": "u"}],
                    "finish": "stop",
                    "interrupted": False,
                    "usage": None,
                },
            },
            "Invalid value 'image' - at `\\$.content\\[0\\].type`",
        ),
        (
            {"type": "assistant/chunk", "seq": 0, "time": 1.0, "data": {"kind": "x", "delta": ""}},
            "Invalid enum value 'x' - at `\\$.kind`",
        ),
        (
            {"type": "assistant/chunk", "seq": 0, "time": 1.0, "data": {"kind": "text"}},
            "assistant/chunk: Object missing required field `delta`",
        ),
        (
            {
                "type": "assistant/chunk",
                "seq": 0,
                "time": 1.0,
                "data": {"kind": "text", "delta": 7},
            },
            "assistant/chunk: Expected `str`, got `int` - at `\\$.delta`",
        ),
        (
            {
                "type": "assistant/chunk",
                "seq": 0,
                "time": 1.0,
                "data": {"kind": "text", "delta": "", "x": 1},
            },
            "unknown field `x`",
        ),
        (
            {"type": "turn/start", "seq": 0, "time": float("nan"), "data": {"turn": 1}},
            "time must be a finite",
        ),
        (
            {"type": "turn/start", "seq": 0, "time": float("inf"), "data": {"turn": 1}},
            "time must be a finite",
        ),
        (
            {"type": "turn/start", "seq": 0, "time": 1.0, "data": {"turn": 1}, "x": 2},
            "expected \\['data', 'seq', 'time', 'type'\\]",
        ),
        (
            {
                "type": "agent/inbox/spliced",
                "seq": 0,
                "time": 1.0,
                "data": {"queue": "queued", "op": "claim", "messages": [{"id": "a"}, {"id": "a"}]},
            },
            "a message id appears twice",
        ),
    ],
)
def test_from_record_rejects_malformed_records(record: object, fragment: str) -> None:
    with pytest.raises(EventFormatError, match=fragment):
        Event.from_record(record)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda: TurnStart(True), "turn/start: turn must be an int >= 1"),
        (lambda: StepStart(1, 0), "step/start: step must be an int >= 1"),
        (lambda: TurnEnd(1, "completed"), "turn/end: reason must be a TurnEndReason"),
        (lambda: Aborted(""), "turn/end: reason cause must be a non-empty str"),
        (lambda: UserMessageEvent("", "user", ()), "user/message: id must be a non-empty str"),
        (lambda: UserMessageEvent("u", "user", "hi"), "user/message: content must be a sequence"),
        (
            lambda: AssistantMessageEvent(
                (ToolCallBlock("c", "t", {}), ToolCallBlock("c", "t", {})), "tool_calls"
            ),
            "duplicate tool call id 'c'",
        ),
        (
            lambda: AssistantMessageEvent((ToolCallBlock("c", "t", {"f": object()}),), "x"),
            "arguments of tool call 'c'.f: object is not JSON data",
        ),
        (
            lambda: AssistantMessageEvent((), "stop", usage={"input": -1}),
            "usage\\['input'\\] must be an int >= 0",
        ),
        (lambda: ToolCallEvent("c", "t", {"x": float("nan")}), "nan is not a JSON number"),
        (lambda: ToolResultEvent("c", "t", "out", None), "is_error must be a bool"),
        (lambda: InboxSpliced("later", "insert"), "queue must be 'queued' or 'steering'"),
        (lambda: InboxSpliced("queued", "claim", messages=(user(),)), "claim carries ids"),
        (lambda: InboxSpliced("queued", "insert", ids=("a",)), "insert carries messages"),
    ],
)
def test_payload_construction_rejects_bad_fields(build: object, fragment: str) -> None:
    assert callable(build)
    with pytest.raises(EventFormatError, match=fragment):
        build()


def test_loaded_chunk_is_immutable_and_owns_its_data() -> None:
    record: dict[str, object] = {
        "type": "assistant/chunk",
        "seq": 4,
        "time": 2.0,
        "data": {"kind": "text", "delta": "hel"},
    }
    event = Event.from_record(record)
    data = record["data"]
    assert isinstance(data, dict)
    data["delta"] = "changed"

    assert event.data == {"kind": "text", "delta": "hel"}
    assert event.payload == AssistantChunk("text", "hel")
    assert event.to_record() == {**record, "data": {"kind": "text", "delta": "hel"}}
    with pytest.raises(TypeError):
        event.data["delta"] = "x"  # type: ignore[index]
    for name in ("type", "seq", "time", "data", "payload"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(event, name, None)


@pytest.mark.parametrize("payload", SAMPLES, ids=lambda p: type(p).__name__)
def test_events_read_back_the_same_whichever_way_they_were_made(payload: EventPayload) -> None:
    appended = Event.from_payload(payload, seq=3, time=7.0)
    record = appended.to_record()
    loaded = Event.from_record(json.loads(json.dumps(record)))
    built = Event(record["type"], 3, 7, record["data"])  # type: ignore[arg-type]

    for event in (appended, loaded, built, copy.copy(appended), copy.copy(loaded)):
        assert event == appended
        assert hash(event) == hash(appended)
        assert event.to_record() == record
        assert repr(event) == repr(appended)
    assert loaded.payload == payload
    assert copy.copy(loaded).payload == payload


def test_from_record_errors_name_the_seq_of_a_well_placed_record() -> None:
    chunk = {"type": "assistant/chunk", "seq": 9, "time": 1.0, "data": {"kind": "text"}}
    with pytest.raises(
        EventFormatError, match=r"^seq 9: assistant/chunk: Object missing required field `delta`"
    ):
        Event.from_record(chunk)
    unknown = {"type": "x/y", "seq": 3, "time": 1.0, "data": {}}
    with pytest.raises(UnknownEventTypeError, match=r"^seq 3: unknown event type 'x/y'"):
        Event.from_record(unknown)


def test_from_record_accepts_any_mapping_and_an_integer_time() -> None:
    record = MappingProxyType(
        {"type": "assistant/chunk", "seq": 0, "time": 3, "data": {"kind": "text", "delta": "a"}}
    )
    event = Event.from_record(record)
    assert event.time == 3.0 and isinstance(event.time, float)
    assert event.payload == AssistantChunk("text", "a")


def test_unknown_type_rejected_unless_ignorable() -> None:
    record = {"type": "demo/note", "seq": 3, "time": 1.0, "data": {"attempt": 2}}
    registry = EventRegistry()
    with pytest.raises(UnknownEventTypeError, match="unknown event type 'demo/note'"):
        Event.from_record(record, registry)

    registry.ignore("demo/note")
    opaque = Event.from_record(record, registry)
    assert opaque.payload is None
    assert opaque.to_record() == record

    registry.register(Retry)
    assert Event.from_record(record, registry).payload == Retry(2)


def test_ignorable_registration_outlives_its_class() -> None:
    registry = EventRegistry()
    unregister = registry.register(Retry, ignorable=True)
    record = Event.from_payload(Retry(1), seq=0, time=0.0).to_record()
    assert Event.from_record(record, registry).payload == Retry(1)

    unregister()
    unregister()
    assert registry.payload_class("demo/note") is None
    assert Event.from_record(record, registry).payload is None
    registry.register(Retry)
    assert registry.payload_class("demo/note") is Retry


def test_registering_a_type_twice_is_an_error() -> None:
    registry = EventRegistry()
    registry.register(Retry)
    with pytest.raises(EventTypeConflictError, match="'demo/note' is already registered by Retry"):
        registry.register(Retry)
    with pytest.raises(EventTypeConflictError, match="'turn/start' is already registered"):
        registry.register(TurnStart)
    with pytest.raises(EventTypeConflictError, match="cannot be ignorable"):
        registry.ignore("turn/start")


def test_register_rejects_what_is_not_a_payload_class() -> None:
    with pytest.raises(TypeError, match="not an EventPayload subclass"):
        EventRegistry().register(dict)  # type: ignore[arg-type]


def test_unregister_leaves_a_later_registration_alone() -> None:
    registry = EventRegistry()
    unregister = registry.register(Retry)
    unregister()

    @dataclass(frozen=True, slots=True)
    class Retry2(Retry):
        pass

    registry.register(Retry2)
    unregister()
    assert registry.payload_class("demo/note") is Retry2


def test_plugin_from_data_failures_become_format_errors() -> None:
    registry = EventRegistry()
    registry.register(Retry)
    with pytest.raises(EventFormatError, match="demo/note: KeyError"):
        Event.from_record({"type": "demo/note", "seq": 0, "time": 0.0, "data": {}}, registry)


def test_plugin_payloads_get_frozen_data() -> None:
    seen: list[Mapping[str, object]] = []

    @dataclass(frozen=True, slots=True)
    class Spy(Retry):
        @classmethod
        def from_data(cls, data: Mapping[str, object]) -> Self:
            seen.append(data)
            return cls(1)

    registry = EventRegistry()
    registry.register(Spy)
    Event.from_record(
        {"type": "demo/note", "seq": 0, "time": 0.0, "data": {"attempt": 1}}, registry
    )
    with pytest.raises(TypeError):
        seen[0]["attempt"] = 2  # type: ignore[index]
