"""The stored event record and the registry of event types.

A session log stores `Event` records ``{type, seq, time, data}``. The
`EventRegistry` maps each type name to its payload class, so records can be
decoded into typed payloads and plugins can add types of their own.

The payload classes are defined in `tether.session.vocabulary`; the package
root, `tether.session`, exports both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import FrozenInstanceError, dataclass
from types import MappingProxyType
from typing import cast, get_args

from tether.frozen import FrozenMapping, thaw
from tether.session.errors import (
    EventFormatError,
    EventTypeConflictError,
    UnknownEventTypeError,
)
from tether.session.receipt import ToolStopped
from tether.session.vocabulary import (
    BUILTIN_PAYLOADS,
    AssistantChunk,
    ChunkKind,
    EventPayload,
    freeze_data,
)

__all__ = ["DEFAULT_REGISTRY", "Event", "EventRegistry"]

# Built-in payloads build their data fresh and already frozen (see vocabulary),
# and their ``to_data`` cannot fail: an event holding one builds its data only
# when it is read, which keeps appends and loads cheap. Exact classes only: a
# subclass may override ``to_data``.
_FROZEN_DATA = frozenset(BUILTIN_PAYLOADS)

_CORE_PAYLOADS: tuple[type[EventPayload], ...] = (*BUILTIN_PAYLOADS, ToolStopped)
"""Every type tether writes: a new registry knows them all."""


@dataclass(frozen=True, slots=True)
class _UnbuiltChunk:
    """Stands in for the payload of a chunk loaded from a record, until read.

    Streaming chunks are most of a log, and loading one reads none of them
    back: restore checks only where they stand, derive_messages skips them.
    So a loaded chunk keeps its delta (a str) as its data and one of these
    (one per kind) as its payload; the real ones are built when first read.
    Holding no container of its own, such an event also costs the garbage
    collector a single object.
    """

    kind: ChunkKind


_UNBUILT_CHUNKS = {kind: _UnbuiltChunk(kind) for kind in get_args(ChunkKind)}

_RECORD_KEYS = frozenset({"type", "seq", "time", "data"})
_INF = math.inf

# Spelled out for annotations inside `Event`, where ``type`` names the field.
_PayloadClass = type[EventPayload]


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
    # What backends hand back, a plain dict with a float time, passes one
    # combined test (four fields, all present and well typed, are exactly the
    # record fields); anything else takes the path that says what is wrong.
    if type(record) is dict and len(record) == len(_RECORD_KEYS):
        type_name = record.get("type")
        seq = record.get("seq")
        time = record.get("time")
        data = record.get("data")
        if (
            type(type_name) is str
            and type_name
            and type(seq) is int
            and seq >= 0
            and type(time) is float
            and -_INF < time < _INF
            and type(data) is dict
        ):
            return type_name, seq, time, data
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


class Event:
    """One entry of a session log: ``{type, seq, time, data}``.

    ``seq`` is the entry's index in its log; ``time`` is seconds since the
    epoch. ``data`` is deeply immutable (read-only mappings and tuples over a
    private copy of whatever it was made from), and so is the event itself:
    assigning an attribute raises `dataclasses.FrozenInstanceError`.

    ``payload`` is the typed payload of events made by `Session.append`,
    `from_payload`, `from_record` or `EventRegistry.decode_event`. It is
    ``None`` for opaque events (an ignorable type without a registered class)
    and for events built directly with this constructor.

    Equality considers ``type``, ``seq``, ``time`` and ``data``; hashing,
    ``type``, ``seq`` and ``time``.

    Raises:
        EventFormatError: a field has the wrong type, or ``data`` is not
            JSON-shaped.
    """

    __slots__ = ("_data", "_payload", "seq", "time", "type")
    __match_args__ = ("type", "seq", "time", "data")

    type: str
    seq: int
    time: float
    # An event stores what it was made from; the other form is computed when
    # first read. ``_data`` is frozen data, None (a built-in payload's, not
    # built yet) or a loaded chunk's delta. ``_payload`` is a payload, None
    # (opaque) or an `_UnbuiltChunk`.
    _data: Mapping[str, object] | str | None
    _payload: EventPayload | _UnbuiltChunk | None

    def __new__(cls, type: str, seq: int, time: float, data: Mapping[str, object]) -> Event:
        type_name, seq, time = _position(type, seq, time)
        return _assemble(type_name, seq, time, freeze_data(data, where=f"{type_name}: data"), None)

    @property
    def data(self) -> Mapping[str, object]:
        """The event's data: read-only mappings, tuples and JSON scalars."""
        data = self._data
        if data is None:
            # Two threads may both get here; they build equal data.
            data = MappingProxyType(self._payload_data())
            _set_data(self, data)
        elif type(data) is str:
            # A loaded chunk's: built on every read, as storing it would
            # cost what holding just the delta saves.
            kind = cast(AssistantChunk | _UnbuiltChunk, self._payload).kind
            return MappingProxyType({"kind": kind, "delta": data})
        return cast(Mapping[str, object], data)

    @property
    def payload(self) -> EventPayload | None:
        """The typed payload, or ``None`` for an opaque event."""
        payload = self._payload
        if type(payload) is _UnbuiltChunk:
            payload = AssistantChunk(payload.kind, cast(str, self._data))
            _set_payload(self, payload)
        return cast(EventPayload | None, payload)

    def _payload_data(self) -> Mapping[str, object]:
        # Only events holding a built-in payload leave their data unset.
        return cast(EventPayload, self._payload).to_data()

    def _decodes_as(self, payload_cls: _PayloadClass) -> bool:
        """Whether the payload is (or will be built) of exactly ``payload_cls``."""
        payload = self._payload
        if type(payload) is _UnbuiltChunk:
            return payload_cls is AssistantChunk
        return type(payload) is payload_cls

    @classmethod
    def from_payload(cls, payload: EventPayload, *, seq: int, time: float) -> Event:
        """Return the event recording ``payload`` at ``seq`` and ``time``.

        Raises:
            EventFormatError: ``seq`` or ``time`` is invalid, or the payload's
                data is not JSON-shaped.
        """
        type_name, seq, time = _position(payload.type, seq, time)
        return _holding(type_name, seq, time, payload)

    def to_record(self) -> dict[str, object]:
        """Return the event as a JSON-ready dict ``{type, seq, time, data}``.

        Everything in it is a fresh plain dict, list or scalar.
        """
        return {
            "type": self.type,
            "seq": self.seq,
            "time": self.time,
            "data": thaw(self._payload_data() if self._data is None else self.data),
        }

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
        try:
            payload_cls = (DEFAULT_REGISTRY if registry is None else registry)._class_for_stored(
                type_name
            )
            if payload_cls is None:
                return cls(type_name, seq, time, data)
            if payload_cls is AssistantChunk:
                # Exactly a known kind and a str delta: a valid chunk, kept
                # unbuilt. Anything else is decoded, which says what is wrong.
                kind, delta = data.get("kind"), data.get("delta")
                if len(data) == 2 and type(kind) is str and type(delta) is str:
                    unbuilt = _UNBUILT_CHUNKS.get(kind)
                    if unbuilt is not None:
                        return _assemble(type_name, seq, time, delta, unbuilt)
            return _holding(type_name, seq, time, _decode(payload_cls, data))
        except EventFormatError as error:
            raise type(error)(f"seq {seq}: {error}") from error

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
        return (_assemble, (self.type, self.seq, self.time, self._data, self._payload))


_set_type, _set_seq, _set_time, _set_data, _set_payload = (
    Event.__dict__[name].__set__ for name in ("type", "seq", "time", "_data", "_payload")
)
_new_event = object.__new__


def _assemble(
    type_name: str,
    seq: int,
    time: float,
    data: Mapping[str, object] | str | None,
    payload: EventPayload | _UnbuiltChunk | None,
) -> Event:
    """A new event from fields already checked, in the forms `Event` stores."""
    # Making the object directly skips checking the fields (and copying the
    # data) again, and setting the slots through their descriptors skips the
    # frozen-instance guard. Every field is set before the event is handed
    # out; afterwards only a computed form replaces ``_data`` or ``_payload``.
    event = _new_event(Event)
    _set_type(event, type_name)
    _set_seq(event, seq)
    _set_time(event, time)
    _set_data(event, data)
    _set_payload(event, payload)
    return event


def _holding(type_name: str, seq: int, time: float, payload: EventPayload) -> Event:
    """A new event recording ``payload``, its other fields already checked."""
    if type(payload) in _FROZEN_DATA:
        return _assemble(type_name, seq, time, None, payload)
    data = freeze_data(payload.to_data(), where=f"{type_name}: data")
    return _assemble(type_name, seq, time, data, payload)


def _decode(payload_cls: type[EventPayload], data: Mapping[str, object]) -> EventPayload:
    """Decode stored ``data`` with ``payload_cls``.

    Raises:
        EventFormatError: the data does not fit the class.
    """
    if payload_cls in _FROZEN_DATA:
        return payload_cls.from_data(data)
    # Plugin classes get frozen data, so a payload that keeps a piece of
    # it cannot be changed through the caller's record.
    frozen = freeze_data(data, where=f"{payload_cls.type}: data")
    try:
        return payload_cls.from_data(frozen)
    except EventFormatError:
        raise
    except (KeyError, TypeError, ValueError) as error:
        raise EventFormatError(f"{payload_cls.type}: {error!r}") from error


class EventRegistry:
    """Maps event type names to payload classes.

    A new registry knows the core vocabulary: `BUILTIN_PAYLOADS` and the stop
    receipt (`ToolStopped`), every type tether itself writes. Plugins add
    their own types with `register`; a name has at most one class.

    An *ignorable* type is one readers may skip without losing the session's
    meaning (diagnostics such as ``llm/retry``). A stored record of an
    ignorable type whose class is not registered loads as an opaque event;
    any other unregistered type fails to load.

    Not thread-safe: register types from the thread that uses the registry.
    """

    __slots__ = ("_classes", "_ignorable")

    def __init__(self) -> None:
        self._classes: dict[str, type[EventPayload]] = {cls.type: cls for cls in _CORE_PAYLOADS}
        self._ignorable: set[str] = set()

    def register(
        self, payload_cls: type[EventPayload], *, ignorable: bool = False
    ) -> Callable[[], None]:
        """Register ``payload_cls`` for its ``type`` name.

        With ``ignorable=True`` the name is also declared ignorable (see the
        class docstring). The declaration outlives the registration: once the
        returned callable unregisters the class (its plugin unloaded, or is
        reloading), logs that hold such events keep loading, with the events
        opaque, and the class may be registered again.

        Returns:
            A callable that unregisters the class. It is idempotent and leaves
            a later registration of the same name alone.

        Raises:
            TypeError: ``payload_cls`` is not an `EventPayload` subclass with a
                non-empty str ``type``.
            EventTypeConflictError: a class is already registered for the name.
        """
        if not (isinstance(payload_cls, type) and issubclass(payload_cls, EventPayload)):
            raise TypeError(f"{payload_cls!r} is not an EventPayload subclass")
        name = getattr(payload_cls, "type", None)
        if not isinstance(name, str) or not name:
            raise TypeError(f"{payload_cls.__qualname__}.type must be a non-empty str")
        existing = self._classes.get(name)
        if existing is not None:
            raise EventTypeConflictError(
                f"event type {name!r} is already registered by {existing.__qualname__}"
            )
        self._classes[name] = payload_cls
        if ignorable:
            self._ignorable.add(name)

        def unregister() -> None:
            if self._classes.get(name) is payload_cls:
                del self._classes[name]

        return unregister

    def ignore(self, type_name: str) -> None:
        """Declare ``type_name`` ignorable without registering a class for it.

        For types written by plugins that are not installed here: their stored
        events load as opaque events instead of failing.

        Raises:
            EventTypeConflictError: ``type_name`` is a built-in type, which is
                never ignorable.
        """
        if any(cls.type == type_name for cls in BUILTIN_PAYLOADS):
            raise EventTypeConflictError(f"built-in event type {type_name!r} cannot be ignorable")
        self._ignorable.add(type_name)

    def payload_class(self, type_name: str) -> type[EventPayload] | None:
        """The class registered for ``type_name``, or ``None``."""
        return self._classes.get(type_name)

    def is_ignorable(self, type_name: str) -> bool:
        """Whether ``type_name`` is declared ignorable."""
        return type_name in self._ignorable

    def check_payload(self, payload: EventPayload) -> None:
        """Check that ``payload``'s class is the one registered for its type.

        Raises:
            TypeError: ``payload`` is not an `EventPayload`.
            UnknownEventTypeError: another class, or none, is registered for
                its type name.
        """
        if not isinstance(payload, EventPayload):
            raise TypeError(f"expected an EventPayload, got {payload!r}")
        registered = self._classes.get(payload.type)
        if registered is not type(payload):
            held = "no class" if registered is None else registered.__qualname__
            raise UnknownEventTypeError(
                f"{type(payload).__qualname__} is not registered for event type "
                f"{payload.type!r} (the registry has {held})"
            )

    def _class_for_stored(self, type_name: str) -> type[EventPayload] | None:
        """The class that decodes stored events of ``type_name``.

        Returns ``None`` for an ignorable type without a registered class.

        Raises:
            UnknownEventTypeError: the type is neither registered nor ignorable.
        """
        cls = self._classes.get(type_name)
        if cls is None and type_name not in self._ignorable:
            raise UnknownEventTypeError(
                f"unknown event type {type_name!r}: register its payload class, "
                "or declare it ignorable to load such events as opaque"
            )
        return cls

    def decode(self, type_name: str, data: Mapping[str, object]) -> EventPayload | None:
        """Decode stored ``data`` of ``type_name`` into its payload.

        Returns ``None`` for an ignorable type without a registered class.

        Raises:
            UnknownEventTypeError: the type is neither registered nor ignorable.
            EventFormatError: the data does not fit the registered class.
        """
        cls = self._class_for_stored(type_name)
        return None if cls is None else _decode(cls, data)

    def decode_event(self, event: Event) -> Event:
        """Return ``event`` carrying the payload this registry decodes for it.

        An event whose payload already has the registered class is returned
        as is, and so is an opaque event of an ignorable type; otherwise the
        result is a new event decoded from ``event``'s data.

        Raises:
            UnknownEventTypeError: the type is neither registered nor ignorable.
            EventFormatError: the data does not fit the registered class.
        """
        cls = self._classes.get(event.type)
        if cls is not None and event._decodes_as(cls):
            return event
        payload = self.decode(event.type, event.data)
        if payload is None:
            if event.payload is None:
                return event
            return _assemble(
                event.type, event.seq, event.time, cast(FrozenMapping, event.data), None
            )
        return _holding(event.type, event.seq, event.time, payload)


DEFAULT_REGISTRY = EventRegistry()
"""The process-wide registry used where none is given. Plugins register their
event types here, and unregister them when they unload."""
