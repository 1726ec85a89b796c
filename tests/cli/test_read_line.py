"""``terminal.read_line``: one line from a stream on the event loop, never in a thread."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

import pytest

from tether.cli.terminal import read_line


@contextmanager
def pipe() -> Iterator[tuple[TextIO, int]]:
    """A pipe's read end as a text stream, and its write end's descriptor."""
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd) as stream:
        try:
            yield stream, write_fd
        finally:
            os.close(write_fd)


async def test_reads_one_line_at_a_time_and_nothing_past_it() -> None:
    with pipe() as (stream, write_fd):
        os.write(write_fd, b"yes\nno\n")
        assert await read_line(stream) == "yes\n"
        assert os.read(stream.fileno(), 100) == b"no\n"  # left where it was


async def test_end_of_input_is_an_empty_line() -> None:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"last")
    os.close(write_fd)
    with os.fdopen(read_fd) as stream:
        assert await read_line(stream) == "last"
        assert await read_line(stream) == ""


async def test_a_cancelled_read_ends_at_once_and_leaves_nothing_behind() -> None:
    threads = threading.active_count()
    with pipe() as (stream, write_fd):
        reading = asyncio.ensure_future(read_line(stream))
        await asyncio.wait({reading}, timeout=0.05)  # it waits for a line that never comes
        assert not reading.done()
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        assert threading.active_count() == threads
        os.write(write_fd, b"later\n")
        assert await read_line(stream) == "later\n"  # the descriptor is free to read again
