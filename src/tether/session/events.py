"""The event record, `Event`: one entry of a session log.

A session log stores `Event` records ``{type, seq, time, data}``; an event
read back or appended also carries its typed payload. The payload classes
are defined in `tether.session.vocabulary` and looked up in an
`EventRegistry` (`tether.session.registry`); the package root,
`tether.session`, exports them all.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import FrozenInstanceError
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

import msgspec
from msgspec import Raw

from tether.frozen import thaw
from tether.session.errors import EventFormatError
from tether.session.fields import freeze_data
from tether.session.payload import EventPayload, EventStruct, encode_data
from tether.session.receipt import ToolStopped
from tether.session.vocabulary import BUILTIN_PAYLOADS

if TYPE_CHECKING:
    from tether.session.registry import EventRegistry

__all__ = ["Event", "of_types"]

# The core payloads are checked on construction and build their data only
# when it is read, which keeps appends and loads cheap. Exact classes only: a
# subclass may override ``to_data``.
LAZY_PAYLOADS = frozenset((*BUILTIN_PAYLOADS, ToolStopped))

# The core payloads whose stored data is their fields: encoded as they are.
_CORE: tuple[type[EventStruct], ...] = (*BUILTIN_PAYLOADS, ToolStopped)
_SELF_STORED = frozenset(cls for cls in _CORE if cls.stored_type() is cls)

_RECORD_KEYS = frozenset({"type", "seq", "time", "data"})
_INF = math.inf


def _position(type_name: object, seq: object, time: object) -> tuple[str, int, float]:
    """Check the fields that place an event in its log; ``time`` becomes a float."""
    if not isinstance(type_name, str) or not type_name:
        raise EventFormatError(f"event type must be a non-empty str, got {type_name!r}")
    if type(seq) is not int or seq < 0:
        raise EventFormatError(f"{type_name}: seq must be an int >= 0, got {seq!r}")
    if isinstance(time, bool) or not isinstance(time, int | float) or not math.isfinite(time):
        raise EventFormatError(f"{type_name}: time must be a finite number, got {time!r}")
    return type_name, seq, float(time)


def _record_fields(record: object) -> tuple[str, int, float, Mapping[str, object]]:
    """Check an event record's fields and return them; ``time`` becomes a float.

    Raises:
        EventFormatError: the record is not an object with exactly the record
            fields, or a field has the wrong type; the message names it.
    """
    if not isinstance(record, Mapping):
        raise EventFormatError(f"event record must be an object, got {record!r}")
    if record.keys() != _RECORD_KEYS:
        raise EventFormatError(
            f"event record has fields {sorted(map(str, record))}, expected {sorted(_RECORD_KEYS)}"
        )
    type_name, seq, time = _position(record["type"], record["seq"], record["time"])
    data = record["data"]
    if not isinstance(data, Mapping):
        raise EventFormatError(f"{type_name}: data must be an object, got {data!r}")
    return type_name, seq, time, data


class _EventClass(msgspec.StructMeta):
    """The class of `Event`: calling it is the checked constructor."""

    def __call__(cls, type: str, seq: int, time: float, data: Mapping[str, object]) -> Event:
        type_name, seq, time = _position(type, seq, time)
        data = freeze_data(data, where=f"{type_name}: data")
        return cast(Event, _build(cls, type_name, seq, time, data, None))


# Builds an event from its stored fields in C, without checks.
_build = msgspec.StructMeta.__call__


class Event(msgspec.Struct, gc=False, metaclass=_EventClass):
    """One entry of a session log: ``{type, seq, time, data}``.

    ``seq`` is the entry's index in its log; ``time`` is seconds since the
    epoch. ``data`` is deeply immutable (read-only mappings and tuples over a
    private copy of whatever it was made from), and so is the event itself:
    assigning an attribute raises `dataclasses.FrozenInstanceError`.

    ``payload`` is the typed payload of events made by `Session.append`,
    `from_payload`, `from_record`, `EventRegistry.decode_stored` or
    `EventRegistry.decode_event`. It is ``None`` for opaque events (an
    ignorable type without a registered class) and for events built directly
    with this constructor.

    Equality considers ``type``, ``seq``, ``time`` and ``data``; hashing,
    ``type``, ``seq`` and ``time``.

    An event is a msgspec ``Struct`` (built in C, and left untracked by the
    cyclic collector: it holds no cycles), not for its codec: it is not a
    wire value, and its fields past ``time`` are private.

    Raises:
        EventFormatError: a field has the wrong type, or ``data`` is not
            JSON-shaped.
    """

    type: str
    seq: int
    time: float
    # An event stores what it was made from; the data is computed when first
    # read. ``_data`` is frozen data or None (a core payload's, not built
    # yet).
    _data: Mapping[str, object] | None = None
    payload: EventPayload | None = None
    """The typed payload, or ``None`` for an opaque event."""

    @property
    def data(self) -> Mapping[str, object]:
        """The event's data: read-only mappings, tuples and JSON scalars."""
        data = self._data
        if data is None:
            # Two threads may both get here; they build equal data.
            data = freeze_data(self._payload_data(), where=f"{self.type}: data")
            _set(self, "_data", data)
        return data

    def _payload_data(self) -> Mapping[str, object]:
        # Only events holding a core payload leave their data unset.
        return cast(EventPayload, self.payload).to_data()

    @classmethod
    def from_payload(cls, payload: EventPayload, *, seq: int, time: float) -> Event:
        """Return the event recording ``payload`` at ``seq`` and ``time``.

        Raises:
            EventFormatError: ``seq`` or ``time`` is invalid, or the payload's
                data is not JSON-shaped.
        """
        type_name, seq, time = _position(payload.type, seq, time)
        return holding(type_name, seq, time, payload)

    def to_record(self) -> dict[str, object]:
        """Return the event as a JSON-ready dict ``{type, seq, time, data}``.

        Everything in it is a fresh plain dict, list or scalar.
        """
        return {
            "type": self.type,
            "seq": self.seq,
            "time": self.time,
            # A core payload's data is built fresh and plain.
            "data": self._payload_data() if self._data is None else thaw(self._data),
        }

    def to_stored_record(self) -> dict[str, object]:
        """`to_record` with ``data`` already encoded, as a ``msgspec.Raw`` of
        its compact JSON, which backends store as it is.

        Data msgspec cannot encode (text holding a lone surrogate) comes as
        `to_record` gives it, for the backend to encode (and mend).
        """
        try:
            payload = self.payload
            if self._data is None:
                # What `EventStruct.to_json` does, without its two calls.
                if type(payload) in _SELF_STORED:
                    encoded = encode_data(payload)
                else:
                    encoded = cast(EventStruct, payload).to_json()
            else:
                encoded = encode_data(self._data)
        except UnicodeEncodeError:
            return self.to_record()
        return {"type": self.type, "seq": self.seq, "time": self.time, "data": Raw(encoded)}

    @classmethod
    def from_record(
        cls, record: Mapping[str, object], registry: EventRegistry | None = None
    ) -> Event:
        """Rebuild an event from a record written by `to_record`.

        The data is decoded through ``registry`` (default `DEFAULT_REGISTRY`),
        so the event carries its typed payload; a record of an ignorable type
        without a registered class yields an opaque event. The event's data is
        the payload's ``to_data()``, which for records written by `to_record`
        equals the stored data.

        The whole record is checked here, so a bad one fails now, not later
        when its payload is read.

        Raises:
            EventFormatError: the record is malformed or its data does not fit
                its type; the message names the field (and the seq, once the
                record has a valid one).
            UnknownEventTypeError: the type is neither registered nor ignorable.
        """
        type_name, seq, time, data = _record_fields(record)
        if registry is None:
            from tether.session.registry import DEFAULT_REGISTRY

            registry = DEFAULT_REGISTRY
        try:
            payload = registry.decode(type_name, data)
        except EventFormatError as error:
            raise type(error)(f"seq {seq}: {error}") from error
        if payload is None:
            return cls(type_name, seq, time, data)
        return holding(type_name, seq, time, payload)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event) or other.__class__ is not self.__class__:
            return NotImplemented
        return (self.type, self.seq, self.time, self.data) == (
            other.type,
            other.seq,
            other.time,
            other.data,
        )

    def __hash__(self) -> int:
        # Mappings are unhashable; type, seq and time keep hashing consistent
        # with equality.
        return hash((self.type, self.seq, self.time))

    def __repr__(self) -> str:
        return (
            f"{type(self).__qualname__}(type={self.type!r}, seq={self.seq!r}, "
            f"time={self.time!r}, data={self.data!r})"
        )

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[object, ...]:
        # Copies take the fields as they are; they were checked already.
        return (assemble, (self.type, self.seq, self.time, self._data, self.payload))


_set = msgspec.structs.force_setattr


def assemble(
    type_name: str,
    seq: int,
    time: float,
    data: Mapping[str, object] | None,
    payload: EventPayload | None,
) -> Event:
    """A new event from fields already checked, in the forms `Event` stores."""
    return cast(Event, _build(Event, type_name, seq, time, data, payload))


build_event = cast(
    Callable[[str, int, float, "Mapping[str, object] | None", "EventPayload | None"], Event],
    functools.partial(_build, Event),
)
"""`assemble` without its Python frame, for loops that build an event per record."""


def holding(type_name: str, seq: int, time: float, payload: EventPayload) -> Event:
    """A new event recording ``payload``, its other fields already checked.

    Raises:
        EventFormatError: the payload is not a core one and its data is not
            JSON-shaped.
    """
    if type(payload) in LAZY_PAYLOADS:
        return assemble(type_name, seq, time, None, payload)
    data = freeze_data(payload.to_data(), where=f"{type_name}: data")
    return assemble(type_name, seq, time, data, payload)


@runtime_checkable
class _Selective(Protocol):
    def of_types(
        self, names: frozenset[str], start: int = 0, stop: int | None = None
    ) -> Iterator[Event]: ...


def of_types(events: Iterable[Event], names: frozenset[str]) -> Iterable[Event]:
    """The events of ``events`` whose type is one of ``names``, in order.

    A session's events (which hold most of a log packed) decode only those;
    any other iterable comes back as it is, for the caller to pass over the
    other types as it would anyway.
    """
    if isinstance(events, _Selective):
        return events.of_types(names)
    return events
