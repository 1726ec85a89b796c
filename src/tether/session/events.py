"""The stored event record and the registry of event types.

A session log stores `Event` records ``{type, seq, time, data}``. The
`EventRegistry` maps each type name to its payload class, so records can be
decoded into typed payloads and plugins can add types of their own.

The payload classes are defined in `tether.session.vocabulary` and re-exported
here, so this module names the whole durable event vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from tether.session.errors import (
    EventFormatError,
    EventTypeConflictError,
    UnknownEventTypeError,
)
from tether.session.frozen import FrozenMapping, freeze_mapping, thaw
from tether.session.vocabulary import (
    BUILTIN_PAYLOADS,
    Aborted,
    AssistantChunk,
    AssistantMessageEvent,
    Blocked,
    ChunkKind,
    Completed,
    Errored,
    EventPayload,
    InboxOp,
    InboxQueue,
    InboxSpliced,
    Interrupted,
    MaxTokens,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessageEvent,
)

__all__ = [
    "BUILTIN_PAYLOADS",
    "DEFAULT_REGISTRY",
    "Aborted",
    "AssistantChunk",
    "AssistantMessageEvent",
    "Blocked",
    "ChunkKind",
    "Completed",
    "Errored",
    "Event",
    "EventPayload",
    "EventRegistry",
    "InboxOp",
    "InboxQueue",
    "InboxSpliced",
    "Interrupted",
    "MaxTokens",
    "StepEnd",
    "StepStart",
    "ToolCallEvent",
    "ToolResultEvent",
    "TurnEnd",
    "TurnEndReason",
    "TurnStart",
    "UserMessageEvent",
]

# Built-in payloads produce data that is already frozen (see vocabulary), so
# storing it skips the deep copy. Exact classes only: a subclass may override
# ``to_data``.
_FROZEN_DATA = frozenset(BUILTIN_PAYLOADS)

_RECORD_KEYS = frozenset({"type", "seq", "time", "data"})


def _position(type_name: object, seq: object, time: object) -> tuple[str, int, float]:
    """Check the fields that place an event in its log; ``time`` becomes a float."""
    if not isinstance(type_name, str) or not type_name:
        raise EventFormatError(f"event type must be a non-empty str, got {type_name!r}")
    if type(seq) is not int or seq < 0:
        raise EventFormatError(f"{type_name}: seq must be an int >= 0, got {seq!r}")
    if isinstance(time, bool) or not isinstance(time, int | float) or not math.isfinite(time):
        raise EventFormatError(f"{type_name}: time must be a finite number, got {time!r}")
    return type_name, seq, float(time)


def _frozen_data(payload: EventPayload) -> FrozenMapping:
    data = payload.to_data()
    if type(payload) in _FROZEN_DATA:
        return MappingProxyType(data)
    return freeze_mapping(data, where=f"{payload.type}: data")


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a session log: ``{type, seq, time, data}``.

    ``seq`` is the entry's index in its log; ``time`` is seconds since the
    epoch. ``data`` is held as a deeply immutable copy (read-only mappings and
    tuples), so an event cannot change once made.

    ``payload`` is the typed payload of events made by `Session.append`,
    `from_payload`, `from_record` or `EventRegistry.decode_event`. It is
    ``None`` for opaque events (an ignorable type without a registered class)
    and for events built directly with this constructor.

    Equality considers ``type``, ``seq``, ``time`` and ``data``.

    Raises:
        EventFormatError: a field has the wrong type, or ``data`` is not
            JSON-shaped.
    """

    type: str
    seq: int
    time: float
    # Mappings are unhashable; type, seq and time make hashing consistent.
    data: Mapping[str, object] = field(hash=False)
    payload: EventPayload | None = field(
        default=None, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        _, _, time = _position(self.type, self.seq, self.time)
        object.__setattr__(self, "time", time)
        object.__setattr__(self, "data", freeze_mapping(self.data, where=f"{self.type}: data"))

    @classmethod
    def from_payload(cls, payload: EventPayload, *, seq: int, time: float) -> Event:
        """Return the event recording ``payload`` at ``seq`` and ``time``.

        Raises:
            EventFormatError: ``seq`` or ``time`` is invalid, or the payload's
                data is not JSON-shaped.
        """
        type_name, seq, time = _position(payload.type, seq, time)
        return cls._assemble(type_name, seq, time, _frozen_data(payload), payload)

    @classmethod
    def _assemble(
        cls,
        type_name: str,
        seq: int,
        time: float,
        data: FrozenMapping,
        payload: EventPayload | None,
    ) -> Event:
        # For fields already checked and data already frozen: bypassing
        # __init__ skips a second deep copy, and setting the slots through
        # their descriptors skips the frozen-instance guard. Every field is
        # still set exactly once, before the event is handed out.
        event = object.__new__(cls)
        _set_type(event, type_name)
        _set_seq(event, seq)
        _set_time(event, time)
        _set_data(event, data)
        _set_payload(event, payload)
        return event

    def to_record(self) -> dict[str, object]:
        """Return the event as a JSON-ready dict ``{type, seq, time, data}``.

        Everything in it is a fresh plain dict, list or scalar.
        """
        return {"type": self.type, "seq": self.seq, "time": self.time, "data": thaw(self.data)}

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

        Raises:
            EventFormatError: the record is malformed or its data does not fit
                its type; the message names the field.
            UnknownEventTypeError: the type is neither registered nor ignorable.
        """
        if not isinstance(record, dict | Mapping):
            raise EventFormatError(f"event record must be an object, got {record!r}")
        if record.keys() != _RECORD_KEYS:
            raise EventFormatError(
                f"event record has fields {sorted(map(str, record))}, "
                f"expected {sorted(_RECORD_KEYS)}"
            )
        type_name, seq, time = _position(record["type"], record["seq"], record["time"])
        data = record["data"]
        if not isinstance(data, dict | Mapping):
            raise EventFormatError(f"{type_name}: data must be an object, got {data!r}")
        payload = (DEFAULT_REGISTRY if registry is None else registry).decode(type_name, data)
        if payload is None:
            return cls(type_name, seq, time, data)
        return cls._assemble(type_name, seq, time, _frozen_data(payload), payload)


_set_type, _set_seq, _set_time, _set_data, _set_payload = (
    Event.__dict__[name].__set__ for name in ("type", "seq", "time", "data", "payload")
)


class EventRegistry:
    """Maps event type names to payload classes.

    A new registry knows the built-in vocabulary (`BUILTIN_PAYLOADS`). Plugins
    add their own types with `register`; a name has at most one class.

    An *ignorable* type is one readers may skip without losing the session's
    meaning (diagnostics such as ``llm/retry``). A stored record of an
    ignorable type whose class is not registered loads as an opaque event;
    any other unregistered type fails to load.

    Not thread-safe: register types from the thread that uses the registry.
    """

    __slots__ = ("_classes", "_ignorable")

    def __init__(self) -> None:
        self._classes: dict[str, type[EventPayload]] = {cls.type: cls for cls in BUILTIN_PAYLOADS}
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

    def decode(self, type_name: str, data: Mapping[str, object]) -> EventPayload | None:
        """Decode stored ``data`` of ``type_name`` into its payload.

        Returns ``None`` for an ignorable type without a registered class.

        Raises:
            UnknownEventTypeError: the type is neither registered nor ignorable.
            EventFormatError: the data does not fit the registered class.
        """
        cls = self._classes.get(type_name)
        if cls is None:
            if type_name in self._ignorable:
                return None
            raise UnknownEventTypeError(
                f"unknown event type {type_name!r}: register its payload class, "
                "or declare it ignorable to load such events as opaque"
            )
        if cls in _FROZEN_DATA:
            return cls.from_data(data)
        # Plugin classes get frozen data, so a payload that keeps a piece of
        # it cannot be changed through the caller's record.
        frozen = freeze_mapping(data, where=f"{type_name}: data")
        try:
            return cls.from_data(frozen)
        except EventFormatError:
            raise
        except (KeyError, TypeError, ValueError) as error:
            raise EventFormatError(f"{type_name}: {error!r}") from error

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
        if cls is not None and type(event.payload) is cls:
            return event
        payload = self.decode(event.type, event.data)
        if payload is None:
            if event.payload is None:
                return event
            return Event(event.type, event.seq, event.time, event.data)
        return Event.from_payload(payload, seq=event.seq, time=event.time)


DEFAULT_REGISTRY = EventRegistry()
"""The process-wide registry used where none is given. Plugins register their
event types here, and unregister them when they unload."""
