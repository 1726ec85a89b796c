"""Project instruction files: ``AGENTS.md`` (or ``CLAUDE.md``, ``GEMINI.md``) for the system prompt.

Where they are looked for, in the order they are given to the model (the
nearest, most specific one last):

1. the user's own file (``AGENTS.md`` in tether's home directory by
   default; the agent loop's ``user_instructions`` names another);
2. each directory from the repository root down to the cwd (only the cwd
   when it is not inside a repository): its ``AGENTS.md``, or when it has
   none, its ``CLAUDE.md``, or else its ``GEMINI.md`` — one file a directory.

Each file is cut at ``max_file_bytes`` and all of them together at
``max_total_bytes`` (the nearest files are served first), and a cut file
ends with a note that says so, how big it was and which setting to raise. A
file that cannot be read is named with the reason instead of its text.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

__all__ = ["INSTRUCTION_NAMES", "Instructions", "discover", "read_instructions"]

INSTRUCTION_NAMES = ("AGENTS.md", "CLAUDE.md", "GEMINI.md")
"""The names looked for in each directory; the first that exists is used."""


class Instructions(msgspec.Struct, frozen=True):
    """One instruction file as the model gets it."""

    path: Path
    text: str
    """The file's text, cut if it was too long (the note is part of it)."""
    size: int
    """The file's size in bytes."""
    truncated: bool
    user: bool = False
    """The user's own file, rather than one of the project's."""


def discover(cwd: Path, root: Path | None, user_file: Path | None) -> list[tuple[Path, bool]]:
    """The instruction files that apply in ``cwd``, farthest first, each with
    whether it is the user's file. ``root`` is the repository root (``None``:
    not in one)."""
    found: list[tuple[Path, bool]] = []
    if user_file is not None and user_file.is_file():
        found.append((user_file, True))
    directories = [cwd]
    if root is not None and root != cwd and root in cwd.parents:
        directories = [cwd, *cwd.parents[: cwd.parents.index(root) + 1]]
    for directory in reversed(directories):
        for name in INSTRUCTION_NAMES:
            candidate = directory / name
            if candidate.is_file():
                if not any(candidate.resolve() == seen.resolve() for seen, _ in found):
                    found.append((candidate, False))
                break
    return found


def read_instructions(
    files: list[tuple[Path, bool]], *, max_file_bytes: int, max_total_bytes: int
) -> tuple[Instructions, ...]:
    """Read ``files`` (as :func:`discover` returns them) within the caps, in the same order.

    The budget of ``max_total_bytes`` goes to the nearest file first.
    """
    budget = max_total_bytes
    read: list[Instructions] = []
    for path, user in reversed(files):
        cap = min(max_file_bytes, budget)
        entry = _read(path, user, cap, max_file_bytes)
        budget = max(0, budget - min(entry.size, cap))
        read.append(entry)
    return tuple(reversed(read))


def _read(path: Path, user: bool, cap: int, max_file_bytes: int) -> Instructions:
    try:
        size = os.stat(path).st_size
        with open(path, "rb") as file:
            data = file.read(cap)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        return Instructions(path, f"[{path} could not be read: {reason}]", 0, False, user)
    text = data.decode("utf-8", errors="replace")
    if size <= len(data):
        return Instructions(path, text, size, False, user)
    if len(data) and data[-1] & 0x80:
        # Do not end on half a character.
        text = text.rstrip("\ufffd")
    limit = (
        "agent_loop.instructions_max_bytes"
        if cap >= max_file_bytes
        else "agent_loop.instructions_max_total_bytes"
    )
    note = (
        f"\n\n[Instructions cut here: {path} is {size} bytes and only the first {len(data)} "
        f"are shown (the limit is {limit}).]"
    )
    return Instructions(path, text + note, size, True, user)
