"""Field codecs of the event vocabulary: the checks payloads run on their fields.

msgspec checks the types of stored data as it decodes it, but a payload built
in code gets no such check: each payload's ``__post_init__`` runs these (on
construction and after a decode), so a payload that exists can be stored and
read back. They raise `EventFormatError` naming the event type and the field.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from tether.frozen import FrozenMapping, NotJsonError, freeze_mapping
from tether.session.errors import EventFormatError

__all__ = [
    "as_tuple",
    "bad_field",
    "check_bool",
    "check_choice",
    "check_id",
    "check_ordinal",
    "check_seconds",
    "check_str",
    "freeze_data",
    "frozen_usage",
]


def freeze_data(value: object, *, where: str) -> FrozenMapping:
    """:func:`~tether.frozen.freeze_mapping` for event data.

    Raises:
        EventFormatError: ``value`` is not JSON-shaped (the message names the path).
    """
    try:
        return freeze_mapping(value, where=where)
    except NotJsonError as exc:
        raise EventFormatError(str(exc)) from None


def bad_field(type_name: str, name: str, expected: str, value: object) -> EventFormatError:
    """The error for field ``name`` of ``type_name`` holding ``value``, not ``expected``."""
    return EventFormatError(f"{type_name}: {name} must be {expected}, got {value!r}")


def check_str(type_name: str, name: str, value: object) -> None:
    """Raise `EventFormatError` unless ``value`` is a str."""
    if not isinstance(value, str):
        raise bad_field(type_name, name, "a str", value)


def check_id(type_name: str, name: str, value: object) -> None:
    """Raise `EventFormatError` unless ``value`` is a non-empty str."""
    if not isinstance(value, str) or not value:
        raise bad_field(type_name, name, "a non-empty str", value)


def check_bool(type_name: str, name: str, value: object) -> None:
    """Raise `EventFormatError` unless ``value`` is a bool."""
    if not isinstance(value, bool):
        raise bad_field(type_name, name, "a bool", value)


def check_ordinal(type_name: str, name: str, value: object) -> None:
    """Raise `EventFormatError` unless ``value`` is an int >= 1 (and not a bool)."""
    # bool is an int subclass; True must not pass for turn 1.
    if type(value) is not int or value < 1:
        raise bad_field(type_name, name, "an int >= 1", value)


def check_choice(type_name: str, name: str, value: object, choices: tuple[str, ...]) -> None:
    """Raise `EventFormatError` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise bad_field(type_name, name, " or ".join(repr(choice) for choice in choices), value)


def check_seconds(type_name: str, name: str, value: object) -> float:
    """Return ``value`` as a float if it is a finite number >= 0 (not a bool).

    Raises:
        EventFormatError: it is not.
    """
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < math.inf:
        return float(value)
    raise bad_field(type_name, name, "a number >= 0", value)


def as_tuple(type_name: str, name: str, value: object) -> tuple[object, ...]:
    """Return the sequence ``value`` as a tuple.

    Raises:
        EventFormatError: ``value`` is not a sequence (a str is not one here).
    """
    if type(value) is tuple:
        return value
    # A str is iterable, but taking one for a sequence of entries is never right.
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise bad_field(type_name, name, "a sequence", value)
    return tuple(value)


def frozen_usage(type_name: str, usage: object) -> FrozenMapping:
    """Return token counts by name as a read-only copy.

    Raises:
        EventFormatError: ``usage`` is not a mapping of str to int >= 0.
    """
    if not isinstance(usage, Mapping):
        raise bad_field(type_name, "usage", "a mapping of token counts", usage)
    for name, count in usage.items():
        if not isinstance(name, str) or type(count) is not int or count < 0:
            raise bad_field(type_name, f"usage[{name!r}]", "an int >= 0", count)
    return MappingProxyType(dict(usage))
