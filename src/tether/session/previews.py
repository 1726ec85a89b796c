"""``tool/previewed``: what a frontend showed of a tool call before it ran.

A tool may describe a call before it runs (:mod:`tether.tools.preview`): its
kind, a title, the files it touches, and for a file edit the diff it
applies. The editor bridge shows that to its client, and records it here so
that ``session/load`` shows the client the same thing again::

    {"id": "call-1", "kind": "edit", "title": "edit a.txt",
     "locations": [{"path": "/src/a.txt", "line": 3}],
     "diffs": [{"path": "/src/a.txt", "old_text": "a\\n", "new_text": "b\\n"}]}

``old_text`` is absent (``null``) for a file the call creates. A diff is
stored whole while its two texts hold at most :data:`STORED_DIFF_CHARS`
characters together; a bigger one is stored as the lines that change, with
:data:`CONTEXT_LINES` lines around them, from line ``first_line`` of the
file, and ``shortened`` says so in words a person reads (a change still
bigger than the cap is stored without its texts). Not model-visible. It is
part of the core vocabulary: a log holding it loads without the bridge.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

from tether.session.fields import as_tuple, bad_field, check_id, check_ordinal, check_str
from tether.session.payload import EventStruct

__all__ = [
    "CONTEXT_LINES",
    "STORED_DIFF_CHARS",
    "PreviewDiff",
    "PreviewLocation",
    "ToolPreviewed",
    "stored_diff",
]

STORED_DIFF_CHARS = 1 << 20
"""The most characters (old and new text together) a diff is stored with whole."""

CONTEXT_LINES = 3
"""Unchanged lines kept around the change of a shortened diff."""

_TYPE = "tool/previewed"


class PreviewLocation(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A file the call touches, and the 1-based line if one."""

    path: str
    line: int | None = None

    def __post_init__(self) -> None:
        check_id(f"{_TYPE} location", "path", self.path)
        if self.line is not None:
            check_ordinal(f"{_TYPE} location", "line", self.line)


class PreviewDiff(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A change to the file at ``path``, from ``old_text`` (``None``: a new file) to
    ``new_text``; both start at line ``first_line`` of the file. ``shortened``
    says how the texts were cut to be stored (``None``: they are whole)."""

    path: str
    old_text: str | None
    new_text: str
    first_line: int = 1
    shortened: str | None = None

    def __post_init__(self) -> None:
        where = f"{_TYPE} diff"
        check_id(where, "path", self.path)
        if self.old_text is not None:
            check_str(where, "old_text", self.old_text)
        check_str(where, "new_text", self.new_text)
        check_ordinal(where, "first_line", self.first_line)
        if self.shortened is not None:
            check_str(where, "shortened", self.shortened)


class ToolPreviewed(EventStruct, frozen=True, omit_defaults=True):
    """``tool/previewed``: the preview of call ``id`` a frontend showed (see the module docs)."""

    type: ClassVar[str] = _TYPE

    id: str
    kind: str
    title: str
    locations: tuple[PreviewLocation, ...] = ()
    diffs: tuple[PreviewDiff, ...] = ()

    def __post_init__(self) -> None:
        check_id(self.type, "id", self.id)
        check_id(self.type, "kind", self.kind)
        check_str(self.type, "title", self.title)
        for name, kind in (("locations", PreviewLocation), ("diffs", PreviewDiff)):
            entries = as_tuple(self.type, name, getattr(self, name))
            for entry in entries:
                if not isinstance(entry, kind):
                    raise bad_field(self.type, f"{name} entries", kind.__name__, entry)
            msgspec.structs.force_setattr(self, name, entries)


def stored_diff(
    path: str, old_text: str | None, new_text: str, cap: int = STORED_DIFF_CHARS
) -> PreviewDiff:
    """The diff from ``old_text`` to ``new_text`` of ``path`` as it is stored: whole
    when the texts hold at most ``cap`` characters together, else shortened.

    The change is found by comparing the texts from both ends in blocks, never
    line by line, so shortening a 10 MB file's diff costs milliseconds.
    """
    old = old_text or ""
    total = len(old) + len(new_text)
    if total <= cap:
        return PreviewDiff(path, old_text, new_text)
    head = _same_head(old, new_text)
    tail = _same_tail(old, new_text, min(len(old), len(new_text)) - head)
    start = _line_start(old, head, CONTEXT_LINES)  # the same in both: they agree up to head
    # Both excerpts end the same distance from their text's end, inside the
    # shared tail, at the later of the two ends: a line's end in both.
    after = min(
        len(old) - _line_end(old, len(old) - tail, CONTEXT_LINES),
        len(new_text) - _line_end(new_text, len(new_text) - tail, CONTEXT_LINES),
    )
    old_part = old[start : len(old) - after]
    new_part = new_text[start : len(new_text) - after]
    first_line = old.count("\n", 0, start) + 1
    if len(old_part) + len(new_part) > cap:
        return PreviewDiff(
            path,
            None if old_text is None else "",
            "",
            first_line,
            f"the change to {path} ({total:,} characters) is too big to keep in the log; "
            "it is not shown again",
        )
    last = first_line + max(_lines(old_part), _lines(new_part)) - 1
    return PreviewDiff(
        path,
        None if old_text is None else old_part,
        new_part,
        first_line,
        f"the diff of {path} ({total:,} characters) was kept in the log shortened: only "
        f"lines {first_line} to {last} and the changes in them are shown again",
    )


_BLOCK = 1 << 16


def _same_head(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share."""
    limit = min(len(a), len(b))
    at = 0
    while at < limit:
        end = min(limit, at + _BLOCK)
        if a[at:end] != b[at:end]:
            low, high = at, end  # the first difference is in [low, high)
            while high - low > 1:
                middle = (low + high) // 2
                if a[low:middle] == b[low:middle]:
                    low = middle
                else:
                    high = middle
            return low
        at = end
    return limit


def _same_tail(a: str, b: str, limit: int) -> int:
    """How many trailing characters ``a`` and ``b`` share, at most ``limit``."""
    at = 0
    while at < limit:
        end = min(limit, at + _BLOCK)
        if a[len(a) - end : len(a) - at] != b[len(b) - end : len(b) - at]:
            low, high = at, end  # the shared tail's length is in [low, high)
            while high - low > 1:
                middle = (low + high) // 2
                if a[len(a) - middle : len(a) - low] == b[len(b) - middle : len(b) - low]:
                    low = middle
                else:
                    high = middle
            return low
        at = end
    return limit


def _line_start(text: str, at: int, back: int) -> int:
    """Where the line holding ``text[at]`` starts, moved ``back`` lines earlier."""
    start = text.rfind("\n", 0, at) + 1
    for _ in range(back):
        if start == 0:
            break
        start = text.rfind("\n", 0, start - 1) + 1
    return start


def _line_end(text: str, at: int, ahead: int) -> int:
    """Where the line holding ``text[at - 1]`` ends (after its newline), moved
    ``ahead`` lines later; ``at`` itself when that is a line's start."""
    end = at if at == 0 or text[at - 1] == "\n" else _after_newline(text, at)
    for _ in range(ahead):
        end = _after_newline(text, end)
    return end


def _after_newline(text: str, at: int) -> int:
    found = text.find("\n", at)
    return len(text) if found < 0 else found + 1


def _lines(text: str) -> int:
    return text.count("\n") + (0 if text.endswith("\n") or not text else 1)
