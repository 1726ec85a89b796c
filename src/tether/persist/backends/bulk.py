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
    with _gc_paused():
        # One json.loads over the texts joined as an array runs about twice as
        # fast as a call per text. A text that is not exactly one value makes
        # the array invalid or changes its length, or (if two such faults
        # cancel out) shifts values so that convert may reject one; each case
        # falls through to the decode per text, which names the first bad text.
        try:
            values = json.loads("[" + ",".join(texts) + "]")
        except ValueError:
            pass
        else:
            if len(values) == len(texts):
                try:
                    return convert(values)
                except BadRecordError:
                    pass
        values = []
        for index, text in enumerate(texts):
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
    index = 0
    try:
        for index, value in enumerate(values):
            check_event(value, None if first_seq is None else first_seq + index)
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
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector, restoring its previous state on exit.

    Decoding allocates containers fast enough to trigger collection over and
    over, each pass walking everything decoded so far, which can double the
    time of a large load. Decoded JSON holds no reference cycles, so there is
    nothing for the collector to find.

    Loads run in worker threads, possibly several at once: pauses are counted,
    because two threads saving and restoring the state independently could
    leave the collector off for good.
    """
    _collector.enter()
    try:
        yield
    finally:
        _collector.exit()
