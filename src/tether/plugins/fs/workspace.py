"""Where a path given by the model points, and whether that is inside the workspace.

The workspace is the session's cwd. A relative path resolves against it;
``~`` expands. Containment is decided on the *real* path (symlinks
resolved), so neither ``..`` nor a symlink leads out unnoticed: a link inside
the workspace that points outside is outside.

That decision is not trusted to hold until the file is used: a resolved path
names its **root** (the workspace for a path inside, ``/`` for one outside)
and where its real target lies beneath it, and the file tools reach it only
through :class:`~tether.plugins.fs.beneath.Beneath`, in one step beneath that
root with no symlink followed.
"""

from __future__ import annotations

import os

import msgspec

from tether.plugins.fs.errors import FileToolError


class Resolved(msgspec.Struct, frozen=True):
    """A path as the model named it (``shown``), its absolute form and its real target.

    ``real`` is the target with every symlink resolved (for a path that does
    not exist yet: its nearest existing parent resolved, the rest appended).
    ``inside`` says whether ``real`` lies within the workspace; ``root`` is
    then the workspace's real path, else ``/``.
    """

    shown: str
    absolute: str
    real: str
    inside: bool
    root: str

    @property
    def beneath(self) -> str:
        """``real`` relative to ``root`` (``""`` for the root itself)."""
        return self.real[len(self.root) :].lstrip("/")


class Workspace:
    """The directory a session works in; resolves the paths its tools are given."""

    __slots__ = ("_real", "root")

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self._real = os.path.realpath(self.root)

    def resolve(self, path: str) -> Resolved:
        """Resolve ``path`` against the workspace.

        Raises:
            FileToolError: ``path`` is empty or holds a NUL character.
        """
        if not path or not path.strip():
            raise FileToolError(
                "the path is empty; give path: the file's path relative to the working directory"
            )
        if "\0" in path:
            raise FileToolError("the path contains a NUL character")
        absolute = os.path.normpath(os.path.join(self.root, os.path.expanduser(path)))
        real = os.path.realpath(absolute)
        inside = self.contains(real)
        return Resolved(path, absolute, real, inside, self._real if inside else "/")

    def contains(self, real: str) -> bool:
        """Whether the real path ``real`` is the workspace or lies under it."""
        return real == self._real or real.startswith(self._real.rstrip(os.sep) + os.sep)

    def relative(self, real: str) -> str:
        """``real`` relative to the workspace when inside it, else as it is."""
        if self.contains(real):
            return os.path.relpath(real, self._real)
        return real
