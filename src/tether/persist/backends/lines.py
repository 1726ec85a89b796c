"""Event lines: how both backends store a batch of events.

A batch is stored as its event lines: each event in compact JSON with its
keys in the order ``type, seq, time, data``, each line ending in a newline.
The JSONL backend appends them to a session's file; the SQLite backend
keeps each batch's lines in one row. Reading a log back is then the same for
both: the lines of the whole log, from seq 0, decoded a block of lines at a
time as they are read, each block in one pass (`LogDecoder.lines`), or, when
that pass refuses it, parsed line by line so the first bad one is named.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

import msgspec

from tether.persist.backends.bulk import BadRecordError, decode_event_lines_of
from tether.persist.backends.records import EventRecord, encode_record
from tether.session.log import LoadedEvents
from tether.session.stored import StoredEvent

if TYPE_CHECKING:
    from tether.session.registry import EventRegistry

__all__ = [
    "BLOCK",
    "decode_blocks",
    "drained",
    "encode_lines",
    "gathered",
    "parse_lines",
    "parse_lines_after",
    "past_lines",
]

_ENCODER = msgspec.json.Encoder()

_T = TypeVar("_T")

BLOCK = 1 << 20
"""About how many bytes of event lines a load or a listing decodes at a time."""


def encode_lines(batch: Sequence[EventRecord]) -> bytes:
    """The event lines of a batch checked by `records.parse_batch`, each ending in a newline.

    Data that comes encoded is stored as it is, save for a newline in its
    whitespace, which a line cannot hold: such data is stored compacted.
    """
    if not batch:
        return b""
    # A batch whose data all comes encoded (what the writer hands over) holds
    # nothing the strict encoder would refuse or mend but a lone surrogate in
    # a type name, which msgspec refuses: one call encodes it all.
    if all(type(event["data"]) is msgspec.Raw for event in batch):
        try:
            lines = _ENCODER.encode_lines(batch)
        except UnicodeEncodeError:
            pass
        else:
            if lines.count(b"\n") == len(batch):
                return lines
    return b"".join([encode_record(_on_one_line(event)) + b"\n" for event in batch])


def _on_one_line(event: EventRecord) -> EventRecord:
    data = event["data"]
    if type(data) is msgspec.Raw and b"\n" in bytes(data):
        return {**event, "data": msgspec.Raw(msgspec.json.format(data, indent=-1))}
    return event


def parse_lines(block: bytes, first_seq: int | None) -> builtins.list[StoredEvent]:
    """Parse newline-terminated event lines; with ``first_seq``, seqs must count up from it.

    Raises:
        BadRecordError: the first line that is not valid UTF-8, JSON or an event.
    """
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError as exc:
        index = block.count(b"\n", 0, exc.start)
        column = exc.start - block.rfind(b"\n", 0, exc.start)
        raise BadRecordError(index, f"invalid UTF-8 at byte {column} of the line") from None
    return decode_event_lines_of(text, first_seq)


def past_lines(block: bytes, start: int, count: int | None) -> tuple[int, int]:
    """The offset just past the next ``count`` lines of ``block`` from offset
    ``start`` (all of them with ``None``), and how many lines that is: fewer
    than ``count`` at the block's end.

    ``block`` is whole lines, each ending in a newline, and ``start`` is where
    one begins. Only newlines are looked for: no line is parsed.
    """
    lines = block.count(b"\n", start)
    if count is None or count >= lines:
        return len(block), lines
    for _ in range(count):
        start = block.index(b"\n", start) + 1
    return start, count


def parse_blocks(blocks: Iterable[bytes]) -> builtins.list[StoredEvent]:
    """Every event line of ``blocks`` (runs of whole lines of a log that begins at
    seq 0, taken one at a time), parsed, in order.

    Raises:
        BadRecordError: a line is not a valid event, or its seq is out of order;
            its ``index`` counts lines from the first of ``blocks`` (it is the seq).
    """
    events: builtins.list[StoredEvent] = []
    for block in blocks:
        try:
            events += parse_lines(block, len(events))
        except BadRecordError as exc:
            raise BadRecordError(len(events) + exc.index, exc.reason) from None
    return events


def parse_lines_after(
    blocks: Iterable[bytes], first_seq: int, after_seq: int, limit: int | None
) -> tuple[builtins.list[StoredEvent], int, int]:
    """Of the event lines in ``blocks`` (runs of whole lines in log order, taken
    one at a time), which begin at seq ``first_seq``: the events whose seq is
    greater than ``after_seq``, at most ``limit`` of them (all with ``None``),
    in order; how many bytes of ``blocks`` come up to the last line read; and
    the seq of the line there.

    No block is taken after the one that fills ``limit``, and the lines up to
    ``after_seq`` are counted, not parsed: what a call holds is its events and
    one block.

    Raises:
        BadRecordError: a line read is not a valid event, or its seq is out of
            order; its ``index`` counts lines from the first of ``blocks``.
    """
    events: builtins.list[StoredEvent] = []
    seq = first_seq
    size = 0
    for block in blocks:
        begin, skipped = past_lines(block, 0, max(0, after_seq + 1 - seq))
        stop, taken = past_lines(block, begin, None if limit is None else limit - len(events))
        if taken:
            try:
                events += parse_lines(block[begin:stop], seq + skipped)
            except BadRecordError as exc:
                raise BadRecordError(seq + skipped - first_seq + exc.index, exc.reason) from None
        seq += skipped + taken
        size += stop
        if limit is not None and len(events) >= limit:
            break
    return events, size, seq


def decode_blocks(blocks: Iterable[bytes], registry: EventRegistry) -> LoadedEvents:
    """Decode the event lines of a whole log, which begin at seq 0, into events.

    ``blocks`` are runs of whole lines in log order, read one at a time:
    each is decoded (every line checked), then kept packed as it was read
    (`LoadedEvents.add`), so a load holds the log's lines and one block's
    events, never the whole log decoded. Each block is decoded in one pass
    when every line allows it; otherwise parsed as :func:`parse_lines`
    parses them, then decoded by ``registry``.

    Raises:
        BadRecordError: a line is not a valid event, or its seq is out of
            order; its ``index`` counts lines from the log's first.
        UnknownEventTypeError, EventFormatError: as `EventRegistry.decode_stored`.
    """
    decoder = registry.log_decoder()
    events = LoadedEvents()
    for block in blocks:
        first = len(events)
        decoded = decoder.lines(block, first)
        if decoded is not None:
            events.add(block, decoded)
            continue
        try:
            decoded = registry.decode_stored(parse_lines(block, first))
        except BadRecordError as exc:
            raise BadRecordError(first + exc.index, exc.reason) from None
        events.add(None, decoded)
    return events


def gathered(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """Runs of whole lines ``pieces`` joined into blocks of about :data:`BLOCK` bytes.

    Each piece is taken only when its block is built, so a lazy ``pieces``
    is read a block ahead at most.
    """
    block: builtins.list[bytes] = []
    size = 0
    for piece in pieces:
        block.append(piece)
        size += len(piece)
        if size >= BLOCK:
            yield b"".join(block)
            block, size = [], 0
    if block:
        yield b"".join(block)


def drained(items: builtins.list[_T]) -> Iterator[_T]:
    """The items of ``items`` in order, each removed from the list as it is
    taken, so rows read whole are freed as they are decoded, not after."""
    items.reverse()
    while items:
        yield items.pop()
