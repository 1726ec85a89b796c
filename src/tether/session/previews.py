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
    when the texts hold at most ``cap`` characters together, else shortened."""
    old = old_text or ""
    if len(old) + len(new_text) <= cap:
        return PreviewDiff(path, old_text, new_text)
    old_lines = old.splitlines(keepends=True)
    new_lines = new_text.splitlines(keepends=True)
    same_head = 0
    for before, after in zip(old_lines, new_lines, strict=False):
        if before != after:
            break
        same_head += 1
    room = min(len(old_lines), len(new_lines)) - same_head
    same_tail = 0
    while same_tail < room and old_lines[-1 - same_tail] == new_lines[-1 - same_tail]:
        same_tail += 1
    start = max(0, same_head - CONTEXT_LINES)
    old_end = min(len(old_lines), len(old_lines) - same_tail + CONTEXT_LINES)
    new_end = min(len(new_lines), len(new_lines) - same_tail + CONTEXT_LINES)
    old_part = "".join(old_lines[start:old_end])
    new_part = "".join(new_lines[start:new_end])
    total = len(old) + len(new_text)
    if len(old_part) + len(new_part) > cap:
        return PreviewDiff(
            path,
            None if old_text is None else "",
            "",
            start + 1,
            f"the change to {path} ({total:,} characters) is too big to keep in the log; "
            "it is not shown again",
        )
    lines = f"{start + 1} to {start + max(old_end - start, new_end - start)}"
    return PreviewDiff(
        path,
        None if old_text is None else old_part,
        new_part,
        start + 1,
        f"the diff of {path} ({total:,} characters) was kept in the log shortened: only "
        f"lines {lines} and the changes in them are shown again",
    )
