"""What the model last saw of each file: the stale-read protection.

Each agent has its own table, path → :class:`Snapshot`. A read records the
file's version (and, when it read the whole file, a digest of its content);
a write or an edit records what it wrote. An edit or an overwrite is refused
when the model never read the file, or when the file changed since. A file
whose version is the one recorded is unchanged (on disk: the same inode,
size and modification time, so this costs one ``stat``); one whose version
differs is still unchanged when its content has the digest recorded (it was
rewritten with the very text the model saw), and stale otherwise — always
stale when only a page was read, so no digest is known.

The tables live in the plugin and are dropped with their agent; a reload of
the plugin forgets them, and the model is told to read a file again.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from tether.plugins.fs.errors import FileToolError


def digest(data: bytes) -> str:
    """A digest of ``data`` (a text's UTF-8 bytes), to compare contents by."""
    import hashlib  # on first use: its import is a measurable part of start-up

    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


class Snapshot(msgspec.Struct, frozen=True):
    """A file as the model last saw it: its version, and its digest if it saw all of it."""

    version: str
    digest: str | None


class Snapshots:
    """The tables of every agent, by agent id."""

    def __init__(self) -> None:
        self._tables: dict[str, dict[str, Snapshot]] = {}

    def saw(self, owner: str, path: str, snapshot: Snapshot) -> None:
        """Record that ``owner``'s model now knows ``path`` as ``snapshot``."""
        self._tables.setdefault(owner, {})[path] = snapshot

    def get(self, owner: str, path: str) -> Snapshot | None:
        return self._tables.get(owner, {}).get(path)

    def check(
        self, owner: str, path: str, shown: str, version: str, content: Callable[[], str]
    ) -> None:
        """Refuse a change to ``path``, now at ``version``, if ``owner``'s view of it is stale.

        ``content()`` gives the digest of the current content; it is called only
        when the version differs from the one recorded.

        Raises:
            FileToolError: never read by this agent, or changed since it was read.
        """
        seen = self.get(owner, path)
        if seen is None:
            raise FileToolError(
                f"{shown} has not been read in this session; read it first, then edit it"
            )
        if version == seen.version:
            return
        if seen.digest is None or content() != seen.digest:
            raise FileToolError(
                f"{shown} changed on disk since it was last read; read it again before editing"
            )

    def forget(self, owner: str) -> None:
        self._tables.pop(owner, None)
