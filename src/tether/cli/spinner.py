"""A transient status on a terminal: a spinner and a few words, drawn in place.

``tether chat`` draws its status in the line editor's toolbar; ``tether run``
on a terminal draws it on stderr with a :class:`Spinner`. Both animate the
same frames (:func:`frame`).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import AsyncIterator
from typing import TextIO

FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
INTERVAL = 0.1
"""Seconds between frames."""
_CLEAR = "\r\x1b[K"
_UP_CLEAR = "\x1b[A\x1b[K"


def frame(since: float) -> str:
    """The spinner's frame for a status shown since ``since`` (``time.monotonic()``)."""
    return FRAMES[int((time.monotonic() - since) / INTERVAL) % len(FRAMES)]


class Spinner:
    """A :data:`~tether.cli.surface.Status` drawn on the last line of a terminal stream.

    Calling it with a text shows ``⠋ text`` at once, in place of what it showed
    before; with ``None`` it erases it. :meth:`hide` erases it until the next
    frame, so a whole line can be written in its place (the frame after that is
    drawn below it). A text of several lines takes as many lines, each cut to
    the terminal's width; the frame heads the first. Frames advance only
    inside :meth:`running`. A write that fails stops the drawing; the status
    is never worth an error.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._text: str | None = None
        self._since = 0.0
        self._shown = 0
        """Lines the status takes on the terminal now (0: not drawn)."""
        self._broken = False
        self._changed = asyncio.Event()

    def __call__(self, text: str | None) -> None:
        if text is None:
            self._text = None
            self.hide()
            return
        if self._text is None:  # a status appears: its frames start; a change goes on
            self._since = time.monotonic()
        self._text = text
        self._draw()
        self._changed.set()

    def hide(self) -> None:
        """Erase the status line, if drawn."""
        if self._shown:
            self._put(self._erase())
            self._shown = 0

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Animate the status while the block runs; on leaving, the task is stopped and
        the status erased."""
        async with asyncio.TaskGroup() as tasks:
            spinning = tasks.create_task(self._spin(), name="spinner")
            try:
                yield
            finally:
                spinning.cancel()
                self(None)

    async def _spin(self) -> None:
        while True:
            if self._text is None:
                self._changed.clear()
                await self._changed.wait()
                continue
            self._draw()
            await asyncio.sleep(INTERVAL)

    def _draw(self) -> None:
        if self._text is None:
            return
        width = shutil.get_terminal_size().columns - 1
        lines = f"{frame(self._since)} {self._text}".split("\n")
        erase = self._erase()
        self._shown = len(lines)
        self._put(erase + "\n".join(line[:width] for line in lines))

    def _erase(self) -> str:
        """What erases the status drawn, leaving the cursor where it began."""
        return _CLEAR + _UP_CLEAR * max(self._shown - 1, 0)

    def _put(self, text: str) -> None:
        if self._broken:
            return
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):
            self._broken = True
