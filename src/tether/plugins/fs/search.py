"""``glob`` and ``grep`` over the walk of :mod:`tether.plugins.fs.tree`.

Both work on the disk (an editor's unsaved buffers are not searched). Glob
patterns use ``*`` and ``?`` (within one path segment), ``**`` (any number of
segments), ``[abc]`` and ``{a,b}``. The pattern of ``glob`` matches paths
relative to the directory searched, as a shell would; a ``glob`` filter of
``grep`` without a ``/`` matches file names at any depth (as in ripgrep).

``grep`` searches the bytes of each file with a Python regular expression
(so ``\\w`` and case-insensitivity are ASCII-only for non-ASCII text), and
passes over binary files (a NUL byte in the first 8 KiB), as ripgrep does.
"""

from __future__ import annotations

import bisect
import re
import stat
from collections.abc import Callable, Iterable, Iterator

import msgspec

from tether.plugins.fs import GrepMode
from tether.plugins.fs.beneath import Beneath
from tether.plugins.fs.errors import FileToolError
from tether.plugins.fs.text import PROBE_BYTES, cut
from tether.plugins.fs.tree import join, walk


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A regular expression matching the ``/``-separated paths ``pattern`` describes.

    Raises:
        FileToolError: an unclosed ``[`` or ``{``.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    depth = 0
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "^") else i + 1)
            if end < 0:
                raise FileToolError(f"invalid glob {pattern!r}: '[' is never closed")
            body = pattern[i + 1 : end]
            if body[:1] in ("!", "^"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
            continue
        elif c == "{":
            depth += 1
            out.append("(?:")
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
        elif c == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(c))
        i += 1
    if depth:
        raise FileToolError(f"invalid glob {pattern!r}: '{{' is never closed")
    return re.compile("".join(out) + r"\Z")


def _relative(path: str, start: str) -> str:
    """``path`` (found by walking ``start``; both relative to one root) relative to ``start``."""
    return path[len(start.rstrip("/")) + 1 :] if start else path


def _files(root: Beneath, start: str) -> Iterator[tuple[Beneath, str, str]]:
    """Each file of the walk of ``start``: its directory (open until the next file
    of another directory), its name in it, and its path beneath ``root``."""
    for here, directory, names in walk(root, start):
        for name in names:
            yield here, name, join(directory, name)


def _mtime(root: Beneath, path: str) -> float:
    try:
        return root.stat(path).st_mtime
    except OSError:
        return 0.0


def _never() -> bool:
    return False


def _check(stopped: Callable[[], bool]) -> None:
    if stopped():
        raise FileToolError("the search was cancelled")


def glob_files(
    root: Beneath, start: str, pattern: str, stopped: Callable[[], bool] = _never
) -> list[str]:
    """Files under ``start`` whose path relative to it matches ``pattern``, newest first.

    ``start`` and the paths returned are relative to ``root``.

    Raises:
        FileToolError: the pattern is absolute or invalid, or ``stopped()`` became true.
    """
    if pattern.startswith("/"):
        raise FileToolError("the glob pattern must be relative; give the directory as path")
    regex = glob_regex(pattern)
    found = []
    for here, name, path in _files(root, start):
        _check(stopped)
        if regex.match(_relative(path, start)):
            found.append((path, _mtime(here, name)))
    found.sort(key=lambda item: (-item[1], item[0]))
    return [path for path, _ in found]


class GrepQuery(msgspec.Struct, frozen=True):
    pattern: str
    mode: GrepMode = "files_with_matches"
    glob: str | None = None
    ignore_case: bool = False
    before: int = 0
    after: int = 0

    def compile(self) -> re.Pattern[bytes]:
        """The pattern as a bytes regex.

        Raises:
            FileToolError: the pattern is not a valid regular expression.
        """
        flags = re.MULTILINE | (re.IGNORECASE if self.ignore_case else 0)
        try:
            return re.compile(self.pattern.encode("utf-8"), flags)
        except re.error as exc:
            raise FileToolError(
                f"invalid regular expression {self.pattern!r}: {exc}; call grep again with a "
                "Python regular expression as pattern (a backslash before ( ) [ ] { } . * + ? | "
                "matches it as text)"
            ) from None


class Hit(msgspec.Struct, frozen=True):
    """One file with matches: its path, its modification time, and what is shown of it."""

    path: str
    mtime: float
    count: int
    lines: tuple[tuple[int, str, bool], ...] = ()
    """``(line number, text, is a match)`` in order; context lines are not matches."""


def _filter(query: GrepQuery) -> re.Pattern[str] | None:
    if query.glob is None:
        return None
    pattern = query.glob if "/" in query.glob else "**/" + query.glob
    return glob_regex(pattern)


def grep(
    root: Beneath,
    start: str,
    query: GrepQuery,
    *,
    max_chars: int,
    stopped: Callable[[], bool] = _never,
) -> Iterator[Hit]:
    """Every file under ``start`` (or the file ``start``) with a match of ``query``.

    ``start`` is relative to ``root``; each file is opened beneath it, and a
    hit's path is absolute (``root``'s path joined to it). ``stopped`` is asked
    between files; once it is true the search ends.

    Raises:
        FileToolError: the regex or the glob filter is invalid, or the search was stopped.
    """
    regex = query.compile()
    only = _filter(query)
    try:
        is_file = stat.S_ISREG(root.stat(start).st_mode)
    except OSError:
        is_file = False
    files: Iterable[tuple[Beneath, str, str]] = (
        [(root, start, start)] if is_file else _files(root, start)
    )
    base = start.rpartition("/")[0] if is_file else start
    for here, name, path in files:
        _check(stopped)
        if only is not None and not only.match(_relative(path, base)):
            continue
        found = _read_text_file(here, name)
        if found is None:
            continue
        data, mtime = found
        first = regex.search(data)
        if first is None:
            continue
        where = join(root.root, path)
        if query.mode == "files_with_matches":
            yield Hit(where, mtime, 1)
            continue
        starts = _matching_line_starts(regex, data, first)
        if query.mode == "count":
            yield Hit(where, mtime, len(starts))
            continue
        yield Hit(where, mtime, len(starts), _shown_lines(data, starts, query, max_chars))


def _read_text_file(root: Beneath, path: str) -> tuple[bytes, float] | None:
    """The bytes and modification time of the regular text file ``path``; ``None`` for
    anything else (binary, special, unreadable), which a search passes over."""
    try:
        stream, info = root.open_file(path)
        with stream:
            data = stream.read()
    except OSError:
        return None
    return None if b"\0" in data[:PROBE_BYTES] else (data, info.st_mtime)


def _matching_line_starts(
    regex: re.Pattern[bytes], data: bytes, first: re.Match[bytes]
) -> list[int]:
    """The offsets of the starts of the lines on which a match begins."""
    starts: list[int] = []
    match: re.Match[bytes] | None = first
    while match is not None:
        begin = data.rfind(b"\n", 0, match.start()) + 1
        if not starts or starts[-1] != begin:
            starts.append(begin)
        end = data.find(b"\n", match.start())
        if end < 0:
            break
        match = regex.search(data, max(end + 1, match.end()))
    return starts


def _shown_lines(
    data: bytes, starts: list[int], query: GrepQuery, max_chars: int
) -> tuple[tuple[int, str, bool], ...]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    offsets = [0]
    for line in lines[:-1]:
        offsets.append(offsets[-1] + len(line) + 1)
    matched = {bisect.bisect_right(offsets, s) - 1 for s in starts}
    shown: set[int] = set()
    for index in matched:
        shown.update(range(max(0, index - query.before), min(len(lines), index + query.after + 1)))
    return tuple(
        (
            index + 1,
            cut(lines[index].decode("utf-8", errors="replace"), max_chars),
            index in matched,
        )
        for index in sorted(shown)
    )
