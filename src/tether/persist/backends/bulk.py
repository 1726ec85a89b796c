"""Reading many stored records back at once, fast, and naming the first bad one.

A load decodes every event of a session, so the per-record cost of decoding
and checking is what a large load costs. These helpers keep that cost down
without giving up the exact location of a damaged record.
"""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar, cast

from tether.persist.backends.errors import InvalidRecordError
from tether.persist.backends.records import EventRecord, check_event

T = TypeVar("T")


class BadRecordError(Exception):
    """Record ``index`` (0-based) of a stored sequence cannot be read back.

    Backends turn it into :class:`CorruptLogError` with the file line or seq
    that ``index`` stands for; it never leaves a backend.
    """

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(index, reason)
        self.index = index
        self.reason = reason


def decode_records(texts: Sequence[str], convert: Callable[[list[object]], T]) -> T:
    """Decode each of ``texts`` as one JSON value and return ``convert(values)``.

    ``convert`` checks the values and raises :class:`BadRecordError` for the
    first one it rejects.

    Raises:
        BadRecordError: the first text that is not one JSON value, or the
            index ``convert`` reported.
    """
    return _decode_array("[" + ",".join(texts) + "]", len(texts), lambda: texts, convert)


def decode_lines(text: str, convert: Callable[[list[object]], T]) -> T:
    """:func:`decode_records` for the lines of ``text``, each ending in a newline.

    The lines become one array in a single pass over ``text``; they are split
    apart only to find a bad one.
    """
    return _decode_array(
        "[" + text[:-1].replace("\n", ",") + "]",
        text.count("\n"),
        lambda: text.split("\n")[:-1],
        convert,
    )


def _decode_array(
    array: str,
    count: int,
    texts: Callable[[], Sequence[str]],
    convert: Callable[[list[object]], T],
) -> T:
    """Decode ``array``, the ``count`` texts that ``texts()`` returns joined as
    one JSON array, and return ``convert(values)``; see :func:`decode_records`."""
    with collector_paused():
        # One json.loads over the texts joined as an array runs about twice as
        # fast as a call per text. A text that is not exactly one value makes
        # the array invalid or changes its length, or (if two such faults
        # cancel out) shifts values so that convert may reject one; each case
        # falls through to the decode per text, which names the first bad text.
        try:
            values = json.loads(array)
        except ValueError:
            pass
        else:
            if len(values) == count:
                try:
                    return convert(values)
                except BadRecordError:
                    pass
        values = []
        for index, text in enumerate(texts()):
            try:
                values.append(json.loads(text))
            except json.JSONDecodeError as exc:
                raise BadRecordError(
                    index, f"invalid JSON at column {exc.colno}: {exc.msg}"
                ) from None
        return convert(values)


def check_events(values: list[object], first_seq: int | None) -> list[EventRecord]:
    """Check that ``values`` are events; with ``first_seq``, that seqs count up from it.

    Returns ``values`` itself, typed.

    Raises:
        BadRecordError: the first value that is not a valid event.
    """
    for index, value in enumerate(values):
        expected = None if first_seq is None else first_seq + index
        # What check_event accepts, as one test without a call per value (a
        # load checks every event): four keys, the four event fields all
        # present and well typed. check_event judges whatever fails it.
        if type(value) is dict and len(value) == 4:
            kind, seq, time = value.get("type"), value.get("seq"), value.get("time")
            if (
                type(kind) is str
                and kind
                and type(seq) is int
                and (seq >= 0 if expected is None else seq == expected)
                and (type(time) is float or type(time) is int)
                and type(value.get("data")) is dict
            ):
                continue
        try:
            check_event(value, expected)
        except InvalidRecordError as exc:
            raise BadRecordError(index, str(exc)) from None
    return cast(list[EventRecord], values)


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

    Reading and decoding a log allocates containers fast enough to trigger
    collection over and over, each pass walking everything read so far, which
    can double the time of a large load. Rows and decoded JSON hold no
    reference cycles, so there is nothing for the collector to find.

    Loads run in worker threads, possibly several at once: pauses are counted,
    because two threads saving and restoring the state independently could
    leave the collector off for good.
    """
    _collector.enter()
    try:
        yield
    finally:
        _collector.exit()
