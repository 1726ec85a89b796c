"""Reading and writing text files: on the disk, or through an editor's buffers.

:class:`FileAccess` is the seam. :class:`DiskFiles` is the default;
a frontend that owns the user's buffers (the ACP bridge, when the client
advertises ``fs.readTextFile`` / ``fs.writeTextFile``) answers
:data:`FILE_ACCESS` for its own agents with an implementation that goes
through the editor, so unsaved buffers are seen and edits land in them.

A file's **version** is an opaque string that changes whenever its content
may have changed (on disk: inode, size, modification and change time); the
stale-read protection compares content digests, and versions only where no
digest is known (:mod:`tether.plugins.fs.snapshots`).

On disk, every path is used beneath the root it was resolved in
(:mod:`tether.plugins.fs.beneath`), and a file is checked on the descriptor it
was opened as, so what was checked is what is read or written.

Writes are not followed by ``fsync`` unless ``durable`` is set (the
plugin's ``durable_writes``): the rename
makes the change atomic for every reader, and ext4, XFS and btrfs flush a
file renamed over another before the rename is committed; ``fsync`` costs
more than everything else of a 10 MB edit.

Writes to disk are atomic: the new text goes to a temporary file beside the
target, takes the target's permission bits (a new file
gets those the umask allows), and is renamed over the target. A write that
fails leaves the target as it was and no temporary file behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from typing import BinaryIO, Protocol

import msgspec

from tether.agent.types import Agent
from tether.plugins.fs.beneath import Beneath
from tether.plugins.fs.errors import FileToolError, failure
from tether.plugins.fs.images import image_type
from tether.plugins.fs.snapshots import Snapshot, digest
from tether.plugins.fs.text import MAX_LINE_CHARS, Page, decode, page_of, read_page
from tether.plugins.fs.workspace import Resolved
from tether.runtime.keys import Serial

__all__ = [
    "FILE_ACCESS",
    "DiskFiles",
    "FileAccess",
    "FileText",
    "image_on_disk",
    "on_disk",
    "page_text",
]


class FileText(msgspec.Struct, frozen=True):
    """A whole file's text, its version, and the digest of its content
    (:func:`~tether.plugins.fs.snapshots.digest`, computed where it was read:
    off the event loop, for the disk)."""

    text: str
    version: str
    digest: str

    @property
    def snapshot(self) -> Snapshot:
        """The file as this read saw it."""
        return Snapshot(self.version, self.digest)


class FileAccess(Protocol):
    """Where the file tools read and write text (``target`` was resolved and allowed)."""

    @property
    def where(self) -> str:
        """``disk`` or ``editor``: shown in results so the model knows which it saw."""
        ...

    async def read(self, target: Resolved, offset: int, limit: int) -> tuple[Page, Snapshot]:
        """Lines ``offset`` … of ``target`` (1-based), at most ``limit``, and what was seen.

        Raises:
            FileToolError: missing, a directory, unreadable, or not text.
        """
        ...

    async def read_text(self, target: Resolved) -> FileText:
        """The whole text of ``target`` and its version.

        Raises:
            FileToolError: missing, a directory, unreadable, not text, or over the size cap.
        """
        ...

    async def version(self, target: Resolved) -> str | None:
        """The current version of ``target``; ``None`` when it does not exist.

        Raises:
            FileToolError: it cannot be looked at (not merely missing).
        """
        ...

    async def write_text(self, target: Resolved, text: str) -> Snapshot:
        """Replace (or create) ``target`` with ``text``, all or nothing; what it now is.

        Missing parent directories are created.

        Raises:
            FileToolError: the parent is unwritable, or the write failed (the file
                is then as it was).
        """
        ...


FILE_ACCESS = Serial[FileAccess | None, Agent, FileAccess]("fs/access")
"""Serial ``(agent, disk) -> FileAccess | None``: who serves the files of ``agent``'s calls.

The first listener that answers wins (the ACP bridge answers for its own
sessions when its client serves files; ``disk`` is what it may fall back on
for what the client does not serve); with no answer, the disk.
"""


def _umask() -> int:
    """The process umask, read without changing it (Linux), else the common 022."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def disk_version(info: os.stat_result) -> str:
    """A file's version on disk. The change time is in it: ``utime`` can set a
    file's modification time back, but not that."""
    return f"{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}"


def on_disk(target: Resolved) -> os.stat_result | None:
    """What ``target`` is on disk (looked at beneath its root); ``None`` if it cannot be seen."""
    try:
        with Beneath(target.root) as root:
            return root.stat(target.beneath)
    except OSError:
        return None


def image_on_disk(target: Resolved) -> str | None:
    """The media type of the image file ``target``; ``None`` if it is not one (or
    cannot be read). Reads 16 bytes: cheap enough for the event loop."""
    try:
        with Beneath(target.root) as root:
            return image_type(root.read(target.beneath, 16))
    except OSError:
        return None


class DiskFiles:
    """Files on the local disk; whole-file reads capped at ``max_bytes``.

    Every file is reached through :class:`~tether.plugins.fs.beneath.Beneath`,
    beneath the root its path was resolved in, and checked on the descriptor it
    was opened as (``fstat``), never by its name again. The file system is used
    from a worker thread, so a slow disk or a big file never stalls the event loop.
    """

    where = "disk"

    def __init__(self, max_bytes: int, *, durable: bool = False) -> None:
        self.max_bytes = max_bytes
        self.durable = durable
        self._umask = _umask()

    async def read(self, target: Resolved, offset: int, limit: int) -> tuple[Page, Snapshot]:
        """Small files are read whole (so the snapshot has a digest); big ones page by page."""
        return await asyncio.to_thread(self.read_now, target, offset, limit)

    async def read_text(self, target: Resolved) -> FileText:
        return await asyncio.to_thread(self.read_text_now, target)

    async def version(self, target: Resolved) -> str | None:
        return await asyncio.to_thread(self.version_now, target)

    async def write_text(self, target: Resolved, text: str) -> Snapshot:
        return await asyncio.to_thread(self.write_text_now, target, text)

    # -- the same, blocking -------------------------------------------------------

    def read_now(self, target: Resolved, offset: int, limit: int) -> tuple[Page, Snapshot]:
        shown = target.shown
        with _opened(target) as (stream, info):
            if info.st_size <= min(WHOLE_READ_BYTES, self.max_bytes):
                return page_text(self._whole(stream, info, shown), offset, limit)
            try:
                page = read_page(stream, shown, offset, limit, MAX_LINE_CHARS)
            except OSError as exc:
                raise failure(exc, shown) from None
            return page, Snapshot(disk_version(info), None)

    def read_text_now(self, target: Resolved) -> FileText:
        with _opened(target) as (stream, info):
            return self._whole(stream, info, target.shown)

    def _whole(self, stream: BinaryIO, info: os.stat_result, shown: str) -> FileText:
        if info.st_size > self.max_bytes:
            raise FileToolError(
                f"{shown} is {info.st_size:,} bytes, over the {self.max_bytes:,}-byte cap "
                "for whole-file operations; read it in pages with offset and limit, and change "
                "it with the bash tool (for example sed)"
            )
        try:
            data = stream.read()
        except OSError as exc:
            raise failure(exc, shown) from None
        return FileText(decode(data, shown), disk_version(info), digest(data))

    async def read_image(self, target: Resolved, max_bytes: int) -> tuple[str, bytes, Snapshot]:
        """The image ``target``: its media type, its bytes, and what was seen.

        Raises:
            FileToolError: missing, unreadable, over ``max_bytes``, or not an image.
        """
        return await asyncio.to_thread(self.read_image_now, target, max_bytes)

    def read_image_now(self, target: Resolved, max_bytes: int) -> tuple[str, bytes, Snapshot]:
        shown = target.shown
        with _opened(target) as (stream, info):
            if info.st_size > max_bytes:
                raise FileToolError(
                    f"{shown} is an image of {info.st_size:,} bytes, over the {max_bytes:,}-byte "
                    "cap for images"
                )
            try:
                data = stream.read(max_bytes + 1)
            except OSError as exc:
                raise failure(exc, shown) from None
        if len(data) > max_bytes:
            raise FileToolError(f"{shown} grew over the {max_bytes:,}-byte cap for images")
        media_type = image_type(data[:16])
        if media_type is None:
            raise FileToolError(f"{shown} is no longer an image; read it again")
        return media_type, data, Snapshot(disk_version(info), digest(data))

    def version_now(self, target: Resolved) -> str | None:
        try:
            with Beneath(target.root) as root:
                return disk_version(root.stat(target.beneath))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise failure(exc, target.shown) from None

    def write_text_now(self, target: Resolved, text: str) -> Snapshot:
        shown = target.shown
        data = text.encode("utf-8")
        if len(data) > self.max_bytes:
            raise FileToolError(
                f"the new content of {shown} is {len(data):,} bytes, over the "
                f"{self.max_bytes:,}-byte cap"
            )
        try:
            with Beneath(target.root) as root:
                info = root.replace(
                    target.beneath, data, mode=0o666 & ~self._umask, durable=self.durable
                )
        except OSError as exc:
            raise failure(exc, shown) from None
        return Snapshot(disk_version(info), digest(data))


@contextlib.contextmanager
def _opened(target: Resolved) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """The regular file ``target``, open for reading, and what it is (``fstat``).

    Raises:
        FileToolError: missing, a directory, not a regular file, or unreadable.
    """
    try:
        with Beneath(target.root) as root:
            stream, info = root.open_file(target.beneath)
    except OSError as exc:
        raise failure(exc, target.shown) from None
    with stream:
        yield stream, info


WHOLE_READ_BYTES = 1 << 20
"""Files up to this size are read whole by ``read`` (their snapshot gets a digest)."""


def page_text(whole: FileText, offset: int, limit: int) -> tuple[Page, Snapshot]:
    """The page of a file read whole, and its snapshot (with a digest)."""
    lines = whole.text.split("\n")
    if lines[-1] == "":
        lines.pop()
    page = page_of(lines, offset, limit, MAX_LINE_CHARS)
    return page, whole.snapshot
