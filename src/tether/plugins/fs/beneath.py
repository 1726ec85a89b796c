"""Every file operation of the file tools, resolved and done in one step beneath a root.

A :class:`Beneath` holds an open directory (the **root**: the workspace, or
``/`` for a path the user allowed outside it). Every path it is given is
relative to that root, and the kernel resolves it in the same call that
uses it, never by a name checked earlier: ``openat2(2)`` with
``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` where the kernel has it (Linux
5.6+), else a walk that opens one component at a time with ``O_NOFOLLOW``
relative to the directory opened before it. What the root fd points to cannot
be redirected, so no ``..``, symlink or rename can lead out of it.

Paths given here are *real* (the workspace resolved every symlink before it
decided the path is inside), so a symlink met on the way is one that appeared
after that decision: the call fails with ``ELOOP`` rather than follow it.
That keeps symlinks that stay in the workspace usable (they are resolved
first) while a directory swapped for a symlink to elsewhere leads nowhere.

Writes are atomic: a temporary file is created in the target's directory
(opened beneath the root, so the same directory the rename happens in) and
renamed over the target with ``renameat``. Directories are created one
component at a time, each relative to its parent's fd.

Every method raises :class:`OSError` as the system reports it (``ELOOP``
for a symlink met on the way); the caller words it for the model.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from collections.abc import Callable
from types import TracebackType
from typing import BinaryIO

__all__ = ["Beneath", "has_openat2"]

_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
_SYS_OPENAT2 = 437  # the same number on every Linux architecture
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_PATH_ONLY = getattr(os, "O_PATH", os.O_RDONLY)
_DIRECTORY_PATH = _PATH_ONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

_openat2: Callable[[int, str, int, int], int] | None = None
_probed = False


def _bind_openat2() -> Callable[[int, str, int, int], int] | None:
    """``openat2`` through ``syscall(2)``, or ``None`` where the kernel lacks it."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # only here: its import is a measurable part of start-up

    class OpenHow(ctypes.Structure):
        _fields_ = [
            ("flags", ctypes.c_uint64),
            ("mode", ctypes.c_uint64),
            ("resolve", ctypes.c_uint64),
        ]

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long
    syscall.argtypes = [
        ctypes.c_long,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.POINTER(OpenHow),
        ctypes.c_size_t,
    ]

    def openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
        how = OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, _RESOLVE)
        encoded = os.fsencode(path)
        while True:
            fd = int(syscall(_SYS_OPENAT2, dir_fd, encoded, ctypes.byref(how), ctypes.sizeof(how)))
            if fd >= 0:
                return fd
            code = ctypes.get_errno()
            if code != errno.EINTR:
                raise OSError(code, os.strerror(code), path)

    top = _root_fd()
    try:
        os.close(openat2(top, ".", os.O_RDONLY | os.O_DIRECTORY, 0))
    except OSError:
        return None  # ENOSYS (older kernel), or EPERM (a seccomp filter that refuses it)
    finally:
        os.close(top)
    return openat2


def _root_fd() -> int:
    return os.open("/", _DIRECTORY)


def has_openat2() -> bool:
    """Whether this kernel resolves paths beneath a directory itself (``openat2``)."""
    global _openat2, _probed
    if not _probed:
        _openat2, _probed = _bind_openat2(), True
    return _openat2 is not None


def _parts(path: str) -> list[str]:
    """The components of the relative ``path``; ``..`` is refused (a real path has none).

    Raises:
        OSError: ``EXDEV`` for an absolute path or a ``..`` component.
    """
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if path.startswith("/") or ".." in parts:
        raise OSError(errno.EXDEV, "the path leads out of its root", path)
    return parts


class NotRegularFileError(OSError):
    """The path names something other than a regular file or a directory."""


class Beneath:
    """An open root directory, and the file operations beneath it (see the module docs).

    Use it as a context manager, or :meth:`close` it: it holds a descriptor.
    """

    __slots__ = ("fd", "root")

    def __init__(self, root: str) -> None:
        """Open the directory at ``root``, a real absolute path, with no symlink followed.

        Raises:
            OSError: it is missing, not a directory, or a symlink appeared in it.
        """
        self.root = root
        top = _root_fd()
        try:
            self.fd = top if root in ("/", "") else _open_beneath(top, root[1:], _DIRECTORY, 0)
        finally:
            if root not in ("/", ""):
                os.close(top)

    def enter(self, path: str) -> Beneath:
        """The directory ``path`` (opened beneath this root) as a root of its own.

        What is opened beneath it is beneath this root too; a walk opens each
        file relative to its directory, one component, instead of from the top.

        Raises:
            OSError: ``path`` is missing, not a directory, or a symlink is on the way.
        """
        inner = Beneath.__new__(Beneath)
        inner.fd = self.open(path, _DIRECTORY)
        inner.root = f"{self.root.rstrip('/')}/{path}" if path else self.root
        return inner

    def close(self) -> None:
        """Release the root's descriptor (once; later calls do nothing)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Beneath:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def open(self, path: str, flags: int, mode: int = 0o666) -> int:
        """A descriptor of ``path`` (relative to the root), opened with ``flags``.

        ``O_CREAT`` creates it with ``mode`` (the umask applies). A FIFO or a
        device is opened without blocking (``O_NONBLOCK`` is added to reads);
        callers ``fstat`` the descriptor to check what they opened.

        Raises:
            OSError: as ``open(2)``; ``ELOOP`` when a symlink is on the way.
        """
        if not flags & (os.O_WRONLY | os.O_RDWR | _PATH_ONLY):
            flags |= os.O_NONBLOCK
        return _open_beneath(self.fd, path, flags, mode)

    def stat(self, path: str) -> os.stat_result:
        """What ``path`` is (a final symlink is not followed: it fails with ``ELOOP``).

        Raises:
            OSError: missing (``ENOENT``), or a symlink is on the way (``ELOOP``).
        """
        fd = self.open(path, _PATH_ONLY)
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def open_file(self, path: str) -> tuple[BinaryIO, os.stat_result]:
        """The regular file ``path`` open for reading, and what it is (``fstat`` of
        that descriptor).

        The mode is checked on the descriptor opened (a special file is opened
        without blocking, then refused), never on the name.

        Raises:
            OSError: as :meth:`open`, ``EISDIR`` for a directory, or
                :class:`NotRegularFileError` for anything else that is not a
                regular file (a FIFO, a device, a socket).
        """
        fd = self.open(path, os.O_RDONLY)
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            if not stat.S_ISREG(info.st_mode):
                raise NotRegularFileError(errno.EINVAL, "not a regular file", path)
            return os.fdopen(fd, "rb"), info
        except BaseException:
            os.close(fd)
            raise

    def read(self, path: str, limit: int = -1) -> bytes:
        """The bytes of the file ``path`` (at most ``limit``, when given).

        Raises:
            OSError: as :meth:`open_file`.
        """
        stream, _ = self.open_file(path)
        with stream:
            return stream.read(limit)

    def entries(self, path: str) -> list[tuple[str, bool]]:
        """The regular files and directories in the directory ``path``: ``(name, is a directory)``.

        Symlinks and special files are left out; nothing is followed.

        Raises:
            OSError: ``path`` cannot be opened as a directory.
        """
        fd = self.open(path, _DIRECTORY)
        try:
            found: list[tuple[str, bool]] = []
            with os.scandir(fd) as listing:
                for entry in listing:
                    with contextlib.suppress(OSError):
                        if entry.is_dir(follow_symlinks=False):
                            found.append((entry.name, True))
                        elif entry.is_file(follow_symlinks=False):
                            found.append((entry.name, False))
            return found
        finally:
            os.close(fd)

    def makedirs(self, path: str) -> int:
        """Create the directory ``path`` and its missing parents; a descriptor of it.

        Each component is created (``mkdirat``) and opened (``O_NOFOLLOW``)
        relative to the one before, so none can be redirected.

        Raises:
            OSError: a component is a file, or a symlink (``ELOOP``), or cannot be created.
        """
        with contextlib.suppress(FileNotFoundError):
            return self.open(path, _DIRECTORY_PATH)
        fd = os.dup(self.fd)
        try:
            for part in _parts(path):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
                parent, fd = fd, _component(fd, part, _DIRECTORY_PATH, 0)
                os.close(parent)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def replace(self, path: str, data: bytes, *, mode: int, durable: bool) -> os.stat_result:
        """Replace (or create) the file ``path`` with ``data``, atomically; what it now is.

        Missing parent directories are created. The new file keeps the old one's
        permission bits, or gets ``mode``. A temporary file beside it
        (``.NAME.XXXX.tether-tmp``) is written, ``fsync``ed when ``durable``, and
        renamed over it; on failure it is removed and the target is as it was.

        Raises:
            OSError: a parent cannot be created or written, ``path`` is a directory
                (``EISDIR``), or a symlink is on the way (``ELOOP``).
        """
        parent, _, name = path.rpartition("/")
        if not name:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        directory = self.makedirs(parent)
        try:
            try:
                info = os.stat(name, dir_fd=directory, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                if stat.S_ISDIR(info.st_mode):
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
                mode = stat.S_IMODE(info.st_mode)
            return _write_beside(directory, name, data, mode, durable)
        finally:
            os.close(directory)


def _write_beside(
    directory: int, name: str, data: bytes, mode: int, durable: bool
) -> os.stat_result:
    """Write ``data`` to a new temporary file in ``directory`` and rename it to ``name``."""
    temporary = f".{name}.{os.urandom(4).hex()}.tether-tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o600, dir_fd=directory)
    try:
        with os.fdopen(fd, "wb", closefd=False) as out:
            out.write(data)
        os.fchmod(fd, mode)
        if durable:
            os.fsync(fd)
        os.rename(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
        return os.fstat(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=directory)
        raise
    finally:
        os.close(fd)


def _open_beneath(dir_fd: int, path: str, flags: int, mode: int) -> int:
    """Open ``path`` beneath ``dir_fd`` in one step: ``openat2``, else the ``O_NOFOLLOW`` walk.

    A single component needs neither: ``O_NOFOLLOW`` relative to ``dir_fd`` is
    already one step beneath it (and spares a walk's files a ``syscall`` through ctypes).
    """
    parts = _parts(path)
    if len(parts) == 1:
        return _component(dir_fd, parts[0], flags | os.O_NOFOLLOW, mode)
    if has_openat2():
        assert _openat2 is not None
        return _openat2(dir_fd, "/".join(parts) or ".", flags, mode)
    if not parts:
        return os.open(".", flags | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    fd = dir_fd
    try:
        for part in parts[:-1]:
            parent, fd = fd, _component(fd, part, _DIRECTORY_PATH, 0)
            if parent != dir_fd:
                os.close(parent)
        return _component(fd, parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    finally:
        if fd != dir_fd:
            os.close(fd)


def _component(dir_fd: int, name: str, flags: int, mode: int) -> int:
    """Open the one component ``name`` in ``dir_fd``, never through a symlink.

    Raises:
        OSError: ``ELOOP`` when ``name`` is a symlink (also where ``O_DIRECTORY``
            or ``O_PATH`` would report it otherwise), else as ``open(2)``.
    """
    try:
        fd = os.open(name, flags | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except NotADirectoryError:
        if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
        raise
    if flags & _PATH_ONLY == _PATH_ONLY and stat.S_ISLNK(os.fstat(fd).st_mode):
        os.close(fd)  # O_PATH | O_NOFOLLOW opens the link itself
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name)
    return fd
