"""What a server may ask (a flat form), what a person types, and what is logged of it."""

from __future__ import annotations

import pytest

from tether.agent.elicitation import (
    ElicitationSchemaError,
    check_content,
    masked_content,
    parse_value,
    read_schema,
)
from tether.session.elicitation import ElicitationAnswered, ElicitationAsked
from tether.session.errors import EventFormatError

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "minLength": 2},
        "size": {"type": "integer", "minimum": 1, "maximum": 5},
        "ratio": {"type": "number"},
        "ok": {"type": "boolean", "default": False},
        "colour": {
            "type": "string",
            "oneOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}],
        },
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}},
        "password": {"type": "string"},
    },
    "required": ["name", "size"],
}


def test_a_flat_schema_reads_as_its_fields() -> None:
    fields = {f.name: f for f in read_schema(SCHEMA)}
    assert list(fields) == ["name", "size", "ratio", "ok", "colour", "tags", "password"]
    assert fields["name"].required and fields["name"].label == "Name"
    assert fields["colour"].options == ("r", "g")
    assert fields["colour"].option_titles == ("Red", "Green")
    assert fields["tags"].kind == "array" and fields["tags"].options == ("a", "b", "c")
    assert fields["ok"].default is False
    assert fields["password"].secret and not fields["name"].secret


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        ({"type": "array"}, "not an object schema"),
        ({"type": "object", "properties": {"x": {"type": "object"}}}, "'x': type 'object'"),
        ({"type": "object", "properties": {"x": {"type": "array"}}}, "'x': a list must be"),
        ({"type": "object", "properties": {"x": 3}}, "'x': its schema is not an object"),
    ],
)
def test_a_schema_that_is_not_flat_is_refused_saying_why(schema: object, said: str) -> None:
    with pytest.raises(ElicitationSchemaError, match=said):
        read_schema(schema)


def test_typed_values_are_parsed_by_their_field_and_held_to_its_limits() -> None:
    fields = {f.name: f for f in read_schema(SCHEMA)}
    assert parse_value(fields["size"], " 3 ") == 3
    assert parse_value(fields["ratio"], "0.5") == 0.5
    assert parse_value(fields["ok"], "Yes") is True
    assert parse_value(fields["colour"], "green") == "g"
    assert parse_value(fields["colour"], "1") == "r"
    assert parse_value(fields["tags"], "a, 3") == ["a", "c"]
    for name, text, said in [
        ("size", "9", "at most 5"),
        ("size", "two", "a whole number"),
        ("ratio", "nan", "a finite number"),
        ("ok", "maybe", "yes or no"),
        ("colour", "blue", "one of Red, Green"),
        ("name", "x", "at least 2"),
    ]:
        with pytest.raises(ValueError, match=said):
            parse_value(fields[name], text)


def test_content_is_checked_against_the_form() -> None:
    fields = read_schema(SCHEMA)
    assert check_content(fields, {"name": "ab", "size": 2, "tags": ["b"]}) == {
        "name": "ab",
        "size": 2,
        "tags": ["b"],
    }
    for content, said in [
        ({"size": 2}, "'Name' is required"),
        ({"name": "ab", "size": True}, "a number is expected"),
        ({"name": "ab", "size": 2, "extra": 1}, "'extra' is not a field"),
        ({"name": "ab", "size": 2, "colour": "x"}, "one of r, g"),
        ({"name": "ab", "size": 2.5}, "a whole number"),
    ]:
        with pytest.raises(ValueError, match=said):
            check_content(fields, content)


def test_what_may_be_a_secret_is_masked_in_the_log() -> None:
    fields = read_schema(SCHEMA)
    content = {"name": "key sk-abcdefghijklmnopqrstu", "password": "hunter22", "size": 2}
    assert masked_content(fields, content) == {"name": "key ***", "password": "***", "size": 2}


def test_the_stored_events_check_their_fields() -> None:
    ElicitationAsked(id="e1", server="s", mode="url", message="m", url="https://x")
    ElicitationAnswered(id="e1", action="decline", reason="no one here can answer it")
    with pytest.raises(EventFormatError):
        ElicitationAsked(id="e1", server="s", mode="sms", message="m")  # type: ignore[arg-type]
    with pytest.raises(EventFormatError):
        ElicitationAnswered(id="e1", action="maybe")  # type: ignore[arg-type]
