"""Deeply immutable JSON-shaped data, the form event data takes once stored.

`freeze_mapping` copies JSON-shaped data into a form nothing can mutate: objects become
read-only mappings over a private dict, arrays become tuples. `thaw` turns it
back into plain dicts and lists for serialization. The copy is what makes the
guarantee: a read-only view over a dict the caller still holds would change
when the caller's dict does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import cast

__all__ = ["FrozenMapping", "NotJsonError", "freeze_mapping", "thaw"]

FrozenMapping = MappingProxyType[str, object]
"""A read-only JSON object whose values are themselves frozen."""

_SCALARS = frozenset({str, int, bool, type(None)})


class NotJsonError(ValueError):
    """A value that is not JSON-shaped data; the message names the path to it."""


class _NotJson(Exception):
    """Carries the path to the offending value up to `freeze_mapping`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []


def freeze_mapping(value: object, *, where: str = "data") -> FrozenMapping:
    """Return a deeply immutable copy of the JSON object ``value``.

    Accepted values inside it: str, int, bool, finite float, None, mappings
    with str keys and sequences (list or tuple) of accepted values. Subclasses
    of str, int and float (enum members, for instance) are reduced to the base
    type.

    Raises:
        NotJsonError: ``value`` is not a mapping or holds anything else; the
            message names the path below ``where``.
    """
    if not isinstance(value, Mapping):
        raise NotJsonError(f"{where}: expected an object, got {type(value).__name__}")
    try:
        return _freeze_object(value)
    except _NotJson as error:
        raise _format_error(error, where) from None


def _format_error(error: _NotJson, where: str) -> NotJsonError:
    path = where + "".join(reversed(error.path))
    return NotJsonError(f"{path}: {error.reason}")


def _freeze(value: object) -> object:
    if type(value) in _SCALARS:
        return value
    if isinstance(value, dict | MappingProxyType):
        return _freeze_object(value)
    if isinstance(value, list | tuple):
        items = []
        for index, item in enumerate(value):
            try:
                items.append(_freeze(item))
            except _NotJson as error:
                error.path.append(f"[{index}]")
                raise
        return tuple(items)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotJson(f"{value} is not a JSON number")
        return float(value)
    if isinstance(value, Mapping):
        return _freeze_object(value)
    # Subclasses of the scalar types, enum members for instance.
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str.__str__(value)
    raise _NotJson(f"{type(value).__name__} is not JSON data")


def _freeze_object(value: Mapping[object, object]) -> FrozenMapping:
    copy: dict[str, object] = {}
    for key, item in value.items():
        if type(key) is str:
            name = key
        elif isinstance(key, str):
            name = str.__str__(key)
        else:
            raise _NotJson(f"object keys must be str, got {key!r}")
        try:
            copy[name] = _freeze(item)
        except _NotJson as error:
            error.path.append(f".{name}")
            raise
    return MappingProxyType(copy)


def thaw(value: object) -> object:
    """Return a plain-JSON copy of frozen ``value``: dicts and lists.

    ``value`` may also be a plain dict whose values are frozen (what built-in
    payloads' ``to_data`` returns). The result shares nothing mutable with
    ``value`` and can be handed to `json.dumps` or changed freely.
    """
    # Frozen data holds exact types only (see freeze_mapping), so identity
    # checks suffice, and they keep serializing a long log cheap.
    kind = type(value)
    if kind is MappingProxyType or kind is dict:
        return {key: thaw(item) for key, item in cast(Mapping[str, object], value).items()}
    if kind is tuple:
        return [thaw(item) for item in cast(tuple[object, ...], value)]
    return value
