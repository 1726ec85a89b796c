"""What an event payload is: the base classes and their one JSON encoder.

`EventPayload` is the contract every payload class meets (a stored ``type``
name, ``to_data`` and ``from_data``); `EventStruct` meets it with a frozen
msgspec ``Struct`` whose fields are its stored data, the codec's unit. The
built-in payloads are in `tether.session.vocabulary`; plugins subclass
`EventStruct` the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Self, cast

import msgspec

from tether.frozen import thaw
from tether.session.errors import EventFormatError

__all__ = ["EventPayload", "EventStruct", "encode_data", "format_error"]


class EventPayload:
    """Base class of typed event payloads.

    A subclass sets the class variable ``type`` (the stored type name, such
    as ``"llm/retry"``) and converts to and from the stored ``data`` with
    ``to_data`` and ``from_data``, with ``cls.from_data(payload.to_data()) ==
    payload``. `EventStruct` implements both from its fields; a plain
    subclass (a frozen dataclass, say) writes them by hand. Register it with
    an `EventRegistry` to append and load it.
    """

    __slots__ = ()

    type: ClassVar[str]

    def to_data(self) -> Mapping[str, object]:
        """Return this payload as JSON-shaped data: str, int, bool, finite float,
        None, mappings with str keys and sequences of those.

        The stored copy is frozen, so the result may be a fresh plain dict.
        """
        raise NotImplementedError

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Self:
        """Rebuild a payload from stored data (deeply frozen).

        Raises:
            EventFormatError: ``data`` does not fit this event type.
        """
        raise NotImplementedError


def _plain(value: object) -> object:
    # Payloads hold read-only mappings; msgspec encodes what they copy.
    if isinstance(value, Mapping):
        return dict(value)
    raise NotImplementedError(f"cannot encode {value!r}")


_ENCODER = msgspec.json.Encoder(enc_hook=_plain)

encode_data = _ENCODER.encode
"""Encode payloads and frozen data as compact JSON (read-only mappings as
objects). Raises ``UnicodeEncodeError`` for a lone surrogate."""


class EventStruct(msgspec.Struct, EventPayload, frozen=True, forbid_unknown_fields=True):
    """A payload whose fields are its stored data: the codec's unit.

    A subclass declares its fields as a frozen msgspec ``Struct`` does; the
    registry decodes stored data straight into it, checking every field's
    type (and rejecting unknown fields) in one pass. msgspec does not check
    types on construction, so a subclass whose fields need it checks them in
    ``__post_init__``, which also runs after a decode.

    A payload whose stored shape is not its fields names that shape in
    `stored_type` and converts with `stored` and `from_stored`.
    """

    @classmethod
    def stored_type(cls) -> type:
        """The type stored data decodes into (by default the class itself)."""
        return cls

    @classmethod
    def from_stored(cls, value: object) -> Self:
        """The payload for ``value``, decoded as `stored_type`."""
        return cast(Self, value)

    def stored(self) -> object:
        """What is encoded as this payload's data (by default the payload)."""
        return self

    def to_data(self) -> dict[str, object]:
        # Plain dicts and lists, built in C, with nothing JSON cannot hold
        # turned into something it can: bytes stay bytes, int keys stay ints,
        # NaN stays NaN, so freezing the data refuses them as for any
        # payload (encoding to JSON would store NaN as null, bytes as base64).
        built = msgspec.to_builtins(
            self.stored(), builtin_types=(bytes, bytearray, memoryview), enc_hook=_plain
        )
        return cast(dict[str, object], thaw(built))

    def to_json(self) -> bytes:
        """This payload's data as compact JSON, the form it is stored in."""
        return _ENCODER.encode(self.stored())

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Self:
        try:
            value: object = msgspec.convert(thaw(data), cls.stored_type())
        except msgspec.ValidationError as error:
            raise format_error(cls.type, error) from None
        return cls.from_stored(value)


def format_error(type_name: str, error: msgspec.ValidationError) -> EventFormatError:
    """The `EventFormatError` for stored data of ``type_name`` that failed to decode."""
    message = str(error)
    if message.startswith(f"{type_name}:"):
        return EventFormatError(message)
    return EventFormatError(f"{type_name}: {message}")
