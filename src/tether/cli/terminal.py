"""What the command line knows about where it writes: a terminal, and whether it may colour.

Colours and Markdown are for a person at a terminal: a stream that is not a
terminal (a pipe, a file) gets plain text, and so does any stream when
``NO_COLOR`` is set (to anything non-empty, as https://no-color.org says) or
``TERM`` is ``dumb``.

A line a person types is read with :func:`read_line`: on the event loop, never
in a thread, so Ctrl-C (a cancel of the reading task) ends the read at once.
"""

from __future__ import annotations

import asyncio
import os
from typing import TextIO


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (a closed or detached stream is not)."""
    try:
        return stream.isatty()
    except (OSError, ValueError, AttributeError):
        return False


def colours_wanted(stream: TextIO) -> bool:
    """Whether text written to ``stream`` may carry colours and styles."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return is_terminal(stream)


async def read_line(stream: TextIO) -> str:
    """One line read from ``stream`` (the newline included; ``""`` at end of input).

    The bytes are read from the stream's descriptor when the event loop says it
    is readable (``loop.add_reader``), never in a thread: cancelling the
    awaiting task (Ctrl-C cancels the turn, or ends the command) ends the read
    at once and leaves nothing blocked behind, so the process can exit. Nothing
    after the newline is consumed: a terminal hands over one line per read, and
    any other stream is read a byte at a time. A descriptor the loop cannot
    watch (a regular file) is read directly: it never blocks.

    Raises:
        OSError: the descriptor cannot be read.
    """
    fd = stream.fileno()
    size = 4096 if is_terminal(stream) else 1
    line = bytearray()
    while not line.endswith(b"\n"):
        await _readable(fd)
        try:
            chunk = os.read(fd, size)
        except BlockingIOError:
            continue
        if not chunk:
            break
        line += chunk
    return line.decode(errors="replace")


async def _readable(fd: int) -> None:
    """Return once ``fd`` has something to read (at once for a descriptor the loop
    cannot watch)."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    try:
        loop.add_reader(fd, wake)
    except PermissionError:
        return  # a regular file: always readable
    try:
        await ready
    finally:
        loop.remove_reader(fd)
