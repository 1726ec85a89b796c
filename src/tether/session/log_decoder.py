"""Decoding a whole stored log straight into events, in one pass.

A load decodes every record of a session, so what one record costs is what
a load costs. `EventRegistry.decode_stored` takes records that a backend has
already decoded once (`StoredEvent`, data left raw) and decodes each one's
data a second time, into its payload. A `LogDecoder` does it in one step:
the event lines both backends store (a JSONL file's, the batches of a
SQLite database) are decoded by one msgspec call into a tagged union with
one record class per registered `EventStruct` type (tagged by ``type``), so
each line becomes its typed payload in C.

The one-pass decode is the fast path, not a second definition of what a
valid log is: it refuses everything the checked path refuses, and more. It
answers ``None`` for any log it cannot take whole: a line that is
damaged, out of order or of a type it has no class for (an ignorable type
without a class, a payload class of the hand-written style). The caller then
takes the checked path (backend records, then `EventRegistry.decode_stored`),
which is what names the damage, with its line or seq.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Union, cast

import msgspec

from tether.session.errors import EventFormatError
from tether.session.events import LAZY_PAYLOADS, Event, build_event, holding
from tether.session.vocabulary import EventPayload, EventStruct

if TYPE_CHECKING:
    from tether.session.registry import EventRegistry

__all__ = ["LogDecoder"]


_Finish = Callable[[object], EventPayload] | None

# `build_event` typed for what the loops below hand it: a decoded value that
# is the registered payload class by construction. (Typed, not cast per
# record: ``cast`` is a call at run time.)
_build = cast(Callable[[object, int, float, None, object], Event], build_event)


class _Record(msgspec.Struct, frozen=True, gc=False):
    """One stored event line; a subclass per event type types its ``data``
    as the payload's stored type and is tagged by the event ``type`` (also
    its ``type_name``)."""

    type_name: ClassVar[str]

    seq: int
    time: float
    data: object


class LogDecoder:
    """Decodes whole logs into events for the types of one registry.

    Built by `EventRegistry.log_decoder` from the classes registered at the
    time; a registration change builds a new one. Events come out as
    `EventRegistry.decode_stored` makes them: each carrying its payload, a
    core payload's data built only when read.
    """

    __slots__ = ("_lines", "_types")

    def __init__(self, registry: EventRegistry) -> None:
        records: list[type[_Record]] = []
        types: dict[str, tuple[_Finish, bool]] = {}
        for type_name in registry.type_names():
            cls = registry.payload_class(type_name)
            if cls is None or not issubclass(cls, EventStruct):
                continue
            stored_type = cls.stored_type()
            finish: _Finish = None if stored_type is cls else cls.from_stored
            lazy = cls in LAZY_PAYLOADS
            try:
                record = msgspec.defstruct(
                    f"_Record_{len(records)}",
                    [("data", stored_type)],
                    bases=(_Record,),
                    tag_field="type",
                    tag=type_name,
                    forbid_unknown_fields=True,
                    namespace={"type_name": type_name},
                )
                msgspec.json.Decoder(record)
            except TypeError:
                # A stored type msgspec cannot decode into: its events take
                # the checked path, which says why it fails there.
                continue
            records.append(cast(type[_Record], record))
            types[type_name] = (finish, lazy)
        self._types = types
        # A union of one class is no union: msgspec wants the class itself.
        union: object = Union[tuple(records)] if len(records) > 1 else records[0]  # noqa: UP007
        self._lines = msgspec.json.Decoder(union).decode_lines

    def decodes(self, type_name: str) -> bool:
        """Whether this decoder has a class for events of ``type_name``."""
        return type_name in self._types

    def lines(self, block: bytes, first_seq: int = 0) -> list[Event] | None:
        """The events of newline-terminated event lines that begin at seq ``first_seq``.

        Returns ``None`` unless every line is a whole, valid record of a type
        this decoder has a class for, with seqs counting up from ``first_seq``.
        """
        try:
            records = cast(list[_Record], self._lines(block))
        except msgspec.DecodeError:
            return None
        # A blank line decodes to nothing.
        if len(records) != block.count(b"\n"):
            return None
        types = self._types
        events: list[Event] = []
        append = events.append
        build = _build
        # This loop runs once per event.
        for seq, record in enumerate(records, first_seq):
            if record.seq != seq:
                return None
            type_name = record.type_name
            payload = record.data
            finish, lazy = types[type_name]
            if finish is not None or not lazy:
                event = _finished(type_name, seq, record.time, payload, finish)
                if event is None:
                    return None
                append(event)
                continue
            append(build(type_name, seq, record.time, None, payload))
        return events


def _finished(
    type_name: str, seq: int, time: float, value: object, finish: _Finish
) -> Event | None:
    """The event of a payload that needs more than its decode; ``None`` if it is refused."""
    try:
        payload = cast(EventPayload, value) if finish is None else finish(value)
        return holding(type_name, seq, time, payload)
    except EventFormatError:
        return None
