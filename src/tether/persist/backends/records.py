"""The stored shape of session headers and events, checked at the backend boundary.

Backends accept any mapping from the session layer and hand back plain dicts
typed by the :class:`HeaderRecord` and :class:`EventRecord` shapes below. The
same checks run on the way in (a bad record raises :class:`InvalidRecordError`
before anything is written) and on the way out (a backend turns the error into
:class:`CorruptLogError` with the location of the damage).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import NotRequired, TypedDict, cast

import msgspec

from tether.persist.backends.errors import (
    CorruptLogError,
    InvalidRecordError,
    InvalidSessionIdError,
    StoreConflictError,
)
from tether.session.errors import HeaderFormatError
from tether.session.lineage import Lineage

_SURROGATE = re.compile("[\ud800-\udfff]")
_SESSION_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
_HEADER_KEYS = frozenset({"id", "created_at", "cwd", "lineage", "meta"})
_EVENT_KEYS = frozenset({"type", "seq", "time", "data"})

# Strict JSON (no NaN or Infinity, which other readers reject) in the compact
# form the JSONL backend's cheap scans rely on.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_FAST = msgspec.json.Encoder()
_PLAIN = msgspec.json.Decoder(dict[str, object])


class LineageRecord(TypedDict):
    """Where a session came from: its parent, how many events it copied (a fork),
    and how it was delegated to (a child agent's; see :mod:`tether.session.lineage`)."""

    parent: str
    seed_length: int
    delegation: NotRequired[dict[str, object]]


class HeaderRecord(TypedDict):
    """What a session log stores outside its event list."""

    id: str
    created_at: float
    cwd: str
    lineage: LineageRecord | None
    meta: dict[str, str]


class EventRecord(TypedDict):
    """One durable event; ``seq`` is its index in the session's event list.

    ``data`` is a JSON object, or (from `Event.to_stored_record`) one already
    encoded, as a ``msgspec.Raw``: that is stored as it is, once checked to be
    a well-formed JSON object.
    """

    type: str
    seq: int
    time: float
    data: dict[str, object] | msgspec.Raw


def validate_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is safe to use as a file name.

    Safe means 1 to 128 characters from ``[A-Za-z0-9._-]``, not starting with a
    dot (which keeps ids clear of ``.``, ``..``, hidden and temporary files).
    Ids differing only in case collide on case-insensitive file systems.

    Raises:
        InvalidSessionIdError: the id is not a string of that form.
    """
    if isinstance(session_id, str) and _SESSION_ID.fullmatch(session_id):
        return session_id
    raise InvalidSessionIdError(session_id)


def _is_number(value: object) -> bool:
    # bool is an int subclass, but True is not a timestamp.
    return type(value) is float or type(value) is int


def parse_header(obj: object) -> HeaderRecord:
    """Check ``obj`` against the header shape and return it as a fresh dict.

    ``created_at`` comes back as a float; ``lineage.parent`` must be a valid
    session id.

    Raises:
        InvalidRecordError: ``obj`` is not a mapping with exactly the header
            keys, or a value has the wrong type.
    """
    if not isinstance(obj, Mapping):
        raise InvalidRecordError(f"header must be a JSON object, got {type(obj).__name__}")
    if obj.keys() != _HEADER_KEYS:
        raise InvalidRecordError(f"header keys are {sorted(obj)}, expected {sorted(_HEADER_KEYS)}")
    try:
        session_id = validate_session_id(obj["id"])
    except InvalidSessionIdError as exc:
        raise InvalidRecordError(f"header id: {exc}") from None
    created_at, cwd, lineage, meta = obj["created_at"], obj["cwd"], obj["lineage"], obj["meta"]
    if not _is_number(created_at):
        raise InvalidRecordError(f"header created_at must be a number, got {created_at!r}")
    if not isinstance(cwd, str):
        raise InvalidRecordError(f"header cwd must be a string, got {cwd!r}")
    if not isinstance(meta, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in meta.items()
    ):
        raise InvalidRecordError(f"header meta must map strings to strings, got {meta!r}")
    return {
        "id": session_id,
        "created_at": float(cast(float, created_at)),
        "cwd": cwd,
        "lineage": None if lineage is None else _parse_lineage(lineage),
        "meta": dict(meta),
    }


def parse_stored_header(session_id: str, text: object) -> HeaderRecord:
    """The header a database row holds for ``session_id`` (JSON text, or already decoded).

    Raises:
        CorruptLogError: it is not a valid header, or it names another session.
    """
    try:
        header = parse_header(json.loads(text) if isinstance(text, str | bytes) else text)
    except ValueError as exc:
        raise CorruptLogError(session_id, f"stored header: {exc}") from None
    if header["id"] != session_id:
        raise CorruptLogError(session_id, f"stored header names session {header['id']!r}")
    return header


def _parse_lineage(obj: object) -> LineageRecord:
    try:
        lineage = Lineage.from_record(obj)
    except HeaderFormatError as exc:
        raise InvalidRecordError(str(exc)) from None
    try:
        validate_session_id(lineage.parent)
    except InvalidSessionIdError as exc:
        raise InvalidRecordError(f"header lineage parent: {exc}") from None
    return cast(LineageRecord, lineage.to_record())


def check_event(obj: object, seq: int | None = None) -> None:
    """Check that a decoded JSON value is an event; with ``seq`` given, that it has that seq.

    This is the check every stored event passes through on load, so it checks
    and nothing more: ``obj`` is neither copied nor converted.

    Raises:
        InvalidRecordError: ``obj`` is not a dict with exactly the event keys,
            a value has the wrong type, or its seq is not ``seq``.
    """
    if type(obj) is not dict or obj.keys() != _EVENT_KEYS:
        got = f"keys {sorted(obj)}" if isinstance(obj, dict) else type(obj).__name__
        raise InvalidRecordError(
            f"event must be a JSON object with keys {sorted(_EVENT_KEYS)}, got {got}"
        )
    kind, event_seq, time, data = obj["type"], obj["seq"], obj["time"], obj["data"]
    if type(kind) is not str or not kind:
        raise InvalidRecordError(f"event type must be a non-empty string, got {kind!r}")
    if type(event_seq) is not int or event_seq < 0:
        raise InvalidRecordError(f"event seq must be a non-negative integer, got {event_seq!r}")
    if seq is not None and event_seq != seq:
        raise InvalidRecordError(f"event seq is {event_seq}, expected {seq}")
    # Spelled out rather than calling _is_number: this runs once per loaded event.
    if type(time) is not float and type(time) is not int:
        raise InvalidRecordError(f"event time must be a number, got {time!r}")
    if type(data) is not dict:
        raise InvalidRecordError(f"event data must be a JSON object, got {type(data).__name__}")


def parse_event(obj: object) -> EventRecord:
    """Check an event handed to a backend and return it as a fresh, canonical dict.

    Any mappings are accepted for the event and its data. The result has its
    keys in the order ``type, seq, time, data`` and ``time`` as a float.
    Data that comes encoded (a ``msgspec.Raw``) is checked to be one JSON
    object by :func:`parse_batch`, for a whole batch at once.

    Raises:
        InvalidRecordError: as :func:`check_event`.
    """
    # What the session layer hands over, plain dicts with well-typed fields,
    # passes one combined test; anything else takes the path that copies
    # mappings and says what is wrong.
    if type(obj) is dict and len(obj) == 4:
        kind, seq, time, data = obj.get("type"), obj.get("seq"), obj.get("time"), obj.get("data")
        if (
            type(kind) is str
            and kind
            and type(seq) is int
            and seq >= 0
            and (type(time) is float or type(time) is int)
        ):
            if type(data) is dict:
                return {"type": kind, "seq": seq, "time": float(time), "data": data}
            if type(data) is msgspec.Raw:
                # Encoded data is written without the strict encoder, which
                # would have refused a time JSON cannot hold.
                if not math.isfinite(time):
                    raise InvalidRecordError(
                        f"record is not storable as JSON: event time is {time!r}"
                    )
                return {"type": kind, "seq": seq, "time": float(time), "data": data}
    if isinstance(obj, Mapping):
        obj = dict(obj)
        if isinstance(obj.get("data"), Mapping):
            obj["data"] = dict(obj["data"])
    check_event(obj)
    event = cast(EventRecord, obj)
    return {
        "type": event["type"],
        "seq": event["seq"],
        "time": float(event["time"]),
        "data": event["data"],
    }


_RAW = msgspec.json.Decoder(msgspec.Raw)
_RAW_LINES = _RAW.decode_lines


def _check_raw(kind: str, data: msgspec.Raw) -> None:
    """Check that encoded data is one JSON object."""
    try:
        value = _RAW.decode(data)
    except msgspec.DecodeError as exc:
        raise InvalidRecordError(f"event data is not valid JSON: {exc}") from None
    if bytes(memoryview(value)[:1]) != b"{":
        raise InvalidRecordError(f"{kind}: event data must be a JSON object")


def _raws_are_objects(raws: Sequence[msgspec.Raw]) -> bool:
    """Whether each of ``raws`` is one JSON object, checked in one pass over them all."""
    # Joined by newlines, one object a line: JSON text holds no raw newline
    # but as whitespace, so data holding one (or more than one value, or
    # none) makes the line count or a line's JSON come out wrong.
    joined = b"\n".join(raws)
    try:
        count = len(_RAW_LINES(joined))
    except msgspec.DecodeError:
        return False
    return count == len(raws) and joined[:1] == b"{" and joined.count(b"\n{") == count - 1


def parse_batch(session_id: str, events: Sequence[Mapping[str, object]]) -> list[EventRecord]:
    """Check a batch handed to ``write``: each event's shape, and seqs that run on by one.

    Raises:
        InvalidRecordError: an event does not have the event shape.
        StoreConflictError: the batch skips or repeats a seq.
    """
    batch: list[EventRecord] = []
    raws: list[msgspec.Raw] = []
    for index, obj in enumerate(events):
        try:
            event = parse_event(obj)
        except InvalidRecordError as exc:
            raise InvalidRecordError(
                f"session {session_id!r}, event {index} of batch: {exc}"
            ) from None
        if batch and event["seq"] != batch[0]["seq"] + index:
            raise StoreConflictError(
                f"session {session_id!r}: batch seqs are not contiguous "
                f"(event {index} has seq {event['seq']}, expected {batch[0]['seq'] + index})"
            )
        data = event["data"]
        if type(data) is msgspec.Raw:
            raws.append(data)
        batch.append(event)
    if raws and not _raws_are_objects(raws):
        # One of them is not: find it and say which.
        for index, event in enumerate(batch):
            data = event["data"]
            if type(data) is msgspec.Raw:
                try:
                    _check_raw(event["type"], data)
                except InvalidRecordError as exc:
                    raise InvalidRecordError(
                        f"session {session_id!r}, event {index} of batch: {exc}"
                    ) from None
    return batch


def check_continues(session_id: str, batch: Sequence[EventRecord], next_seq: int) -> None:
    """Check that a non-empty, contiguous ``batch`` starts where the stored log ends.

    Raises:
        StoreConflictError: the first seq of the batch is not ``next_seq``.
    """
    if batch[0]["seq"] != next_seq:
        raise StoreConflictError(
            f"session {session_id!r}: batch starts at seq {batch[0]['seq']}, "
            f"but the stored log continues at seq {next_seq}"
        )


def encode_json(obj: object) -> str:
    """Encode ``obj`` as compact, strict JSON, keeping non-ASCII text as is.

    The result is guaranteed to encode as UTF-8: a lone surrogate (text that
    came from bytes that were not UTF-8, decoded with ``surrogateescape``)
    becomes U+FFFD, so such input is stored rather than failing the write.

    Raises:
        InvalidRecordError: ``obj`` holds something JSON cannot represent (a
            non-string key, an arbitrary object, NaN or an infinity).
    """
    return encode_json_bytes(obj).decode("utf-8")


def encode_record(event: EventRecord) -> bytes:
    """:func:`encode_json_bytes` for a parsed event, whose data may come encoded."""
    data = event["data"]
    if type(data) is msgspec.Raw:
        # parse_batch checked the time and the data; the rest are a str and an int.
        try:
            return _FAST.encode(event)
        except UnicodeEncodeError:
            event = {**event, "data": _PLAIN.decode(data)}
    return encode_json_bytes(event)


def encode_json_bytes(obj: object) -> bytes:
    """:func:`encode_json`, as UTF-8 bytes."""
    # msgspec encodes about 8x faster than the stdlib, but writes NaN and the
    # infinities as null and refuses lone surrogates. So an encoding holding
    # no "null" had neither; one that does (or that failed) is encoded again
    # by the strict stdlib path, which rejects the first and replaces the
    # second. Nulls are rare in stored events, and so is that second pass.
    try:
        data = _FAST.encode(obj)
    except (TypeError, UnicodeEncodeError):
        pass
    else:
        if b"null" not in data:
            return data
    return _strict(obj).encode("utf-8")


def _strict(obj: object) -> str:
    try:
        text = _ENCODER.encode(obj)
    except (TypeError, ValueError) as exc:
        raise InvalidRecordError(f"record is not storable as JSON: {exc}") from None
    # With ensure_ascii off, lone surrogates pass through the encoder and
    # would only fail later, half way through a write.
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = _SURROGATE.sub("\ufffd", text)
    return text
