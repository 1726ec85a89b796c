"""What the file tools count as text, and line-numbered pages of it.

A file is text when it is UTF-8 and its first 8 KiB hold no NUL byte; images
are recognized by their signature (:mod:`tether.plugins.fs.images`), so
``read`` can return them as images, or say what they are. A
page is a run of lines, numbered from 1 like ``cat -n``, each cut at
``max_line_chars``; reading a page from disk reads only the lines it shows
(plus the ones it skips), never the whole file.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import BinaryIO

import msgspec

from tether.plugins.fs.errors import FileToolError, binary
from tether.plugins.fs.images import ImageFileError, image_type

PROBE_BYTES = 8192
"""How much of a file's head is looked at to tell text from binary."""

READ_LINES = 2000
"""Lines ``read`` shows when no ``limit`` is given."""

MAX_LINE_CHARS = 2000
"""Characters of one line a page shows; the rest is cut with a marker."""


class Page(msgspec.Struct, frozen=True):
    """Lines ``first`` … ``first + len(lines) - 1`` of a file; ``more`` if lines follow."""

    lines: tuple[str, ...]
    first: int
    more: bool

    def render(self, shown: str) -> str:
        """The page as the model reads it: numbered lines, then where to read on."""
        if not self.lines:
            if self.first == 1:
                return f"({shown} is empty)"
            return f"({shown} has fewer than {self.first} lines)"
        body = "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(self.lines, self.first))
        if self.more:
            after = self.first + len(self.lines)
            body += f"\n[more lines follow; read on with offset={after}]"
        return body


def refuse_binary(head: bytes, shown: str) -> None:
    """Raise when ``head`` (a file's first bytes) is not the start of a text file.

    Raises:
        ImageFileError: it is an image.
        FileToolError: it holds a NUL byte.
    """
    media_type = image_type(head)
    if media_type is not None:
        raise ImageFileError(shown, media_type)
    if b"\0" in head[:PROBE_BYTES]:
        raise binary(shown)


def decode(data: bytes, shown: str) -> str:
    """``data`` as text (line endings kept).

    Raises:
        FileToolError: binary, or not UTF-8.
    """
    refuse_binary(data[:PROBE_BYTES], shown)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileToolError(
            f"{shown} is not UTF-8 text (byte {exc.start} cannot be decoded); look at it with "
            "the bash tool instead (for example iconv or xxd)"
        ) from None


def cut(line: str, max_chars: int) -> str:
    """``line`` without its line ending, cut to ``max_chars`` with a marker."""
    line = line.rstrip("\r\n")
    if len(line) > max_chars:
        return line[:max_chars] + f" … [line cut at {max_chars} characters]"
    return line


def page_of(lines: Iterable[str], offset: int, limit: int, max_chars: int) -> Page:
    """The page of ``lines`` starting at line ``offset`` (1-based), ``limit`` lines long."""
    shown: list[str] = []
    more = False
    for number, line in enumerate(lines, 1):
        if number < offset:
            continue
        if len(shown) == limit:
            more = True
            break
        shown.append(cut(line, max_chars))
    return Page(tuple(shown), offset, more)


def read_page(stream: BinaryIO, shown: str, offset: int, limit: int, max_chars: int) -> Page:
    """The page of the open binary ``stream`` at line ``offset``, reading only what it needs.

    A line longer than ``max_chars`` is read in pieces and only its head is kept.

    Raises:
        FileToolError: the file is binary or not UTF-8.
    """
    refuse_binary(stream.peek(PROBE_BYTES)[:PROBE_BYTES] if hasattr(stream, "peek") else b"", shown)
    byte_cap = max_chars * 4 + 4
    lines: list[str] = []
    number = 0
    more = False
    while True:
        piece = stream.readline(byte_cap)
        if not piece:
            break
        number += 1
        head = piece
        while not piece.endswith(b"\n"):
            piece = stream.readline(byte_cap)
            if not piece:
                break
        if number < offset:
            continue
        if len(lines) == limit:
            more = True
            break
        try:
            text = head.decode("utf-8")
        except UnicodeDecodeError as exc:
            if len(head) < byte_cap or exc.start < len(head) - 4:
                raise FileToolError(
                    f"{shown} is not UTF-8 text (line {number} cannot be decoded); look at it "
                    "with the bash tool instead (for example iconv or xxd)"
                ) from None
            text = head.decode("utf-8", errors="ignore")
        lines.append(cut(text, max_chars))
    return Page(tuple(lines), offset, more)
