"""The registry of event types: which payload class decodes each stored type.

`EventRegistry` maps each type name to its payload class, so stored records
decode into typed payloads and plugins can add types of their own. Stored
data is decoded once per record: straight into an `EventStruct` class by
msgspec (types checked in C), or, for a payload class of the hand-written
style, into frozen data handed to its ``from_data``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple, Protocol, cast

import msgspec

from tether.session.budget import BUDGET_PAYLOADS
from tether.session.compaction import ContextCompacted
from tether.session.elicitation import (
    ElicitationAnswered,
    ElicitationAsked,
    ElicitationCompleted,
)
from tether.session.environment import EnvironmentNoted
from tether.session.errors import (
    EventFormatError,
    EventTypeConflictError,
    UnknownEventTypeError,
)
from tether.session.events import LAZY_PAYLOADS, Event, assemble, build_event, holding
from tether.session.fields import freeze_data
from tether.session.files import FileSeen
from tether.session.handoff import SessionHandedOff
from tether.session.log_decoder import LogDecoder
from tether.session.payload import EventPayload, EventStruct, format_error
from tether.session.previews import ToolPreviewed
from tether.session.prompt_cut import PromptCut
from tether.session.receipt import ToolStopped
from tether.session.ruling import PermissionRuled
from tether.session.settings import SETTINGS_PAYLOADS
from tether.session.snapshot import WorkspaceSnapshot
from tether.session.stored import StoredEvent
from tether.session.vocabulary import BUILTIN_PAYLOADS
from tether.session.worktree import WorktreeCreated

__all__ = ["CORE_PAYLOADS", "DEFAULT_REGISTRY", "EventRegistry"]

CORE_PAYLOADS: tuple[type[EventPayload], ...] = (
    *BUILTIN_PAYLOADS,
    ToolStopped,
    ToolPreviewed,
    ContextCompacted,
    EnvironmentNoted,
    FileSeen,
    PromptCut,
    WorkspaceSnapshot,
    PermissionRuled,
    ElicitationAsked,
    ElicitationAnswered,
    ElicitationCompleted,
    WorktreeCreated,
    SessionHandedOff,
    *SETTINGS_PAYLOADS,
    *BUDGET_PAYLOADS,
)
"""Every type tether writes: a new registry knows them all."""

_OBJECT = msgspec.json.Decoder(dict[str, object])


class _Decode(Protocol):
    def __call__(self, raw: msgspec.Raw, /) -> object: ...


class _Decoder(NamedTuple):
    """How raw stored data of one type becomes its payload.

    ``decode`` turns raw JSON into a value (raising ``msgspec.ValidationError``
    for data of the wrong shape); ``finish``, when there is one, turns that
    value into the payload (raising `EventFormatError`). A payload class
    decoded straight from its fields needs no ``finish``: that is the path
    nearly every stored event takes, one call into msgspec.
    """

    decode: _Decode
    finish: Callable[[object], EventPayload] | None
    lazy: bool


def _decoder(payload_cls: type[EventPayload]) -> _Decoder:
    """The `_Decoder` for stored data of ``payload_cls``'s type."""
    lazy = payload_cls in LAZY_PAYLOADS
    if issubclass(payload_cls, EventStruct):
        stored_type = payload_cls.stored_type()
        decode: _Decode = msgspec.json.Decoder(stored_type).decode
        if stored_type is payload_cls:
            return _Decoder(decode, None, lazy)
        return _Decoder(decode, payload_cls.from_stored, lazy)
    return _Decoder(
        _OBJECT.decode, lambda data: _from_data(payload_cls, cast(dict[str, object], data)), lazy
    )


def _from_data(payload_cls: type[EventPayload], data: Mapping[str, object]) -> EventPayload:
    """Decode ``data`` with a hand-written ``from_data``, on a frozen copy.

    Raises:
        EventFormatError: the data does not fit the class.
    """
    if issubclass(payload_cls, EventStruct):
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


def _opaque(raw: msgspec.Raw, /) -> Mapping[str, object]:
    try:
        data = _OBJECT.decode(raw)
    except msgspec.ValidationError as error:
        raise EventFormatError(f"data must be a JSON object: {error}") from None
    return freeze_data(data, where="data")


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

    __slots__ = ("_classes", "_decoders", "_ignorable", "_log_decoder")

    def __init__(self) -> None:
        self._classes: dict[str, type[EventPayload]] = {cls.type: cls for cls in CORE_PAYLOADS}
        self._ignorable: set[str] = set()
        # Built on first use, per class; a registration change drops the entry.
        self._decoders: dict[str, _Decoder] = {}
        self._log_decoder: LogDecoder | None = None

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
        self._decoders.pop(name, None)
        self._log_decoder = None
        if ignorable:
            self._ignorable.add(name)

        def unregister() -> None:
            if self._classes.get(name) is payload_cls:
                del self._classes[name]
                self._decoders.pop(name, None)
                self._log_decoder = None

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

    def type_names(self) -> tuple[str, ...]:
        """The names of every registered type, in registration order."""
        return tuple(self._classes)

    def log_decoder(self) -> LogDecoder:
        """The one-pass decoder of whole logs for the types registered now
        (see `tether.session.log_decoder`); built on first use and again
        after a registration change."""
        decoder = self._log_decoder
        if decoder is None:
            decoder = self._log_decoder = LogDecoder(self)
        return decoder

    def payload_class(self, type_name: str) -> type[EventPayload] | None:
        """The class registered for ``type_name``, or ``None``."""
        return self._classes.get(type_name)

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
        """Decode ``data`` of ``type_name`` (already-parsed JSON) into its payload.

        Returns ``None`` for an ignorable type without a registered class.

        Raises:
            UnknownEventTypeError: the type is neither registered nor ignorable.
            EventFormatError: the data does not fit the registered class.
        """
        cls = self._class_for_stored(type_name)
        return None if cls is None else _from_data(cls, data)

    def decode_stored(self, records: list[StoredEvent]) -> list[Event]:
        """Decode stored records into events carrying their payloads.

        Each record's raw data is decoded once, into its registered class; a
        record of an ignorable type without a class yields an opaque event.

        Raises:
            UnknownEventTypeError: a type is neither registered nor ignorable.
            EventFormatError: a record's data does not fit its class; the
                message starts with the seq.
        """
        decoders = self._decoders
        events: list[Event] = []
        append = events.append
        # This loop runs once per stored event.
        build = build_event
        for record in records:
            type_name = record.type
            decoder = decoders.get(type_name)
            try:
                if decoder is None:
                    decoder = self._decoder_for(type_name)
                    if decoder is None:
                        data = _opaque(record.data)
                        append(assemble(type_name, record.seq, record.time, data, None))
                        continue
                decode, finish, lazy = decoder
                try:
                    value = decode(record.data)
                except msgspec.ValidationError as error:
                    raise format_error(type_name, error) from None
                payload = cast(EventPayload, value) if finish is None else finish(value)
                if not lazy:
                    append(holding(type_name, record.seq, record.time, payload))
                    continue
            except EventFormatError as error:
                raise type(error)(f"seq {record.seq}: {error}") from error
            append(build(type_name, record.seq, record.time, None, payload))
        return events

    def _decoder_for(self, type_name: str) -> _Decoder | None:
        """Build and cache the decoder of ``type_name``; ``None`` if it is
        ignorable without a class.

        Raises:
            UnknownEventTypeError: the type is neither registered nor ignorable.
        """
        cls = self._class_for_stored(type_name)
        if cls is None:
            return None
        decoder = self._decoders[type_name] = _decoder(cls)
        return decoder

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
            return assemble(event.type, event.seq, event.time, event.data, None)
        return holding(event.type, event.seq, event.time, payload)


DEFAULT_REGISTRY = EventRegistry()
"""The process-wide registry used where none is given. Plugins register their
event types here, and unregister them when they unload."""
