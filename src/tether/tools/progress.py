"""A running tool call's progress: how long it has run and the last lines of its output.

Progress is **not stored**: a session's log keeps a call and its result,
never the output as it streamed (a chatty command would balloon the log).
It travels on the bus as ``tool/progress`` (:data:`TOOL_PROGRESS`, a
notice), which every front end may show while the call runs and forget once
its ``tool/result`` arrives.

* :class:`ToolProgress` — one report: the call, its tool, the seconds it has
  run, the last lines of its output so far.
* :class:`ProgressReporter` — what a tool feeds its output to; it keeps the
  last :data:`TAIL_LINES` lines and emits a report at most every
  :data:`MIN_INTERVAL` seconds when output arrived, and every
  :data:`HEARTBEAT` seconds when none did (so a silent command's elapsed time
  still advances).
"""

from __future__ import annotations

import asyncio
import codecs
from collections.abc import Callable

import msgspec

from tether.agent.types import Agent
from tether.runtime.keys import Notice

__all__ = [
    "HEARTBEAT",
    "MIN_INTERVAL",
    "TAIL_LINES",
    "TOOL_PROGRESS",
    "ProgressReporter",
    "ToolProgress",
]

TAIL_LINES = 5
"""Lines of output a report carries (the last ones)."""
MIN_INTERVAL = 0.25
"""Seconds between two reports, at least (at most four a second)."""
HEARTBEAT = 1.0
"""Seconds after which a report is sent even without new output."""
MAX_LINE = 400
"""Characters of one reported line (a longer one is cut, with ``…``)."""
_KEPT = 4 * MAX_LINE
"""Characters of one line held (its end: a progress bar rewriting it grows no further)."""


class ToolProgress(msgspec.Struct, frozen=True, kw_only=True):
    """Where a running call stands: ``call_id`` of tool ``name`` has run ``elapsed``
    seconds, and ``tail`` holds the last lines of its output (oldest first; the
    last one may be unfinished)."""

    call_id: str
    name: str
    elapsed: float
    tail: tuple[str, ...] = ()


TOOL_PROGRESS = Notice[Agent, ToolProgress]("tool/progress")
"""A running call of ``agent`` made progress (emitted by ``bash`` while a
foreground command runs, at most every :data:`MIN_INTERVAL` seconds); not stored."""


class ProgressReporter:
    """Collects one call's output and reports it through ``send`` at a modest rate.

    :meth:`start` sends a first report (nothing output yet) and begins the
    heartbeat; :meth:`feed` takes output as it arrives; :meth:`close` stops
    every report still due. Output is decoded as UTF-8 (an incomplete
    sequence waits for its rest); carriage returns start a line over, so a
    progress bar shows its latest state. Must be used on the event loop's
    thread.
    """

    __slots__ = ("_call", "_decoder", "_due", "_lines", "_loop", "_name", "_send", "_sent", "_t0")

    def __init__(self, call_id: str, name: str, send: Callable[[ToolProgress], None]) -> None:
        self._call = call_id
        self._name = name
        self._send = send
        self._loop = asyncio.get_running_loop()
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._lines: list[str] = [""]
        self._t0 = self._loop.time()
        self._sent = self._t0
        self._due: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Send the first report and keep reporting until :meth:`close`."""
        self._t0 = self._loop.time()
        self._report()

    def feed(self, data: bytes) -> None:
        """Take ``data``, the next output of the call; a report follows within
        :data:`MIN_INTERVAL` seconds."""
        text = self._decoder.decode(data)
        if not text:
            return
        parts = text.split("\n")
        self._lines[-1] = (self._lines[-1] + parts[0])[-_KEPT:]
        self._lines.extend(part[-_KEPT:] for part in parts[1:])
        del self._lines[: -(TAIL_LINES + 1)]
        when = max(self._sent + MIN_INTERVAL, self._loop.time())
        if self._due is not None:
            if self._due.when() <= when:
                return
            self._due.cancel()
        self._due = self._loop.call_at(when, self._report)

    def close(self) -> None:
        """No report is sent anymore."""
        if self._due is not None:
            self._due.cancel()
            self._due = None
        self._send = _drop

    def snapshot(self) -> ToolProgress:
        """The report as it stands now."""
        lines = [_overwritten(line) for line in self._lines]
        if not lines[-1]:
            lines.pop()
        tail = tuple(_cut(line) for line in lines[-TAIL_LINES:])
        return ToolProgress(
            call_id=self._call, name=self._name, elapsed=self._loop.time() - self._t0, tail=tail
        )

    def _report(self) -> None:
        self._sent = self._loop.time()
        self._due = self._loop.call_later(HEARTBEAT, self._report)
        self._send(self.snapshot())


def _overwritten(line: str) -> str:
    """What a terminal shows of ``line``: the text after its last carriage return
    (one that ends it, as a progress bar's does, starts nothing yet)."""
    line = line.rstrip("\r")
    return line.rsplit("\r", 1)[-1] if "\r" in line else line


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…"


def _drop(_progress: ToolProgress) -> None:
    """A reporter's ``send`` once it is closed."""
