"""Stored records decode once, into the class registered for their type."""

from __future__ import annotations

import math
from typing import ClassVar

import pytest

from tether.session import (
    Event,
    EventFormatError,
    EventRegistry,
    EventStruct,
    UnknownEventTypeError,
)
from tether.session.stored import StoredEvent, decode_event_lines


class Note(EventStruct, frozen=True):
    """A plugin's event type, declared the way the built-in ones are."""

    type: ClassVar[str] = "demo/struct-note"

    text: str
    level: int = 0


def stored(*lines: str) -> list[StoredEvent]:
    return decode_event_lines("".join(line + "\n" for line in lines))


def test_a_plugin_struct_type_decodes_from_its_stored_fields() -> None:
    registry = EventRegistry()
    registry.register(Note)
    [event] = registry.decode_stored(
        stored('{"type":"demo/struct-note","seq":0,"time":1.0,"data":{"text":"hi"}}')
    )
    assert event.payload == Note("hi")
    assert event.data == {"text": "hi", "level": 0}
    assert event.to_record() == {
        "type": "demo/struct-note",
        "seq": 0,
        "time": 1.0,
        "data": {"text": "hi", "level": 0},
    }


def test_stored_data_of_the_wrong_shape_names_the_seq_type_and_field() -> None:
    registry = EventRegistry()
    registry.register(Note)
    bad = stored(
        '{"type":"turn/start","seq":0,"time":1.0,"data":{"turn":1}}',
        '{"type":"demo/struct-note","seq":1,"time":1.0,"data":{"text":3}}',
    )
    with pytest.raises(EventFormatError, match=r"^seq 1: demo/struct-note: .*`\$\.text`"):
        registry.decode_stored(bad)


def test_ignorable_types_without_a_class_load_opaque_and_unknown_ones_fail() -> None:
    registry = EventRegistry()
    registry.ignore("demo/gone")
    records = stored('{"type":"demo/gone","seq":0,"time":1.0,"data":{"a":[1]}}')
    [event] = registry.decode_stored(records)
    assert (event.payload, event.data) == (None, {"a": (1,)})
    with pytest.raises(UnknownEventTypeError, match=r"^seq 0: unknown event type 'demo/gone'"):
        EventRegistry().decode_stored(records)


def test_data_that_is_not_an_object_is_refused() -> None:
    records = stored('{"type":"turn/start","seq":0,"time":1.0,"data":[1]}')
    with pytest.raises(EventFormatError, match=r"^seq 0: turn/start: Expected `object`"):
        EventRegistry().decode_stored(records)


class _Scored(EventStruct, frozen=True):
    type: ClassVar[str] = "plugin/scored"
    score: float
    extra: dict[str, object]


@pytest.mark.parametrize(
    ("payload", "refused"),
    [
        (_Scored(math.nan, {}), "nan is not a JSON number"),
        (_Scored(1.0, {"w": math.inf}), "inf is not a JSON number"),
        (_Scored(1.0, {1: "a", "1": "b"}), "object keys must be str"),
        (_Scored(1.0, {"b": b"\x00\xff"}), "bytes is not JSON data"),
    ],
)
def test_a_plugin_struct_that_json_cannot_hold_is_refused_at_append(
    payload: _Scored, refused: str
) -> None:
    # Encoding first would have stored NaN as null (a log that never loads),
    # one of two colliding keys, or bytes as base64 text.
    with pytest.raises(EventFormatError, match=refused):
        Event.from_payload(payload, seq=0, time=1.0)
