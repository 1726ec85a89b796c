"""Reading and writing text files: on the disk, or through an editor's buffers.

:class:`FileAccess` is the seam. :class:`DiskFiles` is the default;
a frontend that owns the user's buffers (the ACP bridge, when the client
advertises ``fs.readTextFile`` / ``fs.writeTextFile``) answers
:data:`FILE_ACCESS` for its own agents with an implementation that goes
through the editor, so unsaved buffers are seen and edits land in them.

A file's **version** is an opaque string that changes whenever its content
may have changed (on disk: inode, size and modification time); the stale-read
protection compares versions, and content digests where it has them
(:mod:`tether.plugins.fs.snapshots`).

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
import errno
import os
import stat
from typing import Protocol

import msgspec

from tether.agent.types import Agent
from tether.plugins.fs.errors import FileToolError
from tether.plugins.fs.images import image_type
from tether.plugins.fs.snapshots import Snapshot, digest
from tether.plugins.fs.text import MAX_LINE_CHARS, Page, decode, page_of, read_page
from tether.runtime.keys import Serial

__all__ = ["FILE_ACCESS", "DiskFiles", "FileAccess", "FileText", "page_text"]


class FileText(msgspec.Struct, frozen=True):
    """A whole file's text and its version; ``data`` its bytes, when they were read."""

    text: str
    version: str
    data: bytes | None = None

    def digest(self) -> str:
        """The digest of the content (see :func:`~tether.plugins.fs.snapshots.digest`)."""
        return digest(self.data if self.data is not None else self.text.encode("utf-8"))


class FileAccess(Protocol):
    """Where the file tools read and write text (paths are absolute and real)."""

    @property
    def where(self) -> str:
        """``disk`` or ``editor``: shown in results so the model knows which it saw."""
        ...

    async def read(self, path: str, shown: str, offset: int, limit: int) -> tuple[Page, Snapshot]:
        """Lines ``offset`` … of ``path`` (1-based), at most ``limit``, and what was seen.

        Raises:
            FileToolError: missing, a directory, unreadable, or not text.
        """
        ...

    async def read_text(self, path: str, shown: str) -> FileText:
        """The whole text of ``path`` and its version.

        Raises:
            FileToolError: missing, a directory, unreadable, not text, or over the size cap.
        """
        ...

    async def version(self, path: str) -> str | None:
        """The current version of ``path``; ``None`` when it does not exist."""
        ...

    async def write_text(self, path: str, shown: str, text: str) -> Snapshot:
        """Replace (or create) ``path`` with ``text``, all or nothing; what it now is.

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
    return f"{info.st_ino}:{info.st_size}:{info.st_mtime_ns}"


def _failure(exc: OSError, shown: str) -> FileToolError:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return FileToolError(f"permission denied: {shown}")
    if exc.errno == errno.ENOENT:
        return FileToolError(f"{shown} does not exist")
    if exc.errno == errno.EISDIR:
        return FileToolError(f"{shown} is a directory, not a file")
    if exc.errno == errno.ENOTDIR:
        return FileToolError(f"{shown}: a part of the path is not a directory")
    return FileToolError(f"{shown}: {exc.strerror or exc}")


class DiskFiles:
    """Files on the local disk; whole-file reads capped at ``max_bytes``.

    The file system is used from a worker thread, so a slow disk or a big
    file never stalls the event loop.
    """

    where = "disk"

    def __init__(self, max_bytes: int, *, durable: bool = False) -> None:
        self.max_bytes = max_bytes
        self.durable = durable
        self._umask = _umask()

    async def read(self, path: str, shown: str, offset: int, limit: int) -> tuple[Page, Snapshot]:
        """Small files are read whole (so the snapshot has a digest); big ones page by page."""
        return await asyncio.to_thread(self.read_now, path, shown, offset, limit)

    async def read_text(self, path: str, shown: str) -> FileText:
        return await asyncio.to_thread(self.read_text_now, path, shown)

    async def version(self, path: str) -> str | None:
        return await asyncio.to_thread(self.version_now, path)

    async def write_text(self, path: str, shown: str, text: str) -> Snapshot:
        return await asyncio.to_thread(self.write_text_now, path, shown, text)

    # -- the same, blocking -------------------------------------------------------

    def read_now(self, path: str, shown: str, offset: int, limit: int) -> tuple[Page, Snapshot]:
        info = _stat_file(path, shown)
        if info.st_size <= min(WHOLE_READ_BYTES, self.max_bytes):
            return page_text(self.read_text_now(path, shown), offset, limit)
        try:
            with open(path, "rb") as stream:
                page = read_page(stream, shown, offset, limit, MAX_LINE_CHARS)
        except OSError as exc:
            raise _failure(exc, shown) from None
        return page, Snapshot(disk_version(info), None)

    def read_text_now(self, path: str, shown: str) -> FileText:
        info = _stat_file(path, shown)
        if info.st_size > self.max_bytes:
            raise FileToolError(
                f"{shown} is {info.st_size:,} bytes, over the {self.max_bytes:,}-byte cap "
                "for whole-file operations; read it in pages with offset and limit"
            )
        try:
            with open(path, "rb") as stream:
                data = stream.read()
        except OSError as exc:
            raise _failure(exc, shown) from None
        return FileText(decode(data, shown), disk_version(info), data)

    async def read_image(
        self, path: str, shown: str, max_bytes: int
    ) -> tuple[str, bytes, Snapshot]:
        """The image at ``path``: its media type, its bytes, and what was seen.

        Raises:
            FileToolError: missing, unreadable, over ``max_bytes``, or not an image.
        """
        return await asyncio.to_thread(self.read_image_now, path, shown, max_bytes)

    def read_image_now(self, path: str, shown: str, max_bytes: int) -> tuple[str, bytes, Snapshot]:
        info = _stat_file(path, shown)
        if info.st_size > max_bytes:
            raise FileToolError(
                f"{shown} is an image of {info.st_size:,} bytes, over the {max_bytes:,}-byte "
                "cap for images"
            )
        try:
            with open(path, "rb") as stream:
                data = stream.read(max_bytes + 1)
        except OSError as exc:
            raise _failure(exc, shown) from None
        if len(data) > max_bytes:
            raise FileToolError(f"{shown} grew over the {max_bytes:,}-byte cap for images")
        media_type = image_type(data[:16])
        if media_type is None:
            raise FileToolError(f"{shown} is no longer an image; read it again")
        return media_type, data, Snapshot(disk_version(info), digest(data))

    def version_now(self, path: str) -> str | None:
        try:
            return disk_version(os.stat(path))
        except OSError:
            return None

    def write_text_now(self, path: str, shown: str, text: str) -> Snapshot:
        directory = os.path.dirname(path)
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise _failure(exc, f"the directory of {shown}") from None
        try:
            info = os.stat(path)
        except FileNotFoundError:
            mode = 0o666 & ~self._umask
        except OSError as exc:
            raise _failure(exc, shown) from None
        else:
            if stat.S_ISDIR(info.st_mode):
                raise FileToolError(f"{shown} is a directory, not a file")
            mode = stat.S_IMODE(info.st_mode)
        data = text.encode("utf-8")
        if len(data) > self.max_bytes:
            raise FileToolError(
                f"the new content of {shown} is {len(data):,} bytes, over the "
                f"{self.max_bytes:,}-byte cap"
            )
        import tempfile

        try:
            fd, temporary = tempfile.mkstemp(
                prefix=f".{os.path.basename(path)}.", suffix=".tether-tmp", dir=directory
            )
        except OSError as exc:
            raise _failure(exc, f"the directory of {shown}") from None
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fchmod(out.fileno(), mode)
                if self.durable:
                    os.fsync(out.fileno())
            os.replace(temporary, path)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            if isinstance(exc, OSError):
                raise _failure(exc, shown) from None
            raise
        return Snapshot(disk_version(os.stat(path)), digest(data))


def _stat_file(path: str, shown: str) -> os.stat_result:
    try:
        info = os.stat(path)
    except OSError as exc:
        raise _failure(exc, shown) from None
    if stat.S_ISDIR(info.st_mode):
        raise FileToolError(f"{shown} is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise FileToolError(f"{shown} is not a regular file")
    return info


WHOLE_READ_BYTES = 1 << 20
"""Files up to this size are read whole by ``read`` (their snapshot gets a digest)."""


def page_text(whole: FileText, offset: int, limit: int) -> tuple[Page, Snapshot]:
    """The page of a file read whole, and its snapshot (with a digest)."""
    lines = whole.text.split("\n")
    if lines[-1] == "":
        lines.pop()
    page = page_of(lines, offset, limit, MAX_LINE_CHARS)
    return page, Snapshot(whole.version, whole.digest())
