"""Which paths of a workspace changed since the last look: inotify watches on its directories.

A :class:`Watcher` holds one inotify descriptor (Linux) with a watch on every
directory of the workspace, but ``.git`` directories, symbolic links and one
directory left out (tether's data directory when it lies inside). It runs no
thread: the kernel queues the events, and :meth:`Watcher.take` drains the
queue when a snapshot asks. inotify reports a change made through any path
of the workspace by any process, as the write or rename happens, so a
snapshot stats and reads only the paths named.

When the events cannot be trusted to name every change, :meth:`Watcher.take`
answers ``None`` (the caller scans the whole workspace) after putting a fresh
set of watches in place, so the scan and the watches that follow it miss
nothing between them. That is when the queue overflowed (``IN_Q_OVERFLOW``),
a directory was renamed (the watches' paths went stale), a ``.git`` or a
``.gitignore`` appeared, changed or went (what a snapshot holds changes with
them), the workspace itself was moved, deleted or unmounted, or a new
directory could not be watched.

What inotify does not see, and so no watcher answers for: writes through a
shared memory mapping, writes on another host of a network file system, and
writes through a hard link outside the workspace to a file that was a single
link when the watcher started or was last seen. :meth:`Watcher.start`
refuses a workspace holding another file system (a mount inside it) so
that the first two stay out of reach of the local kind; files with several
links are reported by every :meth:`Watcher.take`.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import struct
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ctypes

__all__ = ["Changes", "Watcher", "watch_limit"]

_MODIFY = 0x2
_ATTRIB = 0x4
_CLOSE_WRITE = 0x8
_MOVED_FROM = 0x40
_MOVED_TO = 0x80
_CREATE = 0x100
_DELETE = 0x200
_DELETE_SELF = 0x400
_MOVE_SELF = 0x800
_UNMOUNT = 0x2000
_Q_OVERFLOW = 0x4000
_IGNORED = 0x8000
_ONLYDIR = 0x1000000
_DONT_FOLLOW = 0x2000000
_EXCL_UNLINK = 0x4000000
_ISDIR = 0x40000000
_NONBLOCK = os.O_NONBLOCK
_CLOEXEC = 0o2000000

_MASK = (
    _MODIFY
    | _ATTRIB
    | _CLOSE_WRITE
    | _MOVED_FROM
    | _MOVED_TO
    | _CREATE
    | _DELETE
    | _DELETE_SELF
    | _MOVE_SELF
    | _ONLYDIR
    | _DONT_FOLLOW
    | _EXCL_UNLINK
)
_HEADER = struct.Struct("iIII")
_BUFFER = 64 * 1024
_MOST = 1000
"""More paths changed than this: a scan is as quick, and no command line overflows."""
_UNTRUSTED = frozenset({".git", ".gitignore"})
"""Names whose change alters what a snapshot holds beyond themselves."""


class _Lost(Exception):
    """The events no longer name every change: scan everything, watch afresh."""


class Watcher:
    """inotify watches on the directories under ``root`` (but ``skip``).

    Methods are thread-safe. Nothing runs between calls: the kernel queues the
    events, up to its ``max_queued_events`` (an overflow is noticed).
    """

    def __init__(self, root: Path, skip: Path | None = None) -> None:
        self.root = root
        self._skip = skip
        self._lock = threading.Lock()
        self._fd = -1
        self._paths: dict[int, str] = {}
        """Each watch's directory, relative to ``root`` ("" for the root)."""
        self._linked: set[str] = set()
        """The files with several links: reported by every take."""
        self._device = 0
        self._stale = False
        self._closed = False

    @property
    def running(self) -> bool:
        """Whether watches are in place."""
        return self._fd >= 0

    def start(self) -> bool:
        """Put a watch on every directory; whether it could (else nothing is held).

        It cannot when inotify is missing (not Linux), the workspace has more
        directories than :func:`watch_limit` or the user's watch limit is reached, a
        directory is on another file system or cannot be read.
        """
        with self._lock:
            return self._restart()

    def take(self) -> set[str] | None:
        """The paths (relative to ``root``) changed since the last take or start, and
        the files with several links; ``None`` when that is not known (see the module
        docstring), with fresh watches in place — or none, when they could not be
        put back (:attr:`running` is then false)."""
        with self._lock:
            if self._fd < 0:
                return None
            try:
                if self._stale:
                    raise _Lost("a file with several links")
                changed = self._drain()
            except _Lost:
                self._restart()
                return None
            return changed | self._linked

    def linked(self, path: str) -> None:
        """``path`` is a file with several links, seen by the caller: when it is new, the
        next take answers ``None`` (its other names, which a write through this one
        changes, are found by the fresh walk and reported from then on)."""
        with self._lock:
            if path not in self._linked:
                self._stale = True

    def close(self) -> None:
        """Remove every watch and close the descriptor, for good: a later start or take
        holds nothing. Idempotent."""
        with self._lock:
            self._closed = True
            self._close()

    # -- mechanics ---------------------------------------------------------------

    def _restart(self) -> bool:
        self._close()
        if self._closed or not sys.platform.startswith("linux"):
            return False
        fd = _inotify_init()
        if fd < 0:
            return False
        self._fd = fd
        try:
            self._device = os.lstat(self.root).st_dev
            self._watch_tree("")
        except (_Lost, OSError):
            self._close()
            return False
        return True

    def _close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1
        self._paths.clear()
        self._linked.clear()
        self._stale = False

    def _watch_tree(self, top: str) -> None:
        """Watch ``top`` and every directory under it; note its files with several links.

        Raises:
            _Lost: a directory could not be watched.
        """
        pending = [top]
        while pending:
            relative = pending.pop()
            where = self.root / relative if relative else self.root
            if len(self._paths) >= watch_limit():
                raise _Lost("too many directories")
            wd = _add_watch(self._fd, where)
            if wd is None:
                continue  # gone meanwhile: its parent's events say so
            self._paths[wd] = relative
            try:
                entries = list(os.scandir(where))
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                raise _Lost(relative) from exc
            for entry in entries:
                path = f"{relative}/{entry.name}" if relative else entry.name
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # gone meanwhile: its directory's events say so
                if stat.S_ISDIR(info.st_mode):
                    if entry.name == ".git" or Path(entry.path) == self._skip:
                        continue
                    if info.st_dev != self._device:
                        raise _Lost(path)
                    pending.append(path)
                elif info.st_nlink > 1 and not stat.S_ISLNK(info.st_mode):
                    self._linked.add(path)

    def _drain(self) -> set[str]:
        changed: set[str] = set()
        created: list[str] = []
        while True:
            try:
                data = os.read(self._fd, _BUFFER)
            except BlockingIOError:
                break
            offset = 0
            while offset < len(data):
                wd, mask, _, size = _HEADER.unpack_from(data, offset)
                offset += _HEADER.size
                name = os.fsdecode(data[offset : offset + size].rstrip(b"\0"))
                offset += size
                path = self._event(wd, mask, name)
                if path is None:
                    continue
                changed.add(path)
                if mask & _ISDIR and mask & _CREATE:
                    created.append(path)
        for path in created:
            # Its files written before this watch are inside the path reported.
            self._watch_tree(path)
        return changed

    def _event(self, wd: int, mask: int, name: str) -> str | None:
        """The path one event reports changed (``None``: none).

        Raises:
            _Lost: see the module docstring.
        """
        if mask & (_Q_OVERFLOW | _UNMOUNT):
            raise _Lost("overflow")
        directory = self._paths.get(wd)
        if directory is None:
            raise _Lost("an unknown watch")
        if mask & _IGNORED:
            del self._paths[wd]
            if directory == "":
                raise _Lost("the workspace")
            return None
        if not name:
            if directory == "" and mask & (_DELETE_SELF | _MOVE_SELF):
                raise _Lost("the workspace")
            return directory or None
        if name in _UNTRUSTED or (mask & _ISDIR and mask & (_MOVED_FROM | _MOVED_TO)):
            raise _Lost(name)
        path = f"{directory}/{name}" if directory else name
        if self._skip is not None and self.root / path == self._skip:
            return None
        return path


@functools.cache
def watch_limit() -> int:
    """The most directories one workspace may watch: a quarter of the user's
    ``fs.inotify.max_user_watches`` (shared by every program the user runs, an editor's
    file watching among them), else 2,048."""
    try:
        return int(Path("/proc/sys/fs/inotify/max_user_watches").read_text()) // 4
    except (OSError, ValueError):
        return 2048


@functools.cache
def _library() -> ctypes.CDLL | None:
    import ctypes  # only a store that watches needs it

    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _inotify_init() -> int:
    libc = _library()
    if libc is None or not hasattr(libc, "inotify_init1"):
        return -1
    return int(libc.inotify_init1(_NONBLOCK | _CLOEXEC))


def _add_watch(fd: int, path: Path) -> int | None:
    """The watch descriptor of directory ``path``; ``None`` when it is gone (or no longer
    a directory), which its parent's events report.

    Raises:
        _Lost: it cannot be watched (the watch limit, no permission).
    """
    import ctypes

    libc = _library()
    assert libc is not None
    wd = int(libc.inotify_add_watch(fd, os.fsencode(path), _MASK))
    if wd >= 0:
        return wd
    error = ctypes.get_errno()
    if error in (errno.ENOENT, errno.ENOTDIR):
        return None
    raise _Lost(os.strerror(error))


class Changes:
    """What changed in a workspace since its store's last operation: a :class:`Watcher`,
    and what else decides a snapshot's content that no watch of the workspace sees.

    A store asks :meth:`take` at the start of every snapshot, under its lock, and
    says :meth:`settled` when an operation ended (:meth:`forget` when one failed).
    The answer is ``None`` — scan the whole workspace — the first time (the
    watches are put in place first, so nothing is missed between the scan and
    them), and whenever the watcher says so, the watches cannot be held (then
    always), the store's index is not as this store's last operation left it
    (another process, or a failure, wrote it), or ignore rules outside the
    workspace changed: the user's global git configuration files, or the
    excludes file they name (``excludes`` finds it).
    """

    def __init__(self, root: Path, home: Path, excludes: Callable[[], Path | None]) -> None:
        self._watcher = Watcher(root, home if root in home.parents else None)
        self._usable = home != root
        self._excludes = excludes
        self._index: tuple[int, int, int, int] | None = None
        self._unstored: set[str] = set()
        xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
        self._configs = (Path.home() / ".gitconfig", Path(xdg, "git", "config"))
        self._default_excludes = Path(xdg, "git", "ignore")
        self._configs_seen: bytes | None = None
        self._excludes_file: Path | None = None
        self._ignores: bytes | None = None

    @property
    def unstored(self) -> tuple[str, ...]:
        """The files the last snapshots left out, as a full scan would list them."""
        return tuple(sorted(self._unstored))

    def take(self, index: Path, rules_changed: bool) -> set[str] | None:
        """The paths changed since the last operation; ``None``: scan everything.

        ``rules_changed``: the workspace repository's own excludes changed.
        """
        if not self._usable:
            return None
        if self._watcher.running:
            dirty = self._watcher.take()
        else:
            self._watcher.start()
            dirty = None
        # Watches that could not be put in place (or back): scans from now on.
        self._usable = self._watcher.running
        if dirty is not None and len(dirty) > _MOST:
            dirty = None
        ignores = self._ignore_inputs()
        unchanged = ignores == self._ignores and _stat_key(index) == self._index
        self._ignores = ignores
        if dirty is None or not unchanged or rules_changed:
            return None
        return {self._outermost(path) for path in dirty}

    def _outermost(self, path: str) -> str:
        """``path``, or the unstored path it lies in: git lists a nested repository only
        when asked of it, never of a path inside it."""
        parts = path.split("/")
        for end in range(1, len(parts)):
            leading = "/".join(parts[:end])
            if leading in self._unstored:
                return leading
        return path

    def seen(self, dirty: set[str] | None, unstored: Iterable[str]) -> tuple[str, ...]:
        """Note what a snapshot found unstored among ``dirty`` (``None``: everywhere);
        every file left out now."""
        if dirty is None:
            self._unstored = set(unstored)
        else:
            self._unstored = {
                path
                for path in self._unstored
                if path not in dirty and not any(path.startswith(d + "/") for d in dirty)
            }
            self._unstored.update(unstored)
        return self.unstored

    def linked(self, path: str) -> None:
        """``path`` has several links: a write through another may go unseen."""
        self._watcher.linked(path)

    def settled(self, index: Path) -> None:
        """An operation ended well: the index is as it left it."""
        self._index = _stat_key(index)

    def forget(self) -> None:
        """An operation failed part way: the next snapshot scans everything."""
        self._index = None

    def close(self) -> None:
        """Remove the watches; the next take (if any) answers ``None``, for good."""
        self._usable = False
        self._watcher.close()

    def _ignore_inputs(self) -> bytes:
        configs = b"\0".join(_read(path) for path in self._configs)
        if configs != self._configs_seen:
            self._configs_seen = configs
            self._excludes_file = self._excludes()
        named = _read(self._excludes_file) if self._excludes_file else b""
        return configs + b"\0" + _read(self._default_excludes) + b"\0" + named


def _stat_key(path: Path) -> tuple[int, int, int, int] | None:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
