"""The in-memory session log: a header and an append-only list of events."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import cast, overload

import msgspec

from tether.session.errors import (
    EventFormatError,
    HeaderFormatError,
    ReentrantAppendError,
    SessionInvariantError,
)
from tether.session.events import Event, build_event
from tether.session.lineage import Delegation, Lineage, read_lineage
from tether.session.packed import PackedEvents
from tether.session.payload import EventPayload
from tether.session.registry import DEFAULT_REGISTRY, EventRegistry
from tether.session.settings import SETTINGS_TYPES, SessionSettings
from tether.session.structure import IN_STEP_ONLY, PendingToolCall, Structure
from tether.session.vocabulary import BUILTIN_PAYLOADS, TurnStart

__all__ = [
    "Delegation",
    "Lineage",
    "LoadedEvents",
    "Observer",
    "Session",
    "SessionEvents",
    "SessionHeader",
]

_log = logging.getLogger(__name__)

_BUILTIN_CLASSES = frozenset(BUILTIN_PAYLOADS)
_TURN_START = TurnStart.type

UNPACKED_LIMIT = 4096
"""How many events a session holds decoded at most: past it, a turn that
is still open has its events packed too."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise HeaderFormatError(message)


def _check_keys(what: str, record: object, expected: frozenset[str]) -> Mapping[str, object]:
    if not isinstance(record, Mapping):
        raise HeaderFormatError(f"{what} must be an object, got {record!r}")
    if record.keys() != expected:
        raise HeaderFormatError(
            f"{what} has fields {sorted(map(str, record))}, expected {sorted(expected)}"
        )
    return record


_HEADER_KEYS = frozenset({"id", "created_at", "cwd", "lineage", "meta"})


class SessionHeader(msgspec.Struct, frozen=True):
    """What a session is, kept outside its event list.

    ``meta`` holds free-form string labels (a title, the agent's name); it is
    stored as a read-only copy.

    Raises:
        HeaderFormatError: a field has the wrong type.
    """

    id: str
    created_at: float
    cwd: str
    lineage: Lineage | None = None
    meta: Mapping[str, str] = msgspec.field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        _require(
            isinstance(self.id, str) and self.id != "",
            f"header id must be a non-empty str, got {self.id!r}",
        )
        created_at = self.created_at
        _require(
            isinstance(created_at, int | float)
            and not isinstance(created_at, bool)
            and math.isfinite(created_at),
            f"header created_at must be a finite number, got {created_at!r}",
        )
        _require(isinstance(self.cwd, str), f"header cwd must be a str, got {self.cwd!r}")
        _require(
            self.lineage is None or isinstance(self.lineage, Lineage),
            f"header lineage must be a Lineage or None, got {self.lineage!r}",
        )
        meta = self.meta
        _require(
            isinstance(meta, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()),
            f"header meta must map str to str, got {meta!r}",
        )
        msgspec.structs.force_setattr(self, "created_at", float(created_at))
        msgspec.structs.force_setattr(self, "meta", MappingProxyType(dict(meta)))

    def __hash__(self) -> int:
        # Mappings are unhashable; the other fields make hashing consistent.
        return hash((self.id, self.created_at, self.cwd, self.lineage))

    @property
    def delegation(self) -> Delegation | None:
        """How this session was delegated to, for a child agent's; else ``None``."""
        lineage = self.lineage
        return None if lineage is None else lineage.delegation

    @property
    def delegator(self) -> str | None:
        """The session id of the agent that delegated to this session, for a child's."""
        lineage = self.lineage
        return None if lineage is None or lineage.delegation is None else lineage.parent

    def to_record(self) -> dict[str, object]:
        """Return the header as a JSON-ready dict of fresh plain values."""
        return {
            "id": self.id,
            "created_at": self.created_at,
            "cwd": self.cwd,
            "lineage": None if self.lineage is None else self.lineage.to_record(),
            "meta": dict(self.meta),
        }

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> SessionHeader:
        """Rebuild a header from a record written by `to_record`.

        Raises:
            HeaderFormatError: the record is malformed; the message names the
                field.
        """
        record = _check_keys("header record", record, _HEADER_KEYS)
        meta = record["meta"]
        _require(
            isinstance(meta, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()),
            f"header meta must map str to str, got {meta!r}",
        )
        lineage, labels = read_lineage(record["lineage"], cast(Mapping[str, str], meta))
        # The constructor checks the field types.
        return cls(
            cast(str, record["id"]),
            cast(float, record["created_at"]),
            cast(str, record["cwd"]),
            lineage,
            labels,
        )


Observer = Callable[["Session", Event], None]
"""Called synchronously with the session and each event appended to it."""


def _decoded(
    events: Iterable[Event], registry: EventRegistry, structure: Structure
) -> Iterator[Event]:
    """``events`` decoded through ``registry``, with their seqs and the
    invariants checked (advancing ``structure``) as each is taken.

    Raises:
        SessionInvariantError, EventFormatError, UnknownEventTypeError: as
            `Session.restore`.
    """
    payload_class = registry.payload_class
    classes: dict[str, type[EventPayload] | None] = {}
    for expected, given in enumerate(events):
        if given.seq != expected:
            raise SessionInvariantError(
                f"expected seq {expected}: seqs are contiguous from 0", seq=given.seq
            )
        type_name = given.type
        try:
            registered = classes[type_name]
        except KeyError:
            registered = classes[type_name] = payload_class(type_name)
        # Events decoded by this registry already carry their class.
        if type(given.payload) is registered:
            event = given
        else:
            try:
                event = registry.decode_event(given)
            except EventFormatError as error:
                raise type(error)(f"seq {given.seq}: {error}") from error
        _check(structure, (event,))
        yield event


class SessionEvents(Sequence[Event]):
    """A read-only, live view of a session's events, in seq order.

    Slicing returns a tuple (a snapshot). The events of closed turns are
    held packed, as their stored lines (`tether.session.packed`), and
    decoded each time they are read: what a read returns equals what was
    appended, though it may be another object.
    """

    __slots__ = ("_events", "_registry", "_structure")

    def __init__(self, events: PackedEvents, structure: Structure, registry: EventRegistry) -> None:
        self._events = events
        self._structure = structure
        self._registry = registry

    @overload
    def __getitem__(self, index: int) -> Event: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Event, ...]: ...
    def __getitem__(self, index: int | slice) -> Event | tuple[Event, ...]:
        return self._events[index]

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self._events)

    def __reversed__(self) -> Iterator[Event]:
        return reversed(self._events)

    def between(self, start: int, stop: int | None = None) -> Iterator[Event]:
        """The events from seq ``start`` to ``stop`` (exclusive; default: the
        current end), decoded a run at a time rather than all at once as a
        slice is. Both bounds are clamped to the log."""
        length = len(self._events)
        stop = length if stop is None else max(0, min(stop, length))
        return self._events.between(max(0, min(start, stop)), stop)

    def of_types(
        self, names: frozenset[str], start: int = 0, stop: int | None = None
    ) -> Iterator[Event]:
        """The events of types ``names`` from seq ``start`` to ``stop`` (as
        `between`), in order; only those are decoded."""
        length = len(self._events)
        stop = length if stop is None else max(0, min(stop, length))
        return self._events.of_types(names, max(0, min(start, stop)), stop)

    @property
    def packed(self) -> int:
        """How many events, from the first, are held packed (decoded when read)."""
        return self._events.packed

    def __repr__(self) -> str:
        return f"<events of a session: {len(self._events)}>"


class LoadedEvents(Sequence[Event]):
    """A stored log's events as a load decodes them, a block of lines at a
    time: each block is packed as it comes (`PackedEvents.add_lines`) and
    the log's structural invariants are checked over its events then, so
    the log is never held decoded whole.

    The first invariant broken is kept, not raised: `Session.restore`
    raises it, after every line was decoded (a damaged line later on is
    named first, as before).
    """

    __slots__ = ("error", "events", "structure")

    def __init__(self) -> None:
        self.events = PackedEvents()
        self.structure = Structure()
        self.error: SessionInvariantError | None = None

    @overload
    def __getitem__(self, index: int) -> Event: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Event, ...]: ...
    def __getitem__(self, index: int | slice) -> Event | tuple[Event, ...]:
        return self.events[index]

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def of_types(
        self, names: frozenset[str], start: int = 0, stop: int | None = None
    ) -> Iterator[Event]:
        """See `SessionEvents.of_types`."""
        return self.events.of_types(names, start, stop)

    def add(self, lines: bytes | None, events: list[Event]) -> None:
        """Add the next decoded ``events``, whose stored lines are ``lines``
        (``None``: not as they are, e.g. read the checked way)."""
        if self.error is None:
            try:
                _check(self.structure, events)
            except SessionInvariantError as error:
                self.error = error
        self.events.add_lines(lines, events)


def _check(structure: Structure, events: Iterable[Event]) -> None:
    """Advance ``structure`` over ``events`` decoded by the session's registry.

    Raises:
        SessionInvariantError: an event breaks an invariant; ``seq`` names it.
    """
    # This loop runs once per stored event. Most of a log is of types whose
    # one rule is to come inside an open step: that is checked here rather
    # than through a call per event.
    in_step_only = IN_STEP_ONLY
    for event in events:
        if event.type not in in_step_only or structure.open_step is None:
            try:
                structure.advance(event)
            except SessionInvariantError as error:
                raise SessionInvariantError(str(error), seq=event.seq) from None


class Session:
    """An append-only log of events with a header.

    `append` is the only way events enter a live session. It checks the
    payload and the log's structural invariants (listed in
    `tether.session.structure`) before anything changes, then records the
    event, then tells the observers. Events are immutable and ``seq`` equals
    an event's index.

    A session is not thread-safe; use it from one thread (the event loop's).
    """

    __slots__ = (
        "__weakref__",
        "_clock",
        "_dispatching",
        "_events",
        "_header",
        "_observers",
        "_registry",
        "_settings",
        "_settings_seen",
        "_structure",
        "_view",
    )

    def __init__(
        self,
        header: SessionHeader,
        *,
        registry: EventRegistry | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Create an empty session.

        ``registry`` (default `DEFAULT_REGISTRY`) decides which payload types
        may be appended; ``clock`` stamps each event's ``time``.

        Raises:
            TypeError: ``header`` is not a `SessionHeader`.
        """
        if not isinstance(header, SessionHeader):
            raise TypeError(f"expected a SessionHeader, got {header!r}")
        self._header = header
        self._registry = DEFAULT_REGISTRY if registry is None else registry
        self._clock = clock
        self._events = PackedEvents()
        self._structure = Structure()
        self._view = SessionEvents(self._events, self._structure, self._registry)
        self._settings = SessionSettings()
        self._settings_seen = 0
        """How many events :attr:`_settings` has folded (see :attr:`settings`)."""
        self._observers: tuple[Observer, ...] = ()
        self._dispatching = False

    @classmethod
    def restore(
        cls,
        header: SessionHeader,
        events: Iterable[Event],
        *,
        registry: EventRegistry | None = None,
        clock: Callable[[], float] = time.time,
        decoded: bool = False,
    ) -> Session:
        """Rebuild a session from its stored events, without notifying anyone.

        Each event is decoded through ``registry`` unless it already carries a
        payload of the registered class; ignorable types without a registered
        class stay opaque. The events must have seq 0, 1, 2, … and satisfy the
        same invariants as `append`. A log whose last turn never closed is
        restored as it is (see `tether.session.repair`).

        ``decoded=True`` says the events were decoded by ``registry`` with
        their seqs checked (as `LogBackend.load_events` gives them): only
        the invariants are checked then, and events a load packed
        (`LoadedEvents`, checked as they were decoded) are taken as they
        are. So are the events of another session with the same registry.
        The events restored are held packed.

        Raises:
            SessionInvariantError: an event has the wrong seq or breaks an
                invariant; ``seq`` and the message name it.
            EventFormatError: an event's data does not fit its type.
            UnknownEventTypeError: an event's type is neither registered nor
                ignorable.
        """
        session = cls(header, registry=registry, clock=clock)
        registry = session._registry
        if decoded and isinstance(events, LoadedEvents):
            if events.error is not None:
                raise events.error
            session._adopt(events.events.copy(), events.structure.copy())
            return session
        if isinstance(events, SessionEvents) and events._registry is registry:
            # Another session's events, checked by the same registry.
            session._adopt(events._events.copy(), events._structure.copy())
            return session
        if decoded:
            events = list(events)
            _check(session._structure, events)
            session._events.extend(events)
        else:
            session._events.extend(_decoded(events, registry, session._structure))
        session._events.pack()
        return session

    def _adopt(self, events: PackedEvents, structure: Structure) -> None:
        self._events = events
        self._structure = structure
        self._view = SessionEvents(events, structure, self._registry)
        self._settings = SessionSettings()
        self._settings_seen = 0

    # -- write side -----------------------------------------------------------------

    def append(self, payload: EventPayload) -> Event:
        """Append ``payload`` as the next event and return that event.

        In order: the payload's class is checked against the registry and the
        structural invariants are checked, with nothing changed if either
        fails; the event is recorded with ``seq = len(events)`` and ``time``
        from the clock; then each observer is called (see `observe`).

        Raises:
            TypeError: ``payload`` is not an `EventPayload`.
            UnknownEventTypeError: the payload's class is not registered.
            EventFormatError: a plugin payload's data is not JSON-shaped.
            SessionInvariantError: the event would break an invariant.
            ReentrantAppendError: called from an observer of this session.
        """
        if self._dispatching:
            raise ReentrantAppendError(
                f"session {self._header.id}: append called from an observer while seq "
                f"{len(self._events) - 1} is being published; observers must not append "
                "to the session they observe (schedule the append instead)"
            )
        seq = len(self._events)
        time = self._clock()
        # The core types are registered everywhere and keep their data
        # unbuilt: with a finite float time (x - x is 0.0 for those alone)
        # there is nothing left to check before building the event.
        if type(payload) in _BUILTIN_CLASSES and type(time) is float and time - time == 0.0:
            event = build_event(payload.type, seq, time, None, payload)
        else:
            if type(payload) not in _BUILTIN_CLASSES:
                self._registry.check_payload(payload)
            event = Event.from_payload(payload, seq=seq, time=time)
        structure = self._structure
        if event.type not in IN_STEP_ONLY or structure.open_step is None:
            structure.advance(event)
        events = self._events
        # A turn that begins closes the one before: its events are packed.
        if event.type == _TURN_START or events.unpacked >= UNPACKED_LIMIT:
            events.pack()
        events.append(event)
        if self._observers:
            self._publish(event)
        return event

    def observe(self, observer: Observer) -> Callable[[], None]:
        """Call ``observer(session, event)`` after each later append.

        Observers run synchronously, in registration order, after the event is
        recorded. Each runs over the observer list as it was when the
        publication began: one added or removed meanwhile takes effect from the
        next event. An observer that raises is logged and skipped; the append
        stands and the other observers still run. That includes an
        ``asyncio.CancelledError``, which a synchronous observer can only raise
        by mistake (``.result()`` of a cancelled future); ``KeyboardInterrupt``
        and ``SystemExit`` are not contained: they propagate from `append`,
        after the event is recorded. Observers must not append to the session
        they observe (that raises `ReentrantAppendError`).

        Returns:
            A callable that removes this registration; calling it again does
            nothing.
        """
        self._observers = (*self._observers, observer)
        removed = False

        def remove() -> None:
            nonlocal removed
            if removed:
                return
            removed = True
            observers = list(self._observers)
            # By identity, so an observer equal to another is not mistaken
            # for it.
            index = next(i for i, each in enumerate(observers) if each is observer)
            del observers[index]
            self._observers = tuple(observers)

        return remove

    def _publish(self, event: Event) -> None:
        observers = self._observers
        self._dispatching = True
        try:
            for observer in observers:
                try:
                    observer(self, event)
                except (Exception, asyncio.CancelledError):
                    _log.exception(
                        "session %s: observer %r failed on %s (seq %d); the event stands",
                        self._header.id,
                        observer,
                        event.type,
                        event.seq,
                    )
        finally:
            self._dispatching = False

    # -- read side --------------------------------------------------------------------

    @property
    def header(self) -> SessionHeader:
        """The session's header."""
        return self._header

    @property
    def id(self) -> str:
        """The session id (the header's)."""
        return self._header.id

    @property
    def registry(self) -> EventRegistry:
        """The registry this session checks and decodes payloads with."""
        return self._registry

    @property
    def events(self) -> SessionEvents:
        """A read-only live view of the events, in seq order."""
        return self._view

    @property
    def open_turn(self) -> int | None:
        """The number of the open turn, or ``None`` between turns."""
        return self._structure.open_turn

    @property
    def open_step(self) -> int | None:
        """The number of the open step within the open turn, or ``None``."""
        return self._structure.open_step

    @property
    def last_turn(self) -> int:
        """The highest turn number started so far (0 before the first)."""
        return self._structure.last_turn

    @property
    def settings(self) -> SessionSettings:
        """What the log says the session is set to now (options, grants, plan, title).

        Folded once, like the structure: each read advances it over the events
        appended since the last read, decoding only those of the settings
        types, so reading it per tool call costs nothing for a long log.
        """
        settings, end = self._settings, len(self._events)
        if self._settings_seen < end:
            for event in self._events.of_types(SETTINGS_TYPES, self._settings_seen, end):
                settings.advance(event)
            self._settings_seen = end
        return settings

    @property
    def pending_tool_calls(self) -> tuple[PendingToolCall, ...]:
        """Tool calls requested in the open step that have no result yet, in
        request order; empty when no step is open."""
        return self._structure.pending_tool_calls()

    def __repr__(self) -> str:
        return f"<Session {self._header.id!r}: {len(self._events)} events>"
