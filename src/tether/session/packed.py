"""A session's events held packed: as their stored lines, decoded when read.

A decoded event costs about 200 bytes beyond its text (the event, its
payload, its strings, a seq and a time), while its stored line (compact
JSON, ``{type, seq, time, data}``) costs only its text: the streamed chunk
of one word that most of a long session is made of is a line of about 90
bytes. `PackedEvents` keeps the events of a log in two parts:

- **packed**: the events' stored lines, joined in blocks of about 1 MiB (a
  ``bytes`` of lines and an ``array`` of where each line ends: 4 bytes an
  event), decoded again each time they are read;
- **decoded**: the events appended since the last `PackedEvents.pack`, as
  they were appended.

Only events of the core types tether writes are packed (one decoder, that
of a registry that knows only those, decodes them whatever a session's
registry holds); an event of a plugin's type, an opaque one, or one whose
data has no stored line of its own (text with a lone surrogate) stays
decoded where it stands. Packing uses the encoder persistence stores lines
with, and a line decodes back to an event equal to the one packed.

Not thread-safe, like the session that holds it.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import re
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

import msgspec

from tether.session.events import Event
from tether.session.registry import CORE_PAYLOADS, EventRegistry

__all__ = ["PackedEvents", "encode_events"]

BLOCK = 1 << 20
"""About how many bytes of lines a block holds."""

_RUN = 1024
"""How many events at most an iteration decodes at a time."""

_CACHED = 64
"""How many neighbouring events a read of one packed event decodes and keeps."""

_DECODER = EventRegistry().log_decoder()
_PACKABLE = {cls.type: cls for cls in CORE_PAYLOADS if _DECODER.decodes(cls.type)}
_ENCODE_LINES = msgspec.json.Encoder().encode_lines
_CODES = {type_name: code for code, type_name in enumerate(_PACKABLE, 1)}
"""The tag of each packable type; 0 stands for an event held decoded."""


@functools.lru_cache(maxsize=64)
def _tag_pattern(names: frozenset[str]) -> re.Pattern[bytes]:
    """What finds the tags of events of types ``names`` and of those held decoded."""
    codes = bytes(sorted({0} | {_CODES[name] for name in names if name in _CODES}))
    return re.compile(b"[" + re.escape(codes) + b"]")


def encode_events(events: Sequence[Event]) -> bytes:
    """The stored lines of ``events``, each ending in a newline, as persistence writes them.

    Raises:
        ValueError: an event's data has no line of its own (text with a lone
            surrogate, which a store mends).
    """
    records = [event.to_stored_record() for event in events]
    if not all(type(record["data"]) is msgspec.Raw for record in records):
        raise ValueError("an event's data cannot be encoded as it is")
    return _ENCODE_LINES(records)


class _Block:
    """The packed events from seq ``first``: their ``lines``, where each
    ends, and each one's type as a byte (``tags``, `_CODES`).

    An event held decoded (``pinned``) has an empty line and the tag 0. A
    block never changes once made: blocks are joined into a new one.
    """

    __slots__ = ("ends", "first", "lines", "pinned", "tags")

    def __init__(self, first: int, lines: bytes, ends: array[int], tags: bytes) -> None:
        self.first = first
        self.lines = lines
        self.ends = ends
        self.tags = tags
        self.pinned: dict[int, Event] | None = None

    def __len__(self) -> int:
        return len(self.ends)

    def decode(self, start: int, stop: int) -> list[Event]:
        """The events at indices ``start`` to ``stop`` (exclusive) of this block."""
        pinned = self.pinned
        if pinned is None:
            return self._lines(start, stop)
        events: list[Event] = []
        while start < stop:
            held = pinned.get(start)
            if held is not None:
                events.append(held)
                start += 1
                continue
            run = start + 1
            while run < stop and run not in pinned:
                run += 1
            events += self._lines(start, run)
            start = run
        return events

    def _lines(self, start: int, stop: int) -> list[Event]:
        ends = self.ends
        begin = ends[start - 1] if start else 0
        events = _DECODER.lines(bytes(self.lines[begin : ends[stop - 1]]), self.first + start)
        if events is None:
            raise RuntimeError(f"packed events from seq {self.first + start} do not decode")
        return events


class PackedEvents(Sequence[Event]):
    """A log's events, in seq order, the older ones packed (see the module docstring).

    Reading a packed event decodes it (a run of its neighbours is kept, so
    reading in order decodes each once). Events are only ever added at the
    end.
    """

    __slots__ = ("_blocks", "_cache", "_firsts", "_gathered", "_packed", "_tail")

    def __init__(self) -> None:
        self._blocks: list[_Block] = []
        self._firsts: list[int] = []
        self._gathered = 0
        """The index of the first of the small blocks at the end still to be
        joined into one (`_extend`)."""
        self._packed = 0
        self._tail: list[Event] = []
        self._cache: tuple[int, list[Event]] = (0, [])

    @property
    def packed(self) -> int:
        """How many events, from the first, are held packed."""
        return self._packed

    @property
    def unpacked(self) -> int:
        """How many events, from the last packed one on, are held decoded."""
        return len(self._tail)

    def __len__(self) -> int:
        return self._packed + len(self._tail)

    def append(self, event: Event) -> None:
        """Add ``event`` (seq ``len(self)``) at the end, held decoded."""
        self._tail.append(event)

    def extend(self, events: Iterable[Event]) -> None:
        """Add ``events`` (from seq ``len(self)`` on) at the end, held decoded."""
        self._tail.extend(events)

    def pack(self) -> None:
        """Pack the events held decoded, those that can be."""
        tail = self._tail
        if tail:
            self._tail = []
            self._add(None, tail)

    def add_lines(self, lines: bytes | None, events: list[Event]) -> None:
        """Add ``events`` at the end, packed; ``lines`` are their stored lines,
        kept as they are when every one of them can be packed (``None``: the
        events are encoded again)."""
        if events:
            self._add(lines, events)

    def copy(self) -> PackedEvents:
        """A log of the same events; the packed blocks, which never change, are shared."""
        copy = PackedEvents()
        copy._blocks = list(self._blocks)
        copy._firsts = list(self._firsts)
        copy._gathered = self._gathered
        copy._packed = self._packed
        copy._tail = list(self._tail)
        return copy

    def _add(self, lines: bytes | None, events: list[Event]) -> None:
        packable = _PACKABLE
        if lines is not None and all(
            type(event.payload) is packable.get(event.type) for event in events
        ):
            pieces = lines.split(b"\n")
            pieces.pop()
            tags = bytes(map(_CODES.__getitem__, [event.type for event in events]))
            self._extend(lines, _ends(pieces), tags, None)
            return
        pieces, pinned = _encoded(events)
        tags = bytes(
            0 if not piece else _CODES[event.type]
            for piece, event in zip(pieces, events, strict=True)
        )
        lines = b"".join(piece + b"\n" for piece in pieces if piece)
        self._extend(lines, _ends(pieces), tags, pinned)

    def _extend(
        self, lines: bytes, ends: array[int], tags: bytes, pinned: dict[int, Event] | None
    ) -> None:
        """Put packed events at the end, in a block of their own; small blocks
        at the end are joined into one once they hold `BLOCK` bytes of lines.

        A block a load read comes whole; what a session packs as it goes (a
        turn's lines) is gathered so. Each block is made at its final size and
        never grows: a block grown in place a turn at a time costs a copy per
        turn and leaves behind, in the allocator, holes that later blocks do
        not fit.
        """
        block = _Block(self._packed, lines, ends, tags)
        block.pinned = pinned
        blocks = self._blocks
        blocks.append(block)
        self._firsts.append(self._packed)
        self._packed += len(ends)
        if len(lines) >= BLOCK // 2:
            self._gathered = len(blocks)
            return
        gathered = blocks[self._gathered :]
        if len(gathered) > 1 and sum(len(each.lines) for each in gathered) >= BLOCK:
            del blocks[self._gathered :], self._firsts[self._gathered :]
            blocks.append(_joined(gathered))
            self._firsts.append(gathered[0].first)
            self._gathered = len(blocks)

    def _locate(self, index: int) -> tuple[_Block, int]:
        at = bisect.bisect_right(self._firsts, index) - 1
        block = self._blocks[at]
        return block, index - block.first

    def between(self, start: int, stop: int) -> Iterator[Event]:
        """The events from seq ``start`` to ``stop`` (exclusive), decoded a run at a time.

        ``start`` and ``stop`` must lie within ``0..len(self)``.
        """
        # Read together, before the first yield: a turn that begins while this
        # runs packs the tail into a new list, and the two must agree.
        packed, tail = self._packed, self._tail
        while start < min(stop, packed):
            block, local = self._locate(start)
            end = min(local + _RUN, len(block), stop - block.first)
            yield from block.decode(local, end)
            start = block.first + end
        if start < stop:
            yield from tail[start - packed : stop - packed]

    def get(self, index: int) -> Event:
        """The event at ``index`` (``0 <= index < len(self)``)."""
        if index >= self._packed:
            return self._tail[index - self._packed]
        start, cached = self._cache
        if start <= index < start + len(cached):
            return cached[index - start]
        block, local = self._locate(index)
        begin = local - local % _CACHED
        run = block.decode(begin, min(begin + _CACHED, len(block)))
        self._cache = (block.first + begin, run)
        return run[local - begin]

    @overload
    def __getitem__(self, index: int) -> Event: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Event, ...]: ...
    def __getitem__(self, index: int | slice) -> Event | tuple[Event, ...]:
        """The event at ``index``, or a tuple of those of a slice (a snapshot)."""
        length = len(self)
        if isinstance(index, slice):
            return self.select(range(*index.indices(length)))
        if index < 0:
            index += length
        if not 0 <= index < length:
            raise IndexError("event index out of range")
        return self.get(index)

    def select(self, indices: range) -> tuple[Event, ...]:
        """The events at ``indices`` (each within ``0..len(self)``), in their order."""
        if not indices:
            return ()
        low, high = min(indices), max(indices) + 1
        if indices.step == 1:
            return tuple(self.between(low, high))
        run = list(self.between(low, high))
        return tuple(run[index - low] for index in indices)

    def of_types(
        self, names: frozenset[str], start: int = 0, stop: int | None = None
    ) -> Iterator[Event]:
        """The events of types ``names`` from seq ``start`` to ``stop`` (exclusive;
        default: the end), in order; only they are decoded.

        ``start`` and ``stop`` must lie within ``0..len(self)``.
        """
        stop = len(self) if stop is None else stop
        pattern = _tag_pattern(names)
        # Read together, before the first yield (see between).
        packed, tail = self._packed, self._tail
        at = bisect.bisect_right(self._firsts, start) - 1 if start < packed else len(self._blocks)
        for block in self._blocks[max(at, 0) :]:
            first = block.first
            if first >= min(stop, packed):
                break
            low, high = max(start - first, 0), min(stop - first, len(block))
            for run_start, run_stop in _runs(pattern.finditer(block.tags, low, high)):
                for event in block.decode(run_start, run_stop):
                    if event.type in names:
                        yield event
        for event in tail[max(start - packed, 0) : max(stop - packed, 0)]:
            if event.type in names:
                yield event

    def __iter__(self) -> Iterator[Event]:
        # Events appended while this runs are yielded too, as a list's
        # iterator does.
        start = 0
        while start < len(self):
            stop = len(self)
            yield from self.between(start, stop)
            start = stop

    def __reversed__(self) -> Iterator[Event]:
        stop = len(self)
        while stop > 0:
            start = max(0, stop - _CACHED)
            yield from reversed(list(self.between(start, stop)))
            stop = start


def _runs(matches: Iterator[re.Match[bytes]]) -> Iterator[tuple[int, int]]:
    """The runs of consecutive positions ``matches`` found, as (start, stop)."""
    run_start = run_stop = -1
    for match in matches:
        at = match.start()
        if at != run_stop:
            if run_stop > run_start:
                yield run_start, run_stop
            run_start = at
        run_stop = at + 1
    if run_stop > run_start:
        yield run_start, run_stop


def _ends(pieces: list[bytes]) -> array[int]:
    """Where each of the lines ``pieces`` (newlines left out) ends once
    joined, each with its newline; an empty piece takes no room."""
    return array("I", itertools.accumulate(len(piece) + 1 if piece else 0 for piece in pieces))


def _encoded(events: list[Event]) -> tuple[list[bytes], dict[int, Event] | None]:
    """The stored line of each of ``events`` (its newline left out), and the
    events, by index, that stay decoded (their line empty)."""
    lines = [b""] * len(events)
    packable = [
        i for i, event in enumerate(events) if type(event.payload) is _PACKABLE.get(event.type)
    ]
    try:
        encoded = encode_events([events[i] for i in packable]).split(b"\n")
        encoded.pop()
    except ValueError:
        encoded = []
    if len(encoded) == len(packable):
        for index, line in zip(packable, encoded, strict=True):
            lines[index] = line
    else:
        # Rare: text a line cannot hold as it is; each is tried alone.
        for index in packable:
            with contextlib.suppress(ValueError):
                lines[index] = encode_events([events[index]])[:-1]
    pinned = {index: events[index] for index, line in enumerate(lines) if not line}
    return lines, pinned or None


def _joined(blocks: list[_Block]) -> _Block:
    """One block of the events of ``blocks`` (consecutive, in order)."""
    ends: array[int] = array("I")
    pinned: dict[int, Event] = {}
    offset = 0
    for block in blocks:
        count = len(ends)
        ends.extend(end + offset for end in block.ends)
        if block.pinned:
            pinned.update((index + count, event) for index, event in block.pinned.items())
        offset += len(block.lines)
    joined = _Block(
        blocks[0].first,
        b"".join(block.lines for block in blocks),
        ends,
        b"".join(block.tags for block in blocks),
    )
    joined.pinned = pinned or None
    return joined
