"""How a tool call is shown before it runs: its kind, the places it touches, its diffs.

A tool may describe a call before executing it (:attr:`Tool.preview
<tether.tools.definition.Tool.preview>`): a frontend shows that to a person —
an editor follows the locations and renders the diffs, and a permission
request carries them so the person approves exactly what will be applied.
A preview never changes anything; it reads at most.
"""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["Diff", "Location", "ToolKind", "ToolPreview"]

ToolKind = Literal["read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"]
"""What a call does, in the vocabulary editors use (ACP's ``ToolKind``)."""


class Location(msgspec.Struct, frozen=True):
    """A file a call touches (absolute ``path``), and the 1-based ``line`` if one.

    Raises:
        ValueError: ``path`` is empty or ``line`` is below 1; a previewer that
            makes one fails, and the call goes on without its preview.
    """

    path: str
    line: int | None = None

    def __post_init__(self) -> None:
        _check_path("a location", self.path)
        # bool is an int: True must not pass for line 1.
        if self.line is not None and (type(self.line) is not int or self.line < 1):
            raise ValueError(f"a location's line must be an int >= 1, got {self.line!r}")


class Diff(msgspec.Struct, frozen=True):
    """A change to the file at ``path``: ``old_text`` (``None`` for a new file) to ``new_text``."""

    path: str
    old_text: str | None
    new_text: str

    def __post_init__(self) -> None:
        _check_path("a diff", self.path)


class ToolPreview(msgspec.Struct, frozen=True):
    """A call as it will run.

    ``approval`` is set when the call needs a person's approval whatever the
    permission mode (it says why, e.g. a path outside the workspace); a tool
    refuses such a call unless it arrives approved
    (:attr:`~tether.tools.definition.ToolExec.approved`).
    """

    kind: ToolKind
    title: str
    locations: tuple[Location, ...] = ()
    diffs: tuple[Diff, ...] = ()
    approval: str | None = None


def _check_path(what: str, path: object) -> None:
    if not isinstance(path, str) or not path:
        raise ValueError(f"{what} needs a non-empty path, got {path!r}")
