"""Frozen dataclasses that check their own fields: plugin configs and tool arguments.

A plugin's ``Config`` and a tool's argument model are each either a pydantic
model or a :class:`Checked` dataclass. Both validate raw input (a YAML
mapping, a model's JSON arguments) into a typed, immutable value. The
dataclass form exists for what every command starts (sessions, persistence,
the shell, the bash tools, the agent loop): importing pydantic and building
its validators takes longer than the rest of a command's start-up, while a
dataclass that checks itself costs next to nothing to define. Anything that
needs more than the forms below (custom validators, unions of models,
aliases) uses pydantic, which is imported when it is first used.

A schema declares its fields with annotations, defaults and :func:`meta`::

    @dataclass(frozen=True, slots=True)
    class Config(Checked):
        chunk_size: int = field(default=8, metadata=meta("characters per piece", ge=1))
        mode: Mode = Mode.ASK
        data_dir: Path | None = None

Supported annotations, and what each accepts:

* ``bool``: a bool, or the string ``"true"`` or ``"false"`` (any case);
* ``int``: an int (not a bool), a float without a fractional part, or a
  string of digits;
* ``float``: an int, a float or a numeric string, finite;
* ``str``; :class:`Secret` and ``Path``, from a string;
* an ``Enum`` (a member or a member's value) and ``Literal[...]``, matched
  with the value's type too (``True`` is not ``1``);
* ``X | None``; ``tuple[X, ...]`` (from a list or tuple);
* ``Mapping[str, X]`` (a mapping with string keys, kept read-only; ``X`` may
  be ``object``, which takes any value);
* a nested ``Checked`` (from a mapping).

Models send ``"5"`` for 5 and ``"true"`` for true often enough that refusing
them would cost a turn for nothing, hence the strings. A subclass that
checks more (a relation between fields) overrides ``__post_init__``, calls
``super(ThatClass, self).__post_init__()`` first (a slotted dataclass is a
new class, so the argument-less ``super()`` fails there), and raises
:class:`FieldError`. :func:`check_schema` tells whether a class is a usable
schema; plugins and tools are checked when they are defined.

Error messages name the field and what it must be. They quote a bad value
only when it is a number or a short string: a long string in the wrong
place may well be an API key.

Construction checks and converts every field (``__post_init__``), so an
instance that exists is valid. :func:`build` makes one from raw input,
rejecting unknown and missing fields; :func:`as_data` turns one back into
JSON-shaped data; :func:`json_schema` describes the schema as JSON Schema.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
import sys
import types
import typing
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar, Union

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = [
    "Checked",
    "FieldError",
    "Secret",
    "as_data",
    "build",
    "check_schema",
    "describe_validation_error",
    "is_pydantic_model",
    "json_schema",
    "meta",
]

C = TypeVar("C", bound="Checked")
Location = tuple[str | int, ...]


class FieldError(ValueError):
    """A field has a bad value; ``path`` leads to it from the root of the input."""

    def __init__(self, path: Location, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message

    def located(self, root: str = "config") -> str:
        """``config.a.0.b: message`` (``a.0.b: message`` when ``root`` is empty)."""
        parts = (root, *self.path) if root else self.path
        if not parts:
            return self.message
        return f"{_dotted(parts)}: {self.message}"


class Secret:
    """A string that stays out of every ``repr``, ``str`` and dump: an API key.

    Read it with :meth:`get_secret_value`, only where it is sent.
    """

    __slots__ = ("_value",)

    MASK = "**********"

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"a Secret holds a string, got {type(value).__name__}")
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({self.MASK!r})"

    def __str__(self) -> str:
        return self.MASK

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def meta(
    description: str | None = None,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
) -> dict[str, object]:
    """Field metadata: a description (for JSON Schema) and numeric bounds.

    ``ge``: at least; ``gt``: greater than; ``le``: at most.
    """
    given = {"description": description, "ge": ge, "gt": gt, "le": le}
    return {key: value for key, value in given.items() if value is not None}


class Checked:
    """Base class of self-checking frozen dataclasses (see the module docstring)."""

    __slots__ = ()

    # Weak: a class that a reload replaces is not kept alive by its hints.
    _hints: ClassVar[weakref.WeakKeyDictionary[type, dict[str, Any]]] = weakref.WeakKeyDictionary()

    def __post_init__(self) -> None:
        hints = _hints_of(type(self))
        for spec in _fields(type(self)):
            value = getattr(self, spec.name)
            checked = _convert(hints[spec.name], value, (spec.name,))
            _check_bounds(spec.metadata, checked, (spec.name,))
            if checked is not value:
                object.__setattr__(self, spec.name, checked)


def build(schema: type[C], raw: Mapping[str, object]) -> C:
    """Build ``schema`` from raw input: every key must be a field, every field without
    a default must be given.

    Raises:
        FieldError: the first problem found, located from the root.
    """
    specs = {spec.name: spec for spec in _fields(schema)}
    for key in raw:
        if key not in specs:
            known = ", ".join(specs) or "none"
            raise FieldError((str(key),), f"unknown field (the fields are: {known})")
    for name, spec in specs.items():
        if _required(spec) and name not in raw:
            raise FieldError((name,), "required")
    return schema(**raw)


def as_data(value: object) -> object:
    """A checked value as JSON-shaped data (a pydantic model is dumped in JSON mode)."""
    if isinstance(value, Checked):
        return {spec.name: as_data(getattr(value, spec.name)) for spec in _fields(type(value))}
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Secret):
        return Secret.MASK
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [as_data(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): as_data(item) for key, item in value.items()}
    return value


def json_schema(schema: type[Checked]) -> dict[str, Any]:
    """The JSON Schema of ``schema``: an object whose properties are its fields.

    Unknown properties are not allowed (:func:`build` rejects them).
    """
    hints = _hints_of(schema)
    properties: dict[str, Any] = {}
    required = []
    for spec in _fields(schema):
        prop = _annotation_schema(hints[spec.name])
        for key, word in (("ge", "minimum"), ("gt", "exclusiveMinimum"), ("le", "maximum")):
            if key in spec.metadata:
                prop[word] = spec.metadata[key]
        if "description" in spec.metadata:
            prop["description"] = spec.metadata["description"]
        if _required(spec):
            required.append(spec.name)
        elif spec.default is not dataclasses.MISSING:
            prop["default"] = as_data(spec.default)
        properties[spec.name] = prop
    result: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        result["required"] = required
    result["additionalProperties"] = False
    return result


def check_schema(schema: object) -> None:
    """Check that ``schema`` is a ``Checked`` dataclass whose every annotation is supported.

    A class that passed is remembered: mounting a plugin again checks nothing twice.

    Raises:
        TypeError: it is not; the message says why.
    """
    if not (isinstance(schema, type) and issubclass(schema, Checked)):
        raise TypeError(f"{schema!r} is not a Checked class")
    if schema in _CHECKED:
        return
    if not dataclasses.is_dataclass(schema):
        raise TypeError(f"{schema.__name__} derives from Checked but is not a dataclass")
    try:
        hints = _hints_of(schema)
    except NameError as exc:
        raise TypeError(f"{schema.__name__}: cannot resolve an annotation ({exc})") from None
    for spec in _fields(schema):
        try:
            _annotation_schema(hints[spec.name])
        except TypeError as exc:
            raise TypeError(f"{schema.__name__}.{spec.name}: {exc}") from None
    _CHECKED.add(schema)


_CHECKED: weakref.WeakSet[type] = weakref.WeakSet()
"""The classes :func:`check_schema` has passed (weakly: a reload replaces them)."""


def describe_validation_error(exc: ValidationError, root: str = "config") -> str:
    """Render pydantic errors as ``<root>.a.b: message`` phrases joined by ``; ``."""
    parts = []
    for error in exc.errors():
        location = ".".join(str(p) for p in (root, *error["loc"]) if p != "")
        parts.append(f"{location}: {error['msg']}")
    return "; ".join(parts)


def is_pydantic_model(cls: object) -> bool:
    """Whether ``cls`` is a pydantic model class, found without importing pydantic.

    A pydantic model exists only once pydantic has been imported.
    """
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(cls, type) and issubclass(cls, pydantic.BaseModel)


def _fields(schema: type) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(schema)


def _required(spec: dataclasses.Field[Any]) -> bool:
    return spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING


def _hints_of(schema: type) -> dict[str, Any]:
    hints = Checked._hints.get(schema)
    if hints is None:
        hints = typing.get_type_hints(schema)
        Checked._hints[schema] = hints
    return hints


def _convert(annotation: Any, value: object, path: Location) -> object:
    """``value`` checked against ``annotation``, converted where the forms allow."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        return _convert_union(typing.get_args(annotation), value, path)
    if origin is Literal:
        choices = typing.get_args(annotation)
        if not any(_same(choice, value) for choice in choices):
            raise FieldError(path, f"must be one of {_listed(choices)}, got {_shown(value)}")
        return value
    if origin is tuple:
        return _convert_tuple(typing.get_args(annotation), value, path)
    if origin is Mapping:
        return _convert_mapping(typing.get_args(annotation), value, path)
    if annotation is object:
        return value
    if annotation is type(None):
        if value is not None:
            raise FieldError(path, f"must be null, got {_shown(value)}")
        return value
    if annotation is bool:
        return _convert_bool(value, path)
    if annotation is int:
        return _convert_int(value, path)
    if annotation is float:
        return _convert_float(value, path)
    if annotation is str:
        if not isinstance(value, str):
            raise FieldError(path, f"must be a string, got {_shown(value)}")
        return value
    if annotation is Secret:
        if isinstance(value, Secret):
            return value
        if not isinstance(value, str):
            raise FieldError(path, f"must be a string, got {_kind(value)}")
        return Secret(value)
    if annotation is Path:
        if not isinstance(value, str | Path):
            raise FieldError(path, f"must be a path (a string), got {_shown(value)}")
        return Path(value)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _convert_enum(annotation, value, path)
    if isinstance(annotation, type) and issubclass(annotation, Checked):
        return _convert_nested(annotation, value, path)
    raise TypeError(f"field {_dotted(path)}: unsupported annotation {annotation!r}")


_DIGITS = re.compile(r"[+-]?[0-9]+")


def _convert_bool(value: object, path: Location) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise FieldError(path, f"must be true or false, got {_shown(value)}")


def _convert_int(value: object, path: Location) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value.strip())
    raise FieldError(path, f"must be an integer, got {_shown(value)}")


def _convert_float(value: object, path: Location) -> float:
    number: float | None = None
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            number = float(value.strip())
    except (ValueError, OverflowError):
        number = None
    if number is None or not math.isfinite(number):
        raise FieldError(path, f"must be a finite number, got {_shown(value)}")
    return number


def _convert_union(members: tuple[Any, ...], value: object, path: Location) -> object:
    if value is None and type(None) in members:
        return None
    problems = []
    for member in members:
        if member is type(None):
            continue
        try:
            return _convert(member, value, path)
        except FieldError as exc:
            problems.append(exc)
    if len(problems) == 1:
        raise problems[0]
    raise FieldError(path, "; or ".join(problem.message for problem in problems))


def _convert_tuple(items: tuple[Any, ...], value: object, path: Location) -> object:
    if len(items) != 2 or items[1] is not Ellipsis:
        raise TypeError(f"field {_dotted(path)}: use tuple[X, ...]")
    if not isinstance(value, list | tuple):
        raise FieldError(path, f"must be a list, got {_shown(value)}")
    return tuple(_convert(items[0], item, (*path, index)) for index, item in enumerate(value))


def _convert_mapping(types_: tuple[Any, ...], value: object, path: Location) -> object:
    if len(types_) != 2 or types_[0] is not str:
        raise TypeError(f"field {_dotted(path)}: use Mapping[str, X]")
    if not isinstance(value, Mapping):
        raise FieldError(path, f"must be a mapping, got {_shown(value)}")
    for key in value:
        if not isinstance(key, str):
            raise FieldError(path, f"keys must be strings, got {_shown(key)}")
    converted = {key: _convert(types_[1], item, (*path, key)) for key, item in value.items()}
    return MappingProxyType(converted)


def _convert_enum(annotation: type[enum.Enum], value: object, path: Location) -> object:
    if isinstance(value, annotation):
        return value
    for member in annotation:
        if _same(member.value, value):
            return member
    choices = [member.value for member in annotation]
    raise FieldError(path, f"must be one of {_listed(choices)}, got {_shown(value)}")


def _convert_nested(annotation: type[Checked], value: object, path: Location) -> object:
    if isinstance(value, annotation):
        return value
    if not isinstance(value, Mapping):
        raise FieldError(path, f"must be a mapping, got {_shown(value)}")
    try:
        return build(annotation, value)
    except FieldError as exc:
        raise FieldError((*path, *exc.path), exc.message) from None


def _check_bounds(metadata: Mapping[str, object], value: object, path: Location) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return
    minimum = metadata.get("ge")
    if isinstance(minimum, int | float) and value < minimum:
        raise FieldError(path, f"must be at least {minimum}, got {value!r}")
    floor = metadata.get("gt")
    if isinstance(floor, int | float) and value <= floor:
        raise FieldError(path, f"must be greater than {floor}, got {value!r}")
    maximum = metadata.get("le")
    if isinstance(maximum, int | float) and value > maximum:
        raise FieldError(path, f"must be at most {maximum}, got {value!r}")


def _annotation_schema(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        return {"anyOf": [_annotation_schema(member) for member in typing.get_args(annotation)]}
    if origin is Literal:
        return {"enum": list(typing.get_args(annotation))}
    if origin is tuple:
        return {"type": "array", "items": _annotation_schema(typing.get_args(annotation)[0])}
    if origin is Mapping:
        values = typing.get_args(annotation)[1]
        if values is object:
            return {"type": "object"}
        return {"type": "object", "additionalProperties": _annotation_schema(values)}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"enum": [member.value for member in annotation]}
    if isinstance(annotation, type) and issubclass(annotation, Checked):
        return json_schema(annotation)
    for kind, word in _JSON_TYPES:
        if annotation is kind:
            return {"type": word}
    raise TypeError(f"no JSON Schema for the annotation {annotation!r}")


_JSON_TYPES: tuple[tuple[object, str], ...] = (
    (type(None), "null"),
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (Secret, "string"),
    (Path, "string"),
)


def _same(choice: object, value: object) -> bool:
    return type(choice) is type(value) and choice == value


def _shown(value: object) -> str:
    """``value`` as an error message may show it: numbers and short strings only."""
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    if isinstance(value, str) and len(value) <= _SHOWN_CHARACTERS:
        return repr(value)
    return _kind(value)


_SHOWN_CHARACTERS = 16
"""Longer strings are not quoted in errors: API keys are longer."""


def _kind(value: object) -> str:
    if isinstance(value, str):
        return f"a string of {len(value)} characters"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a value of type {type(value).__name__}"


def _dotted(path: Location) -> str:
    return ".".join(str(part) for part in path)


def _listed(choices: Iterable[object]) -> str:
    return ", ".join(repr(choice) for choice in choices)
