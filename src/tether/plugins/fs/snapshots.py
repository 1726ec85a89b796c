"""What the model last saw of each file: the stale-read protection.

Each agent has its own table, path → :class:`Snapshot`. A read records the
file's version (and, when it read the whole file, a digest of its content);
a write or an edit records what it wrote. An edit or an overwrite is refused
when the model never read the file, or when the file changed since. A file
is compared by content: it is unchanged when its content has the digest
recorded, whatever its size and times say (another program may change a
file and set its modification time back). Only where no digest is known (a
paged read of a big file) is the version compared (on disk: inode, size,
modification and change time; the change time cannot be set back).

A write or an edit checks and changes a file under its :class:`FileLocks`
lock, so two calls that change one file in one process take turns: the
second sees the first's change, and is refused if its model has not read it.

The tables live in the plugin and are dropped with their agent. Each
change to a table is logged too, as a ``file/seen`` event
(:mod:`tether.session.files`): an agent's table is rebuilt from its
session's log at its first file tool call in this process
(:meth:`Snapshots.restore`), so a resumed session (``tether run
--continue``), or the plugin after a reload, still knows what the model
read, and a file read before counts as read while its content is what was
seen.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TypeVar

import msgspec

from tether.plugins.fs.errors import FileToolError, next_call
from tether.session.files import FILE_SEEN_TYPE, FileSeen

if TYPE_CHECKING:
    from tether.session.log import Session

T = TypeVar("T")


def digest(data: bytes) -> str:
    """A digest of ``data`` (a text's UTF-8 bytes), to compare contents by."""
    import hashlib  # on first use: its import is a measurable part of start-up

    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


class Snapshot(msgspec.Struct, frozen=True):
    """A file as the model last saw it: its version, and its digest if it saw all of it."""

    version: str
    digest: str | None


_SEEN = frozenset({FILE_SEEN_TYPE})


class Snapshots:
    """The tables of every agent, by agent id."""

    def __init__(self) -> None:
        self._tables: dict[str, dict[str, Snapshot]] = {}

    def restore(self, owner: str, session: Session) -> None:
        """Rebuild ``owner``'s table from the ``file/seen`` events of its ``session``,
        unless it has one already (once per agent and process)."""
        if owner in self._tables:
            return
        table = self._tables[owner] = {}
        for event in session.events.of_types(_SEEN):
            data = event.data
            path, version, digest = data.get("path"), data.get("version"), data.get("digest")
            if isinstance(path, str) and isinstance(version, str):
                table[path] = Snapshot(version, digest if isinstance(digest, str) else None)

    def saw(self, owner: str, path: str, snapshot: Snapshot, session: Session | None) -> None:
        """Record that ``owner``'s model now knows ``path`` as ``snapshot``, and log it
        to ``session`` (the agent's, when there is one)."""
        self._tables.setdefault(owner, {})[path] = snapshot
        if session is not None:
            session.append(FileSeen(path, snapshot.version, snapshot.digest))

    def get(self, owner: str, path: str) -> Snapshot | None:
        return self._tables.get(owner, {}).get(path)

    def check(self, owner: str, path: str, shown: str, now: Snapshot) -> None:
        """Refuse a change to ``path``, as it is ``now``, if ``owner``'s view of it is stale.

        ``now``'s digest is compared with the digest recorded, or, when none
        was (a paged read), its version with the version recorded.

        Raises:
            FileToolError: never read by this agent, or changed since it was read.
        """
        seen = self.get(owner, path)
        read = next_call("read", path=shown)
        if seen is None:
            raise FileToolError(
                f"{shown} has not been read in this session: {read} first, then repeat this "
                "call unchanged"
            )
        same = now.version == seen.version if seen.digest is None else now.digest == seen.digest
        if not same:
            raise FileToolError(
                f"{shown} changed on disk since it was last read: {read} again, then make "
                "this change again against what it shows"
            )

    def forget(self, owner: str) -> None:
        self._tables.pop(owner, None)


class FileLocks:
    """One lock per file (by real path): held while a write or an edit checks and changes it.

    A change made under the lock is awaited with :meth:`finish`, so a cancelled
    call does not release the lock while its write is still under way in a
    worker thread (the next call would read the file as it was, and one of the
    two writes would be lost).
    """

    def __init__(self) -> None:
        self._held: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, path: str) -> AsyncIterator[None]:
        """Hold ``path``'s lock for the block (in order of arrival); dropped when unused."""
        lock, users = self._held.get(path, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._held[path] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._held[path]
            if users == 1:
                del self._held[path]
            else:
                self._held[path] = (lock, users - 1)

    @staticmethod
    async def finish(change: Awaitable[T]) -> T:
        """Await ``change`` to its end; if the caller is cancelled meanwhile, still wait
        for it, then let the cancellation through.

        Raises:
            asyncio.CancelledError: the caller was cancelled (``change`` has ended).
        """
        task = asyncio.ensure_future(change)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            await asyncio.wait({task})
            raise
