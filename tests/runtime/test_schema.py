"""Schemas: every supported form decodes, or fails with a located message that hides secrets."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from msgspec import Meta

from tether.runtime.schema import (
    FieldError,
    Schema,
    SchemaError,
    Secret,
    check_model,
    decode,
    json_schema,
    to_data,
)


class Mode(enum.Enum):
    ASK = "ask"
    AUTO = "auto"


class Member(Schema, frozen=True):
    name: Annotated[str, Meta(description="who it is")]
    weight: Annotated[float, Meta(ge=0, le=10)] = 1.0


class Everything(Schema, frozen=True):
    count: Annotated[int, Meta(ge=1, description="how many")]
    ratio: Annotated[float, Meta(gt=0, le=1)] = 0.5
    flag: bool = False
    label: str | None = None
    where: Path | None = None
    mode: Mode = Mode.ASK
    kind: Literal["a", "b"] = "a"
    members: tuple[Member, ...] = ()
    extra: Mapping[str, Any] = {}


class Window(Schema, frozen=True):
    low: int = 0
    high: int = 10

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise FieldError(("low",), "must not exceed high")


class Frame(Schema, frozen=True):
    windows: tuple[Window, ...] = ()


def located(raw: object, schema: type[Schema] = Everything, root: str = "config") -> str:
    with pytest.raises(SchemaError) as caught:
        decode(schema, raw, root)
    return str(caught.value)


def test_decode_converts_each_form_and_fills_defaults() -> None:
    value = decode(
        Everything,
        {
            "count": 3,
            "ratio": 1,
            "label": "x",
            "where": "/tmp/data",
            "mode": "auto",
            "kind": "b",
            "members": [{"name": "m"}, {"name": "n", "weight": 2}],
            "extra": {"k": [1]},
        },
    )
    assert value.ratio == 1.0 and isinstance(value.ratio, float)
    assert value.where == Path("/tmp/data")
    assert value.mode is Mode.AUTO
    assert value.members == (Member("m"), Member("n", 2.0))
    assert value.extra == {"k": [1]}
    assert value.flag is False and value.label == "x" and value.kind == "b"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, "config.count: required"),
        ({"count": 1, "colour": "red"}, "config.colour: unknown field (the fields are: count,"),
        ({"count": "3 apples"}, "config.count: must be an integer, got '3 apples'"),
        ({"count": 2.5}, "config.count: must be an integer, got 2.5"),
        ({"count": True}, "config.count: must be an integer, got True"),
        ({"count": 1, "ratio": float("nan")}, "config.ratio: must be a finite number, got nan"),
        ({"count": 1, "ratio": 10**400}, "config.ratio: must be a finite number, got 1000"),
        ({"count": 0}, "config.count: must be at least 1, got 0"),
        ({"count": 1, "ratio": 0}, "config.ratio: must be greater than 0, got 0.0"),
        ({"count": 1, "ratio": 2}, "config.ratio: must be at most 1, got 2.0"),
        ({"count": 1, "flag": "yes"}, "config.flag: must be true or false, got 'yes'"),
        ({"count": 1, "flag": 2}, "config.flag: must be true or false, got 2"),
        ({"count": 1, "label": 5}, "config.label: must be a string, got 5"),
        ({"count": 1, "where": 5}, "config.where: must be a path (a string), got 5"),
        ({"count": 1, "mode": "never"}, "config.mode: must be one of 'ask', 'auto', got 'never'"),
        ({"count": 1, "mode": 1}, "config.mode: must be one of 'ask', 'auto', got 1"),
        ({"count": 1, "kind": "c"}, "config.kind: must be one of 'a', 'b', got 'c'"),
        ({"count": 1, "members": {"name": "m"}}, "config.members: must be a list, got a mapping"),
        ({"count": 1, "members": [{"name": "m"}, {}]}, "config.members.1.name: required"),
        ({"count": 1, "members": ["m"]}, "config.members.0: must be a mapping, got 'm'"),
        (
            {"count": 1, "members": [{"name": "m", "weight": 11}]},
            "config.members.0.weight: must be at most 10, got 11.0",
        ),
        ({"count": 1, "extra": {1: "x"}}, "config.extra: keys must be strings, got 1"),
        ({"count": 1, "extra": []}, "config.extra: must be a mapping, got a list"),
        ([1], "config: must be a mapping, got a list"),
    ],
)
def test_bad_input_is_refused_at_its_location(raw: object, message: str) -> None:
    assert located(raw).startswith(message)


def test_a_check_of_the_schema_itself_is_located_where_the_schema_is_nested() -> None:
    assert located({"low": 5, "high": 1}, Window) == "config.low: must not exceed high"
    nested = {"windows": [{}, {"low": 5, "high": 1}]}
    assert (
        located(nested, Frame, root="arguments") == "arguments.windows.1.low: must not exceed high"
    )
    assert decode(Window, {"low": 1, "high": 5}).high == 5


def test_an_instance_is_checked_again_when_decoded() -> None:
    unchecked = Everything(count=0)
    assert located(unchecked) == "config.count: must be at least 1, got 0"
    valid = Everything(count=2, where=Path("/x"))
    assert decode(Everything, valid) == valid


def test_to_data_round_trips_through_decode() -> None:
    value = decode(
        Everything,
        {"count": 2, "where": "/x", "mode": "auto", "members": [{"name": "m"}], "extra": {"a": 1}},
    )
    data = to_data(value)
    assert data == {
        "count": 2,
        "ratio": 0.5,
        "flag": False,
        "label": None,
        "where": "/x",
        "mode": "auto",
        "kind": "a",
        "members": [{"name": "m", "weight": 1.0}],
        "extra": {"a": 1},
    }
    assert decode(Everything, data) == value


def test_json_schema_describes_fields_bounds_and_defaults_with_references_inlined() -> None:
    schema = json_schema(Everything)
    assert schema["type"] == "object"
    assert schema["required"] == ["count"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["count"] == {"type": "integer", "minimum": 1, "description": "how many"}
    assert props["ratio"] == {
        "type": "number",
        "exclusiveMinimum": 0,
        "maximum": 1,
        "default": 0.5,
    }
    assert props["label"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    assert props["mode"] == {"enum": ["ask", "auto"], "default": "ask"}
    assert props["kind"] == {"enum": ["a", "b"], "default": "a"}
    assert props["members"]["items"]["required"] == ["name"]
    assert props["members"]["items"]["properties"]["name"]["description"] == "who it is"
    assert props["extra"] == {"type": "object", "default": {}}
    text = json.dumps(schema)
    assert "$ref" not in text and "$defs" not in text and "title" not in text


class Later(Schema, frozen=True):
    """One annotation names a schema of this module, one a class no code can see."""

    member: Member | None = None
    ghost: Unseen | None = None  # noqa: F821


def test_an_annotation_that_does_not_resolve_is_reported_and_the_rest_still_work() -> None:
    with pytest.raises(TypeError, match=r"Later: cannot resolve an annotation.*Unseen"):
        check_model(Later)
    with pytest.raises(TypeError, match=r"Later: cannot resolve an annotation.*Unseen"):
        check_model(Later)
    assert json_schema(Member)["required"] == ["name"]


def test_json_schema_is_built_once_and_every_caller_gets_its_own_copy() -> None:
    first = json_schema(Everything)
    first["properties"]["count"]["minimum"] = 99
    first["required"].append("ratio")
    second = json_schema(Everything)
    assert second["properties"]["count"]["minimum"] == 1
    assert second["required"] == ["count"]
    assert second is not json_schema(Everything)


class Opaque:
    """A type with no JSON form."""


def test_a_field_without_a_json_form_is_a_definition_error_naming_it() -> None:
    class Odd(Schema, frozen=True):
        fine: int = 0
        values: Opaque | None = None

    with pytest.raises(TypeError, match=r"Odd\.values: .*not supported"):
        check_model(Odd)
    with pytest.raises(TypeError, match="neither a Schema nor a pydantic model"):
        check_model(dict)
    check_model(Everything)


class Tree(Schema, frozen=True):
    children: tuple[Tree, ...] = ()


def test_a_schema_that_contains_itself_is_a_definition_error() -> None:
    with pytest.raises(TypeError, match="Tree contains itself"):
        check_model(Tree)
    assert decode(Tree, {"children": [{}]}) == Tree((Tree(),))


class Account(Schema, frozen=True):
    key: Secret | None = None
    teams: Mapping[str, Member] = {}


def test_a_secret_never_shows_and_nested_mappings_are_checked_per_key() -> None:
    account = decode(Account, {"key": "sk-hidden", "teams": {"core": {"name": "ada"}}})
    assert isinstance(account.key, Secret)
    assert account.key.get_secret_value() == "sk-hidden"
    assert account.key == Secret("sk-hidden")
    assert "sk-hidden" not in repr(account) and "sk-hidden" not in str(account.key)
    assert to_data(account) == {
        "key": "**********",
        "teams": {"core": {"name": "ada", "weight": 1.0}},
    }
    assert decode(Account, account) == account
    assert account.teams == {"core": Member("ada")}
    assert (
        located({"teams": {"fine": {"name": "x"}, "core": {"weight": 1}}}, Account)
        == "config.teams.core.name: required"
    )
    assert (
        located({"key": 12345}, Account) == "config.key: must be a string, got a value of type int"
    )
    schema = json_schema(Account)["properties"]
    assert schema["key"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert schema["teams"]["additionalProperties"]["required"] == ["name"]


def test_what_models_send_for_numbers_and_booleans_is_accepted() -> None:
    value = decode(Everything, {"count": "7", "ratio": "0.25", "flag": "True"})
    assert (value.count, value.ratio, value.flag) == (7, 0.25, True)
    assert decode(Everything, {"count": 3.0}).count == 3
    assert decode(Everything, {"count": 1, "flag": 1}).flag is True
    assert decode(Everything, {"count": 1, "flag": "false"}).flag is False


def test_literal_and_enum_values_match_by_type_too() -> None:
    class Numbered(Schema, frozen=True):
        one: Literal[1] = 1

    assert located({"one": True}, Numbered) == "config.one: must be one of 1, got True"
    assert located({"count": 1, "mode": 1}).startswith("config.mode: must be one of 'ask', 'auto'")


def test_a_long_string_in_the_wrong_place_is_never_quoted() -> None:
    key = "sk-live-0123456789abcdefghijklmnop"
    for raw in (
        {"count": key},
        {"count": 1, "members": key},
        {"count": 1, "extra": key},
        {"count": 1, "mode": key},
    ):
        message = located(raw)
        assert key not in message
        assert "a string of 34 characters" in message
    short = "sk-12345"
    assert short not in located({"key": ["x"], "teams": short}, Account)
