"""A file's change as people read it: a unified diff with context, computed once for
every front end.

The terminal prints :func:`unified_lines` (a question in ask mode, the work view, a
transcript); the web page draws :func:`hunks` — the same diff as numbered rows, long
files folded around the changes — for a permission question, a tool call and the
workspace's ``/diff`` (:func:`patch_files` reads a patch into the same rows).
Both come from one :func:`difflib.unified_diff`, so the two media never disagree
on what changed.

When the change is an excerpt of a file (an edit's old and new text), its hunk
headers are moved to where the excerpt is in the file (:func:`at_line`, located by
:func:`line_in_file`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

CONTEXT_LINES = 3
"""Unchanged lines shown around each change (what ``diff -u`` shows)."""

LOCATED_FILE_BYTES = 4 << 20
"""The biggest file read to place a change's hunk headers."""

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class Row:
    """One line of a hunk: ``kind`` is ``" "`` (context), ``"-"`` or ``"+"``; its
    1-based line in the old file (``None`` for an added line) and the new one
    (``None`` for a removed line)."""

    kind: str
    old: int | None
    new: int | None
    text: str


@dataclass(frozen=True)
class Hunk:
    """A run of changes with their context; ``folded`` unchanged lines are skipped
    before it (since the previous hunk, or the file's start)."""

    folded: int
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class FileDiff:
    """The hunks of one file's change; ``note`` says what is not in them (a binary
    file, a file cut short), ``""`` when nothing is missing."""

    path: str
    hunks: tuple[Hunk, ...]
    note: str = ""

    def to_json(self) -> dict[str, object]:
        """The diff as the web page reads it: rows are ``[kind, old, new, text]``."""
        return {
            "path": self.path,
            "note": self.note,
            "hunks": [
                {"folded": h.folded, "rows": [[r.kind, r.old, r.new, r.text] for r in h.rows]}
                for h in self.hunks
            ],
        }


def unified_lines(
    path: str,
    old_text: str | None,
    new_text: str,
    *,
    first_line: int = 1,
    context: int = CONTEXT_LINES,
    headers: bool = True,
) -> list[str]:
    """The unified diff of ``path``'s change from ``old_text`` (``None``: a new file)
    to ``new_text``, both starting at line ``first_line`` of the file; with
    ``headers``, the ``---``/``+++`` lines first. Equal texts: no line."""
    import difflib

    old = (old_text or "").splitlines()
    new = new_text.splitlines()
    before = path if old_text is not None else "/dev/null"
    lines = difflib.unified_diff(old, new, before, path, lineterm="", n=context)
    return [
        at_line(line, first_line - 1)
        for line in lines
        if headers or not line.startswith(("--- ", "+++ "))
    ]


def at_line(line: str, offset: int) -> str:
    """A hunk header of a diff of an excerpt, moved to where the excerpt is in its file."""
    if not offset or not line.startswith("@@ "):
        return line
    return re.sub(
        r"([-+])(\d+)",
        lambda found: f"{found[1]}{int(found[2]) + offset}",
        line,
        count=2,
    )


def hunks(path: str, old_text: str | None, new_text: str, *, first_line: int = 1) -> FileDiff:
    """``path``'s change as numbered rows (see :func:`unified_lines`)."""
    lines = unified_lines(path, old_text, new_text, first_line=first_line, headers=False)
    return FileDiff(path, tuple(_rows(lines)))


def patch_files(patch: str) -> list[FileDiff]:
    """The files of a unified diff (``git diff`` or ``diff -u`` output, several files),
    each with its hunks as rows; a file with no hunk (a binary file, a mode change)
    keeps the lines that say so as its ``note``."""
    files: list[FileDiff] = []
    path: str | None = None
    body: list[str] = []
    notes: list[str] = []
    for line in patch.splitlines():
        if line.startswith("diff ") or (line.startswith("--- ") and path is None):
            if path is not None or body or notes:
                files.append(_file(path, body, notes))
            path, body, notes = _path_of(line), [], []
        elif line.startswith("+++ ") and not body:
            path = _path_of(line) or path
        elif line.startswith("--- ") and not body:
            continue
        elif line.startswith("@@") or (body and line[:1] in (" ", "-", "+", "\\", "")):
            body.append(line)
        else:
            notes.append(line)
    if path is not None or body or notes:
        files.append(_file(path, body, notes))
    return files


def _file(path: str | None, body: list[str], notes: list[str]) -> FileDiff:
    shown = [n for n in notes if not n.startswith(("index ", "new file mode", "deleted file"))]
    return FileDiff(path or "(unnamed)", tuple(_rows(body)), "\n".join(shown))


def _path_of(line: str) -> str | None:
    if line.startswith("diff --git "):
        parts = line.split(" b/", 1)
        return parts[1] if len(parts) == 2 else None
    name = line[4:].split("\t", 1)[0]
    if name == "/dev/null":
        return None
    return name[2:] if name.startswith(("a/", "b/")) else name


def _rows(lines: Iterable[str]) -> Iterator[Hunk]:
    """The hunks of a diff's body (its ``@@`` headers and their lines)."""
    old = new = 0
    rows: list[Row] = []
    folded = 0
    for line in lines:
        found = _HUNK.match(line)
        if found:
            if rows:
                yield Hunk(folded, tuple(rows))
            start_old, start_new = int(found[1]), int(found[3])
            # An empty side's header names the line before it ("-0,0"): count from there.
            start_old += found[2] == "0"
            folded = max(0, start_old - 1 - old)
            old, new, rows = start_old - 1, start_new - 1 + (found[4] == "0"), []
            continue
        kind, text = (line[:1] or " "), line[1:]
        if kind == "\\":
            continue  # "\ No newline at end of file"
        if kind == "-":
            old += 1
            rows.append(Row("-", old, None, text))
        elif kind == "+":
            new += 1
            rows.append(Row("+", None, new, text))
        else:
            old, new = old + 1, new + 1
            rows.append(Row(" ", old, new, text))
    if rows:
        yield Hunk(folded, tuple(rows))


def line_in_file(path: str, old: str, new: str) -> int | None:
    """The 1-based line of ``path`` where a change from ``old`` to ``new`` is: where
    ``old`` is while the change is still to be made, else where ``new`` is once it
    was. ``None`` when the file cannot be read, is bigger than
    :data:`LOCATED_FILE_BYTES`, or holds neither text exactly once."""
    try:
        with open(path, "rb") as file:
            data = file.read(LOCATED_FILE_BYTES + 1)
    except OSError:
        return None
    if len(data) > LOCATED_FILE_BYTES:
        return None
    text = data.decode("utf-8", errors="replace")
    for part in (old, new):
        at = text.find(part) if part else -1
        if at >= 0 and text.find(part, at + 1) < 0:
            return text.count("\n", 0, at) + 1
    return None
