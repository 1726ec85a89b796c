"""The stored event record as backends read it: ``{type, seq, time, data}``.

A backend decodes each stored record once, into a `StoredEvent` whose
``data`` stays raw JSON (checked to be well formed, not yet built). The
registry then decodes that data, once, straight into the payload class of
its type (`EventRegistry.decode_stored`).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

__all__ = ["StoredEvent", "decode_event_line", "decode_event_lines"]


class StoredEvent(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """One stored event; ``seq`` is its index in the session's event list and
    ``data`` its JSON object, undecoded."""

    type: Annotated[str, msgspec.Meta(min_length=1)]
    seq: Annotated[int, msgspec.Meta(ge=0)]
    time: float
    data: msgspec.Raw

    def data_object(self) -> dict[str, object]:
        """Decode ``data`` into plain dicts, lists and scalars.

        Raises:
            msgspec.ValidationError: ``data`` is not a JSON object.
        """
        return _OBJECT.decode(self.data)

    def to_record(self) -> dict[str, object]:
        """This event as a plain dict ``{type, seq, time, data}``, data decoded."""
        return {"type": self.type, "seq": self.seq, "time": self.time, "data": self.data_object()}


_OBJECT = msgspec.json.Decoder(dict[str, object])
_RECORD = msgspec.json.Decoder(StoredEvent)

decode_event_line = _RECORD.decode
"""Decode one JSON record into a `StoredEvent` (raises ``msgspec.DecodeError``,
or its subclass ``ValidationError`` for a record of the wrong shape)."""

decode_event_lines = _RECORD.decode_lines
"""Decode newline-delimited JSON records into a list of `StoredEvent`."""
