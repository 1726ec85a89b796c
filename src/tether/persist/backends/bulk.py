"""Reading many stored records back at once, fast, and naming the first bad one.

A load decodes every event of a session, so the per-record cost of decoding
and checking is what a large load costs. Each record is decoded once, by
msgspec, into a `StoredEvent` whose data stays raw (checked to be well-formed
JSON); the session layer decodes that data into its payload, and is the one
to reject data that is not a JSON object. A bad record is
found by decoding record by record only once the fast pass has failed.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import msgspec

from tether.persist.backends.errors import InvalidRecordError
from tether.persist.backends.records import check_event
from tether.session.stored import StoredEvent, decode_event_line, decode_event_lines

__all__ = ["BadRecordError", "collector_paused", "decode_event_lines_of"]


class BadRecordError(Exception):
    """Record ``index`` (0-based) of a stored sequence cannot be read back.

    Backends turn it into :class:`CorruptLogError` with the file line or seq
    that ``index`` stands for; it never leaves a backend.
    """

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(index, reason)
        self.index = index
        self.reason = reason


def decode_event_lines_of(text: str, first_seq: int | None) -> list[StoredEvent]:
    """Decode the newline-terminated event lines of ``text``; with ``first_seq``,
    check that their seqs count up from it.

    Raises:
        BadRecordError: the first line that is not one valid event record.
    """
    try:
        events = decode_event_lines(text)
    except msgspec.DecodeError:
        events = []
        for index, line in enumerate(text.split("\n")[:-1]):
            try:
                events.append(decode_event_line(line))
            except msgspec.ValidationError:
                raise BadRecordError(index, _shape_error(line)) from None
            except msgspec.DecodeError as exc:
                raise BadRecordError(index, f"invalid JSON: {exc}") from None
    if len(events) != text.count("\n"):
        # A blank line decodes to nothing; the first one is the bad record.
        index = next(i for i, line in enumerate(text.split("\n")) if not line.strip())
        raise BadRecordError(index, "invalid JSON: an empty line")
    check_seqs(events, first_seq)
    # Every record's data must be an object; checked for each one (counting
    # ``"data":{`` in the text is fooled by a nested ``data`` key).
    check_data(events)
    return events


def check_seqs(events: Sequence[StoredEvent], first_seq: int | None) -> None:
    """With ``first_seq`` given, check that seqs count up by one from it.

    Raises:
        BadRecordError: the first event out of order.
    """
    if first_seq is None:
        return
    seqs = [event.seq for event in events]
    if seqs == list(range(first_seq, first_seq + len(seqs))):
        return
    for index, seq in enumerate(seqs):
        if seq != first_seq + index:
            raise BadRecordError(index, f"event seq is {seq}, expected {first_seq + index}")


_OPEN_BRACE = ord("{")


def check_data(events: Sequence[StoredEvent], first_index: int = 0) -> None:
    """Check that every event's raw data is a JSON object.

    Raises:
        BadRecordError: the first event whose data is not, its index counted
            from ``first_index``.
    """
    for index, event in enumerate(events, first_index):
        # Raw data is well-formed JSON without surrounding whitespace.
        if memoryview(event.data)[0] != _OPEN_BRACE:
            raise BadRecordError(index, "event data must be a JSON object")


def _shape_error(line: str) -> str:
    """Say what is wrong with ``line``, valid JSON but not an event record.

    Found record by record, only once a load has failed, by the check every
    event handed to a backend passes: its messages name the field.
    """
    try:
        check_event(msgspec.json.decode(line))
    except InvalidRecordError as exc:
        return str(exc)
    except (msgspec.DecodeError, ValueError, OverflowError) as exc:
        return f"invalid event record: {exc}"
    # The decoder is stricter than check_event here (a number too large for
    # a float time, say): still one clear line, never an assertion.
    return "invalid event record: a field does not have the stored type"


class _CollectorPause:
    """Counts overlapping pauses so the collector returns only when the last one ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._reenable = False

    def enter(self) -> None:
        with self._lock:
            if self._depth == 0:
                self._reenable = gc.isenabled()
                gc.disable()
            self._depth += 1

    def exit(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0 and self._reenable:
                gc.enable()


_collector = _CollectorPause()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector, restoring its previous state on exit.

    Building a loaded session allocates an event (and most often a payload)
    per record, fast enough to trigger collection over and over, each pass
    walking everything built so far: measured on 100,000 events, that adds
    20-80 ms to a 90 ms decode. Loaded events hold no reference cycles, so
    there is nothing for the collector to find. (The stored records
    themselves are untracked structs and need no pause.)

    Loads run in worker threads, possibly several at once: pauses are counted,
    because two threads saving and restoring the state independently could
    leave the collector off for good.
    """
    _collector.enter()
    try:
        yield
    finally:
        _collector.exit()
