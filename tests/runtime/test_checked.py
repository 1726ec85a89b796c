"""Checked dataclasses: every supported form converts or fails with a located message."""

from __future__ import annotations

import dataclasses
import enum
import gc
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from tether.runtime.checked import (
    Checked,
    FieldError,
    Secret,
    as_data,
    build,
    check_schema,
    json_schema,
    meta,
)


class Mode(enum.Enum):
    ASK = "ask"
    AUTO = "auto"


@dataclass(frozen=True, slots=True)
class Member(Checked):
    name: str = field(metadata=meta("who it is"))
    weight: float = field(default=1.0, metadata=meta(ge=0, le=10))


@dataclass(frozen=True, slots=True)
class Everything(Checked):
    count: int = field(metadata=meta("how many", ge=1))
    ratio: float = field(default=0.5, metadata=meta(gt=0, le=1))
    flag: bool = False
    label: str | None = None
    where: Path | None = None
    mode: Mode = Mode.ASK
    kind: Literal["a", "b"] = "a"
    members: tuple[Member, ...] = ()
    extra: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Window(Checked):
    low: int = 0
    high: int = 10

    def __post_init__(self) -> None:
        super(Window, self).__post_init__()
        if self.low > self.high:
            raise FieldError(("low",), "must not exceed high")


def located(raw: Mapping[str, object]) -> str:
    with pytest.raises(FieldError) as caught:
        build(Everything, raw)
    return caught.value.located()


def test_build_converts_each_form_and_fills_defaults() -> None:
    value = build(
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
        ({"count": 1, "flag": 1}, "config.flag: must be true or false, got 1"),
        ({"count": 1, "label": 5}, "config.label: must be a string, got 5"),
        ({"count": 1, "where": 5}, "config.where: must be a path (a string), got 5"),
        ({"count": 1, "mode": "never"}, "config.mode: must be one of 'ask', 'auto', got 'never'"),
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
    ],
)
def test_bad_input_is_refused_at_its_location(raw: Mapping[str, object], message: str) -> None:
    assert located(raw).startswith(message)


def test_construction_checks_as_build_does() -> None:
    with pytest.raises(FieldError, match="must be at least 1"):
        Everything(count=0)
    with pytest.raises(FieldError, match="must not exceed high"):
        Window(low=5, high=1)
    assert Window(low=1, high=5).high == 5


def test_as_data_round_trips_through_build() -> None:
    value = build(
        Everything,
        {"count": 2, "where": "/x", "mode": "auto", "members": [{"name": "m"}], "extra": {"a": 1}},
    )
    data = as_data(value)
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
    assert isinstance(data, dict)
    assert build(Everything, data) == value


def test_json_schema_describes_fields_bounds_and_defaults() -> None:
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
    assert props["extra"] == {"type": "object"}


def test_an_unsupported_annotation_is_a_definition_error() -> None:
    @dataclass(frozen=True, slots=True)
    class Odd(Checked):
        values: list[int]

    with pytest.raises(TypeError, match="unsupported annotation"):
        Odd(values=[1])
    with pytest.raises(TypeError, match="no JSON Schema"):
        json_schema(Odd)


@dataclass(frozen=True)
class Account(Checked):
    key: Secret | None = None
    teams: Mapping[str, Member] = field(default_factory=dict)


def test_a_secret_never_shows_and_nested_mappings_are_checked_per_key() -> None:
    account = build(Account, {"key": "sk-hidden", "teams": {"core": {"name": "ada"}}})
    assert isinstance(account.key, Secret)
    assert account.key.get_secret_value() == "sk-hidden"
    assert account.key == Secret("sk-hidden")
    assert "sk-hidden" not in repr(account) and "sk-hidden" not in str(account.key)
    assert as_data(account) == {
        "key": "**********",
        "teams": {"core": {"name": "ada", "weight": 1.0}},
    }
    assert account.teams == {"core": Member("ada")}
    with pytest.raises(FieldError) as caught:
        build(Account, {"teams": {"core": {"weight": 1}}})
    assert caught.value.located() == "config.teams.core.name: required"
    with pytest.raises(FieldError) as caught:
        build(Account, {"key": 12345})
    assert caught.value.located() == "config.key: must be a string, got a value of type int"
    schema = json_schema(Account)["properties"]
    assert schema["key"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert schema["teams"]["additionalProperties"]["required"] == ["name"]


def test_what_models_send_for_numbers_and_booleans_is_accepted() -> None:
    value = build(Everything, {"count": "7", "ratio": "0.25", "flag": "True"})
    assert (value.count, value.ratio, value.flag) == (7, 0.25, True)
    assert build(Everything, {"count": 3.0}).count == 3


def test_literal_and_enum_values_match_by_type_too() -> None:
    @dataclass(frozen=True)
    class Numbered(Checked):
        one: Literal[1] = 1

    with pytest.raises(FieldError, match="must be one of 1, got True"):
        Numbered(one=True)  # type: ignore[arg-type]
    with pytest.raises(FieldError, match="must be one of 'ask', 'auto'"):
        build(Everything, {"count": 1, "mode": 1})


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


def test_mappings_are_read_only_and_hints_do_not_keep_classes_alive() -> None:
    value = build(Everything, {"count": 1, "extra": {"a": 1}})
    with pytest.raises(TypeError):
        value.extra["a"] = 2  # type: ignore[index]
    assert value.extra == {"a": 1}

    @dataclass(frozen=True)
    class Passing(Checked):
        n: int = 0

    Passing()
    reference = weakref.ref(Passing)
    del Passing
    gc.collect()
    assert reference() is None


def test_check_schema_refuses_what_construction_could_not_handle() -> None:
    @dataclass(frozen=True)
    class Listy(Checked):
        values: list[int] = dataclasses.field(default_factory=list)

    class Undecorated(Checked):
        n: int = 0

    check_schema(Everything)
    with pytest.raises(TypeError, match=r"Listy\.values: no JSON Schema"):
        check_schema(Listy)
    with pytest.raises(TypeError, match="not a dataclass"):
        check_schema(Undecorated)
