"""Declared shapes for what crosses a boundary as loose data: plugin configs and tool arguments.

A plugin's ``Config`` and a tool's argument model are each either a
:class:`Schema` (a frozen msgspec ``Struct``) or a pydantic model. Both turn
raw input (a YAML mapping, a model's JSON arguments) into a typed, immutable
value through :func:`decode`, describe themselves as JSON Schema through
:func:`json_schema`, and go back to JSON-shaped data through :func:`to_data`.
pydantic is imported only where a pydantic model is involved.

A schema declares its fields with annotations and defaults; bounds and
descriptions go in :data:`msgspec.Meta`::

    class Config(Schema):
        chunk_size: Annotated[int, Meta(ge=1, description="characters per piece")] = 8
        mode: Mode = Mode.ASK
        data_dir: Path | None = None

Any type msgspec converts is allowed (``int``, ``float``, ``bool``, ``str``,
enums, ``Literal``, unions with ``None``, ``tuple``, ``list``, ``dict`` and
``Mapping``, nested schemas), plus :class:`Secret` and ``Path`` from a
string. Decoding is lax about what models send: ``"5"`` for 5, ``5.0`` for
5, ``"true"`` (any case) or ``1`` for true. Unknown fields are refused, and a
missing field without a default is refused. A schema that checks more (a
relation between fields) does it in ``__post_init__``, which runs on every
construction and decode, and raises :class:`FieldError` to name the field.

Construction in code does not check types (mypy does); :func:`decode`
checks everything, and also takes an instance, which it checks again.

Error messages name the field and what it must be: ``config.max_steps: must
be at least 1, got 0``. They quote a bad value only when it is a number or a
short string: a long string in the wrong place may well be an API key, and a
value meant for a :class:`Secret` is never quoted.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
import sys
import typing
import weakref
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import CodeType
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import msgspec.inspect as mi
import msgspec.structs

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = [
    "FieldError",
    "Schema",
    "SchemaError",
    "Secret",
    "check_model",
    "decode",
    "is_model",
    "json_schema",
    "shared_json_schema",
    "to_data",
]

S = TypeVar("S")
Location = tuple[str | int, ...]


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


class Schema(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Base class of configs and tool arguments (see the module docstring)."""


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


class SchemaError(ValueError):
    """Input that does not decode; the message locates each problem from its root."""


def is_model(cls: object) -> bool:
    """Whether ``cls`` can be a config or argument model: a :class:`Schema` or a
    pydantic model class (found without importing pydantic)."""
    if isinstance(cls, type) and issubclass(cls, Schema):
        return True
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(cls, type) and issubclass(cls, pydantic.BaseModel)


def check_model(model: object) -> None:
    """Check that ``model`` is a usable model, with a JSON Schema for every field.

    The schema built to check it is kept (see :func:`json_schema`): mounting
    a plugin again, or asking for the schema of a checked model, builds
    nothing twice.

    Raises:
        TypeError: it is not; the message says why.
    """
    if not is_model(model):
        raise TypeError(f"{model!r} is neither a Schema nor a pydantic model class")
    assert isinstance(model, type)
    _schema_of(model)


def decode(model: type[S], raw: object, root: str = "config") -> S:
    """``raw`` (JSON-shaped data, or an instance of ``model``) checked into a ``model``.

    Raises:
        SchemaError: it does not validate; the message is located from ``root``
            (``config.a.0.b: must be an integer, got 'x'``).
    """
    if issubclass(model, Schema):
        if isinstance(raw, model):
            raw = _builtins(raw, reveal=True)
        try:
            result: S = msgspec.convert(raw, model, strict=False, dec_hook=_decode_custom)
        except msgspec.ValidationError as exc:
            raise SchemaError(_locate(exc, model, raw).located(root)) from None
        return result
    from pydantic import ValidationError

    try:
        return model.model_validate(raw)  # type: ignore[attr-defined, no-any-return]
    except ValidationError as exc:
        raise SchemaError(_describe_pydantic(exc, root)) from None


def to_data(value: object) -> object:
    """A decoded value as JSON-shaped data, every :class:`Secret` masked.

    A pydantic model is dumped in JSON mode (by alias).
    """
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", by_alias=True)
    return _builtins(value, reveal=False)


def json_schema(model: type[Any]) -> dict[str, Any]:
    """The JSON Schema of ``model``, every reference inlined, without titles; a fresh copy.

    A schema's unknown properties are not allowed (:func:`decode` refuses
    them). Titles are left out: they repeat the class and property names in
    every tool definition the model reads (a title a pydantic author set
    explicitly is kept).

    Built once per class and kept while the class lives (building one reads
    and evaluates every annotation, which start-up pays for each plugin
    config and tool); each call hands out its own copy.

    Raises:
        TypeError: ``model`` has a field no JSON Schema can describe, or an
            annotation that does not resolve.
    """
    copied: dict[str, Any] = copy_json(_schema_of(model))
    return copied


def shared_json_schema(model: type[Any]) -> Mapping[str, Any]:
    """The JSON Schema of ``model`` as :func:`json_schema` builds it, but the one kept
    for the class rather than a copy: read it, never change it.

    Raises:
        TypeError: as :func:`json_schema`.
    """
    return _schema_of(model)


def copy_json(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, scalars).

    Several times faster than :func:`copy.deepcopy`, which handles any
    object graph.
    """
    if isinstance(value, dict):
        return {key: copy_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_json(item) for item in value]
    return value


_SCHEMAS: weakref.WeakKeyDictionary[type, dict[str, Any]] = weakref.WeakKeyDictionary()
"""The JSON Schema of each model built so far (weakly: a reload replaces the classes)."""


def _schema_of(model: type[Any]) -> dict[str, Any]:
    """The kept JSON Schema of ``model``, built on first use; handed out uncopied only
    read-only (:func:`shared_json_schema`)."""
    try:
        return _SCHEMAS[model]
    except KeyError:
        pass
    schema = _SCHEMAS[model] = _build_schema(model)
    return schema


def _build_schema(model: type[Any]) -> dict[str, Any]:
    if not (isinstance(model, type) and issubclass(model, Schema)):
        return _pydantic_schema(model)
    _resolve_annotations(model)
    try:
        document = msgspec.json.schema(model, schema_hook=_schema_custom)
    except TypeError as exc:
        raise TypeError(f"{_culprit(model)}: {_first_line(exc)}") from None
    except NameError as exc:
        raise TypeError(f"{model.__name__}: cannot resolve an annotation ({exc})") from None
    try:
        inlined = _inlined(document, document.get("$defs", {}))
    except TypeError as exc:
        raise TypeError(f"{model.__name__}: {exc}") from None
    assert isinstance(inlined, dict)
    return inlined


def _resolve_annotations(model: type[Schema]) -> None:
    """Evaluate the postponed (string) annotations of ``model`` and of the schemas
    its fields hold, in place, as msgspec would evaluate them.

    msgspec evaluates a class's string annotations each time it inspects the
    class (a JSON Schema, a decoder), compiling every one anew: measured on
    ``tether run``, that was most of what building the schemas of the
    plugin configs and tools cost at start-up. Evaluated once here, with
    each distinct annotation compiled once, they cost msgspec nothing after.
    An annotation that does not evaluate here (a name only known to type
    checkers, a class local to a function) is left as it is, for msgspec to
    evaluate or to report as before.
    """
    pending: list[type] = [model]
    while pending:
        cls = pending.pop()
        for klass in cls.__mro__:
            if klass is Schema or not issubclass(klass, Schema) or klass in _RESOLVED:
                continue
            _RESOLVED.add(klass)
            own = inspect.get_annotations(klass)
            namespace = dict(vars(klass))
            module = getattr(sys.modules.get(klass.__module__), "__dict__", {})
            resolved = {name: _evaluated(value, namespace, module) for name, value in own.items()}
            if resolved != own:
                klass.__annotations__ = resolved
            for value in resolved.values():
                pending.extend(_schemas_in(value))


def _evaluated(annotation: object, namespace: dict[str, Any], module: dict[str, Any]) -> object:
    """A string annotation evaluated in the namespaces msgspec evaluates it in (the
    module's names first, then the class's); anything else, or one that does not
    evaluate, as it is."""
    if not isinstance(annotation, str):
        return annotation
    try:
        return eval(_compiled(annotation), namespace, module)
    except Exception:  # left for msgspec to evaluate, which names the failure
        return annotation


_RESOLVED: weakref.WeakSet[type] = weakref.WeakSet()
"""The schema classes whose annotations :func:`_resolve_annotations` has evaluated."""


@functools.cache
def _compiled(annotation: str) -> CodeType:
    return compile(annotation, "<annotation>", "eval")


def _schemas_in(annotation: object) -> Iterator[type]:
    """The schema classes an evaluated annotation names, at any depth."""
    if isinstance(annotation, type) and issubclass(annotation, Schema):
        yield annotation
    for argument in typing.get_args(annotation):
        yield from _schemas_in(argument)


# --- custom types -----------------------------------------------------------


def _decode_custom(kind: type, value: object) -> object:
    if kind is Secret:
        if isinstance(value, Secret):
            return value
        if not isinstance(value, str):
            raise FieldError((), f"must be a string, got {_kind(value)}")
        return Secret(value)
    if kind is Path:
        if not isinstance(value, str | Path):
            raise FieldError((), f"must be a path (a string), got {_shown(value)}")
        return Path(value)
    raise NotImplementedError(f"no decoding for {kind!r}")


def _schema_custom(kind: type) -> dict[str, Any]:
    if kind is Secret or kind is Path:
        return {"type": "string"}
    raise NotImplementedError(f"no JSON Schema for {kind!r}")


def _builtins(value: object, *, reveal: bool) -> object:
    def encode(item: object) -> object:
        if isinstance(item, Secret):
            return item.get_secret_value() if reveal else Secret.MASK
        if isinstance(item, Path):
            return str(item)
        raise NotImplementedError(f"no data form for {type(item).__name__}")

    # Through JSON text, so what comes back is JSON's own shapes (lists, not tuples).
    return msgspec.json.decode(msgspec.json.encode(value, enc_hook=encode))


def _inlined(node: object, definitions: Mapping[str, Any], inside: tuple[str, ...] = ()) -> object:
    """``node`` with every ``$ref`` replaced by its definition (``inside``: those
    being inlined around it) and the titles left out.

    Raises:
        TypeError: a definition refers to itself, which no inlined schema can show.
    """
    if isinstance(node, list):
        return [_inlined(item, definitions, inside) for item in node]
    if not isinstance(node, dict):
        return node
    result: dict[str, object] = {}
    reference = node.get("$ref")
    if isinstance(reference, str):
        name = reference.rsplit("/", 1)[-1]
        if name in inside:
            raise TypeError(f"{name} contains itself: a tool's JSON Schema cannot describe it")
        target = _inlined(definitions[name], definitions, (*inside, name))
        assert isinstance(target, dict)
        result.update(target)
        # A reference's siblings (a field's default, its description) stay.
        node = {key: item for key, item in node.items() if key != "$ref"}
    for key, item in node.items():
        if key in ("title", "$defs"):
            continue
        if key == "properties":
            result[key] = {name: _inlined(prop, definitions, inside) for name, prop in item.items()}
        else:
            result[key] = _inlined(item, definitions, inside)
    if result.get("required") == []:
        del result["required"]
    if result.get("additionalProperties") == {}:
        del result["additionalProperties"]
    return result


# --- error messages -----------------------------------------------------------

_AT = re.compile(r"^(?P<message>.*?)(?: - at (?P<key>`key` in )?`\$(?P<path>[^`]*)`)?$", re.DOTALL)
_STEP = re.compile(r"\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)|\[(?P<index>\d+|\.\.\.)\]")
_MISSING = re.compile(r"Object missing required field `(?P<name>[^`]+)`")
_UNKNOWN = re.compile(r"Object contains unknown field `(?P<name>[^`]+)`")


def _locate(exc: msgspec.ValidationError, model: type, raw: object) -> FieldError:
    """msgspec's error, phrased as tether's: the field's path and what it must be."""
    match = _AT.match(str(exc))
    assert match is not None  # the pattern matches any text
    steps = [m for m in _STEP.finditer(match["path"] or "")]
    path: list[str | int] = []
    kind = _TYPE_INFO.get(model)
    if kind is None:
        kind = _TYPE_INFO[model] = mi.type_info(model)
    value = raw
    for step in steps:
        kind = _unwrap(kind, value)
        if step["name"] is not None:
            path.append(step["name"])
            kind = _field_type(kind, step["name"])
            value = value.get(step["name"]) if isinstance(value, Mapping) else None
        elif step["index"] == "...":
            key = _failing_key(kind, value)
            path.append(key)
            kind = kind.value_type if isinstance(kind, mi.DictType) else mi.AnyType()
            value = value.get(key) if isinstance(value, Mapping) else None
        else:
            index = int(step["index"])
            path.append(index)
            kind = getattr(kind, "item_type", mi.AnyType())
            value = value[index] if isinstance(value, list | tuple) else None
    cause = exc.__cause__
    if isinstance(cause, FieldError):
        return FieldError((*path, *cause.path), cause.message)
    if isinstance(cause, TypeError | ValueError):
        return FieldError(tuple(path), str(cause))
    message = match["message"]
    if match["key"]:
        keys = value if isinstance(value, Mapping) else ()
        bad = next((key for key in keys if not isinstance(key, str)), None)
        return FieldError(tuple(path), f"keys must be strings, got {_shown(bad)}")
    missing = _MISSING.fullmatch(message)
    if missing:
        return FieldError((*path, missing["name"]), "required")
    unknown = _UNKNOWN.fullmatch(message)
    if unknown:
        fields = [spec.encode_name for spec in getattr(_unwrap(kind, value), "fields", ())]
        known = ", ".join(fields) or "none"
        return FieldError((*path, unknown["name"]), f"unknown field (the fields are: {known})")
    return FieldError(tuple(path), _expected(kind, value))


_TYPE_INFO: weakref.WeakKeyDictionary[type, mi.Type] = weakref.WeakKeyDictionary()
"""Each model's msgspec type description, built at its first error (weakly held)."""


def _bare(kind: mi.Type) -> mi.Type:
    """``kind`` without the ``Meta`` annotations around it (its bounds stay)."""
    while isinstance(kind, mi.Metadata):
        kind = kind.type
    return kind


def _unwrap(kind: mi.Type, value: object) -> mi.Type:
    """The member of a union that a step into ``value`` goes through."""
    kind = _bare(kind)
    if not isinstance(kind, mi.UnionType):
        return kind
    members = [_bare(member) for member in kind.types if not isinstance(member, mi.NoneType)]
    for member in members:
        if isinstance(member, mi.StructType | mi.DictType) and isinstance(value, Mapping):
            return member
        if isinstance(member, mi.ListType | mi.VarTupleType) and isinstance(value, list | tuple):
            return member
    return members[0] if len(members) == 1 else kind


def _field_type(kind: mi.Type, name: str) -> mi.Type:
    for spec in getattr(kind, "fields", ()):
        if spec.encode_name == name:
            return spec.type  # type: ignore[no-any-return]
    return mi.AnyType()


def _failing_key(kind: mi.Type, value: object) -> str:
    """The first key of the mapping ``value`` whose value does not convert."""
    if not isinstance(value, Mapping):
        return "..."
    target = _python_type(kind.value_type) if isinstance(kind, mi.DictType) else Any
    for key, item in value.items():
        try:
            msgspec.convert(item, target, strict=False, dec_hook=_decode_custom)
        except (msgspec.ValidationError, TypeError, ValueError):
            return str(key)
    return "..."


def _python_type(kind: mi.Type) -> Any:
    if isinstance(kind, mi.StructType):
        return kind.cls
    return Any


def _expected(kind: mi.Type, value: object) -> str:
    """``must be ..., got ...`` for ``value``, which ``kind`` refused."""
    kind = _bare(kind)
    members = kind.types if isinstance(kind, mi.UnionType) else (kind,)
    members = tuple(_bare(member) for member in members if not isinstance(member, mi.NoneType))
    for member in members:
        bound = _bound_problem(member, value)
        if bound is not None:
            return bound
    nouns = [_noun(member) for member in members]
    return f"must be {' or '.join(dict.fromkeys(nouns))}, got {_shown(value)}"


def _bound_problem(kind: mi.Type, value: object) -> str | None:
    """What a number of the right type breaks: a bound, or finiteness."""
    if not isinstance(kind, mi.IntType | mi.FloatType):
        return None
    target = int if isinstance(kind, mi.IntType) else float
    try:
        number = msgspec.convert(value, target, strict=False)
    except (msgspec.ValidationError, OverflowError):
        if target is float and isinstance(value, int) and not isinstance(value, bool):
            return f"must be a finite number, got {_shown(value)}"
        return None
    if isinstance(number, float) and not math.isfinite(number):
        return f"must be a finite number, got {number!r}"
    if kind.ge is not None and number < kind.ge:
        return f"must be at least {_number(kind.ge)}, got {number!r}"
    if kind.gt is not None and number <= kind.gt:
        return f"must be greater than {_number(kind.gt)}, got {number!r}"
    if kind.le is not None and number > kind.le:
        return f"must be at most {_number(kind.le)}, got {number!r}"
    if kind.lt is not None and number >= kind.lt:
        return f"must be less than {_number(kind.lt)}, got {number!r}"
    return None


def _noun(kind: mi.Type) -> str:
    if isinstance(kind, mi.BoolType):
        return "true or false"
    if isinstance(kind, mi.IntType):
        return "an integer"
    if isinstance(kind, mi.FloatType):
        return "a finite number"
    if isinstance(kind, mi.StrType):
        return "a string"
    if isinstance(kind, mi.EnumType):
        return f"one of {_listed(member.value for member in kind.cls)}"
    if isinstance(kind, mi.LiteralType):
        return f"one of {_listed(kind.values)}"
    if isinstance(kind, mi.ListType | mi.VarTupleType | mi.TupleType | mi.SetType):
        return "a list"
    if isinstance(kind, mi.DictType | mi.StructType):
        return "a mapping"
    if isinstance(kind, mi.CustomType) and kind.cls is Path:
        return "a path (a string)"
    return f"a value of type {getattr(kind, 'cls', kind)!r}"


def _number(limit: float) -> str:
    return str(int(limit)) if float(limit).is_integer() else str(limit)


def _shown(value: object) -> str:
    """``value`` as an error message may show it: numbers and short strings only."""
    if value is None or isinstance(value, bool | int | float):
        text = repr(value)
        return text if len(text) <= _SHOWN_CHARACTERS else f"{text[:_SHOWN_CHARACTERS]}..."
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


def _dotted(path: Iterable[object]) -> str:
    return ".".join(str(part) for part in path)


def _listed(choices: Iterable[object]) -> str:
    return ", ".join(repr(choice) for choice in choices)


def _culprit(model: type[Schema]) -> str:
    """``Model.field``: the first field of ``model`` without a JSON Schema."""
    for spec in msgspec.structs.fields(model):
        try:
            msgspec.json.schema(spec.type, schema_hook=_schema_custom)
        except (TypeError, NameError):
            return f"{model.__name__}.{spec.name}"
    return model.__name__


def _first_line(exc: Exception) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


# --- pydantic models ------------------------------------------------------------


def _describe_pydantic(exc: ValidationError, root: str) -> str:
    """pydantic's errors as ``<root>.a.b: message`` phrases joined by ``; ``."""
    parts = []
    for error in exc.errors():
        location = ".".join(str(p) for p in (root, *error["loc"]) if p != "")
        parts.append(f"{location}: {error['msg']}")
    return "; ".join(parts)


def _pydantic_schema(model: type[Any]) -> dict[str, Any]:
    from pydantic.json_schema import GenerateJsonSchema

    class Untitled(GenerateJsonSchema):
        """Leaves out the titles pydantic derives from field names; an author's stay."""

        def field_title_should_be_set(self, schema: object) -> bool:
            return False

    schema: dict[str, Any] = model.model_json_schema(schema_generator=Untitled)
    # The class name says nothing the tool's own name and description do not.
    schema.pop("title", None)
    return schema
