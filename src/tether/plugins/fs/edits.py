"""Exact-string edits: each ``old_string`` replaced by its ``new_string``, all or none.

Edits apply in order, each to the text the previous one left. An edit
replaces one occurrence, which must be the only one, unless it says
``replace_all``. If any edit cannot apply, none does: the caller writes the
result only once every edit has.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

from tether.plugins.fs.errors import FileToolError, next_call


class Edit(msgspec.Struct, frozen=True):
    old_string: str
    new_string: str
    replace_all: bool = False


class Edited(msgspec.Struct, frozen=True):
    """The new text, how many replacements were made, and where the first change is
    (``first_offset`` in the new text; ``first_line``, 1-based)."""

    text: str
    replacements: int
    first_offset: int

    @property
    def first_line(self) -> int:
        return self.text.count("\n", 0, self.first_offset) + 1


def apply_edits(text: str, edits: Sequence[Edit], shown: str) -> Edited:
    """Apply ``edits`` to ``text`` (see the module docs).

    Raises:
        FileToolError: an ``old_string`` is empty, equals its ``new_string``, is
            not found, or (without ``replace_all``) is found more than once.
    """
    if not edits:
        raise FileToolError("no edits were given")
    replacements = 0
    first: int | None = None
    for number, edit in enumerate(edits, 1):
        which = f"edit {number}: " if len(edits) > 1 else ""
        if not edit.old_string:
            raise FileToolError(f"{which}old_string is empty; use the write tool to create a file")
        if edit.old_string == edit.new_string:
            raise FileToolError(
                f"{which}old_string and new_string are the same, so nothing would change; "
                "give the changed text as new_string"
            )
        at = text.find(edit.old_string)
        if at < 0:
            raise FileToolError(_not_found(which, edit.old_string, shown))
        if edit.replace_all:
            count = text.count(edit.old_string)
        else:
            # One scan: a second occurrence is all that matters, not how many there are.
            again = text.find(edit.old_string, at + 1)
            count = 1 if again < 0 else 1 + text.count(edit.old_string, again)
        if count > 1 and not edit.replace_all:
            raise FileToolError(
                f"{which}old_string occurs {count} times in {shown}; include more surrounding "
                "text to make it unique, or set replace_all"
            )
        # An edit after the first change leaves it where it is; one before it is the new first.
        first = at if first is None else min(first, at)
        if edit.replace_all:
            text = text.replace(edit.old_string, edit.new_string)
        else:
            text = text[:at] + edit.new_string + text[at + len(edit.old_string) :]
        replacements += count if edit.replace_all else 1
    assert first is not None
    return Edited(text, replacements, first)


# What ``read`` puts before each line: its number, right-aligned, and a tab.
_NUMBERED = re.compile(r"^ *\d+\t", re.MULTILINE)


def _not_found(which: str, old_string: str, shown: str) -> str:
    """Why ``old_string`` is not in the file, and what to call to get it right."""
    read = next_call("read", path=shown)
    if _NUMBERED.match(old_string):
        return (
            f"{which}old_string was not found in {shown}: it holds the line numbers that read "
            "shows before each line; copy the text after the tab only, and call edit again"
        )
    return (
        f"{which}old_string was not found in {shown}; {read} to see its current text, then "
        "call edit again with old_string copied from it exactly (whitespace and indentation "
        "included)"
    )
