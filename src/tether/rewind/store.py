"""A workspace's private snapshot store: git plumbing over a git directory of tether's own.

Every workspace (a directory an agent works in) gets a directory under
tether's data directory, ``workspaces/<hash of its path>/``, holding a git
object store (``git/``), an index (``index``) and a lock file. git runs with
``GIT_DIR`` and ``GIT_INDEX_FILE`` pointing there and the workspace as its
work tree, so the user's own ``.git`` (its index, HEAD, refs, stash) is never
read for state nor written, and a directory that is no git repository works
the same. git's ignore rules apply as in the user's repository: every
``.gitignore`` of the workspace, the user's global excludes, and the
workspace's ``.git/info/exclude`` (copied into the private store). A ``.git``
directory is never part of a snapshot.

Why git: content-addressed, deduplicated across snapshots, and the index's
stat cache makes a snapshot of an unchanged 10,000-file tree one directory
scan (``git ls-files``) — only changed files are read. A snapshot is the
tree id ``git write-tree`` prints. A store made with ``watch`` also keeps
inotify watches on the workspace (:mod:`tether.rewind.watch`) from its first
snapshot until :meth:`WorkspaceStore.close`: then a snapshot asks git about
the paths that changed alone, and scans everything only when the watches
cannot name every change.

A snapshot leaves out files larger than the store's cap, and nested
repositories; it lists them as *unstored*: a restore never overwrites or
deletes them. Contract of every method: it holds the store's lock (an
``flock`` shared by every process using the store, and inherited by the git
processes it runs, so a process killed mid-operation holds it until its git
children are gone too) while it runs, and a stale ``index.lock`` a killed
process left behind is removed under it.
Everything in the store is private (files 0600, directories 0700, whatever the
umask; git's objects are read-only, 0400): it holds the workspace's content.
Objects are written by git atomically (a temporary file, then a rename), so a
process killed mid-snapshot leaves at worst unreferenced objects; nothing
in the session log refers to a snapshot before it completed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from tether.location import private_dir
from tether.rewind.watch import Changes

__all__ = [
    "DEFAULT_CAP",
    "DEFAULT_RESERVE",
    "LowDiskError",
    "Restored",
    "Snapshot",
    "SnapshotError",
    "WorkspaceStore",
    "store_dir",
]

DEFAULT_CAP = 10 * 1024 * 1024
"""Files larger than this (bytes) are left out of snapshots and listed as unstored."""

DEFAULT_RESERVE = 256 * 1024 * 1024
"""No snapshot is taken while the store's file system has less than this free (bytes):
the session logs beside it come first."""

_CONFIG = (
    ("core.bare", "false"),
    ("core.untrackedCache", "true"),
    ("core.splitIndex", "true"),
    ("index.version", "4"),
    ("core.autocrlf", "false"),
    ("core.symlinks", "true"),
    ("core.filemode", "true"),
    ("core.quotePath", "false"),
    ("gc.auto", "0"),
    ("advice.detachedHead", "false"),
)
"""The private repository's settings: a work tree elsewhere, faithful bytes and
modes, no automatic garbage collection (a snapshot the log names must stay)."""


class SnapshotError(Exception):
    """git failed, or is missing: the snapshot or restore did not happen."""


class LowDiskError(SnapshotError):
    """The store's disk is nearly full: the snapshot is left out, the session logs come first."""


class Snapshot(NamedTuple):
    """One snapshot: the tree id, and the files it could not hold."""

    tree: str
    unstored: tuple[str, ...]


class Restored(NamedTuple):
    """What a restore did: the files it wrote back, and those it deleted."""

    written: tuple[str, ...]
    deleted: tuple[str, ...]


def store_dir(home: Path, root: Path) -> Path:
    """The private store directory of workspace ``root`` under ``home``."""
    key = hashlib.sha256(os.fsencode(root)).hexdigest()[:24]
    return home / "workspaces" / key


class WorkspaceStore:
    """Snapshots of the files under ``root``, kept under ``home`` (tether's data dir).

    Each method is blocking (git runs as subprocesses): call it in a worker
    thread from async code.
    """

    def __init__(
        self,
        root: Path,
        home: Path,
        *,
        cap: int = DEFAULT_CAP,
        reserve: int = DEFAULT_RESERVE,
        watch: bool = False,
    ) -> None:
        self.root = Path(os.path.realpath(root))
        self.cap = cap
        self.reserve = reserve
        self.dir = store_dir(home, self.root)
        self._home = Path(os.path.realpath(home))
        self._git_dir = self.dir / "git"
        self._index = self.dir / "index"
        self._tree_file = self.dir / "tree"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(
            GIT_DIR=str(self._git_dir),
            GIT_INDEX_FILE=str(self._index),
            GIT_WORK_TREE=str(self.root),
            GIT_CONFIG_NOSYSTEM="1",
            GIT_TERMINAL_PROMPT="0",
            LC_ALL="C",
        )
        self._env = env
        self._held = threading.local()
        """The lock's fd while this thread holds it: every git child inherits it, so a
        process killed mid-operation holds the lock until its git children are gone too."""
        self._changes = Changes(self.root, self._home, self._excludes_file) if watch else None

    # -- the public operations ---------------------------------------------------

    def close(self) -> None:
        """Stop watching the workspace (a store made with ``watch``): its inotify
        descriptor is closed; later snapshots scan the whole workspace. Idempotent."""
        changes, self._changes = self._changes, None
        if changes is not None:
            changes.close()

    def snapshot(self) -> Snapshot:
        """Store the workspace's files as they are now; the snapshot.

        Only files that changed since the store's last look are read.

        Raises:
            SnapshotError: git failed, the workspace is gone, or the store's file
                system has less than ``reserve`` bytes free.
        """
        with self._locked():
            info = os.statvfs(self.dir)
            free = info.f_bavail * info.f_frsize
            if free < self.reserve:
                raise LowDiskError(
                    f"the disk of {self.dir} has less than {self.reserve // 1024} KiB free, "
                    "which snapshots leave to session logs"
                )
            return self._snapshot()

    def changed(self, old: str, new: str) -> list[str]:
        """The workspace paths whose content or mode differs between trees ``old`` and ``new``.

        Raises:
            SnapshotError: a tree is not in the store.
        """
        if old == new:
            return []
        out = self._git("diff-tree", "-r", "-z", "--no-renames", "--name-only", old, new)
        return _nul_split(out)

    def patch(self, old: str, new: str, paths: Sequence[str] = ()) -> str:
        """A unified diff from tree ``old`` to tree ``new`` (of ``paths``, else of all).

        Raises:
            SnapshotError: a tree is not in the store.
        """
        if old == new:
            return ""
        args = ["diff-tree", "-p", "--no-color", "--no-renames", old, new]
        if paths:
            args += ["--", *paths]
        return self._git(*args).decode("utf-8", "replace")

    def restore(self, tree: str, keep: frozenset[str] = frozenset()) -> Restored:
        """Make the workspace's files those of snapshot ``tree``, but for the paths in ``keep``.

        In order: the files that are not in ``tree`` are deleted (and the
        directories this leaves empty), then the files that differ are
        written from the store (content and mode; a symbolic link in a
        path's leading directories is replaced, never followed). Files that
        ``tree`` does not name and that no snapshot holds (ignored, unstored)
        are left alone.

        Raises:
            SnapshotError: git failed; the workspace may be partly restored.
        """
        with self._locked():
            current = self._snapshot().tree
            deleted: list[str] = []
            written: list[str] = []
            if current != tree:
                out = self._git(
                    "diff-tree", "-r", "-z", "--no-renames", "--name-status", current, tree
                )
                fields = _nul_split(out)
                for status, path in zip(fields[::2], fields[1::2], strict=True):
                    if path in keep:
                        continue
                    (deleted if status == "D" else written).append(path)
            self._delete(deleted)
            if written:
                self._git(
                    "checkout",
                    tree,
                    "--pathspec-from-file=-",
                    "--pathspec-file-nul",
                    input=b"".join(os.fsencode(":(literal)" + p) + b"\0" for p in written),
                )
            self._write_tree()
            return Restored(tuple(written), tuple(deleted))

    # -- mechanics -----------------------------------------------------------------

    def _snapshot(self) -> Snapshot:
        if not self.root.is_dir():
            raise SnapshotError(f"the workspace {self.root} is not a directory")
        if self._home == self.root:
            # A workspace that is tether's own data directory holds nothing a snapshot
            # keeps (its logs and stores never snapshot themselves): every snapshot is
            # the empty one, known without listing the directory.
            return Snapshot(self._last_tree(), ())
        excludes_changed = self._sync_excludes()
        changes = self._changes
        dirty = None if changes is None else changes.take(self._index, excludes_changed)
        if dirty is None:
            # The tracked files that changed (stat'ed on git's threads) and the untracked
            # ones (a scan of the directories), listed by two git processes at once.
            listing = self._git_at_once(
                ("diff-files", "--name-only", "-z"),
                ("ls-files", "-z", "-o", "--exclude-standard"),
            )
            listed = _nul_split(b"".join(listing))
        elif not dirty:
            return Snapshot(self._last_tree(), changes.unstored if changes else ())
        else:
            # Of the paths changed, those in the index and those untracked and not ignored.
            pathspecs = (":(literal)" + path for path in sorted(dirty))
            listed = _nul_split(
                self._git("ls-files", "-z", "-c", "-o", "--exclude-standard", "--", *pathspecs)
            )
        add, drop, unstored = self._sort(dict.fromkeys(listed))
        if add:
            # --replace: a file where a directory was (or the reverse) takes its place.
            self._git(
                "update-index",
                "-z",
                "--add",
                "--remove",
                "--replace",
                "--stdin",
                input=_nul_join(add),
            )
        if drop:
            self._git("update-index", "-z", "--force-remove", "--stdin", input=_nul_join(drop))
        tree = self._write_tree() if add or drop else self._last_tree()
        if changes is not None:
            return Snapshot(tree, changes.seen(dirty, unstored))
        return Snapshot(tree, tuple(sorted(unstored)))

    def _sort(self, listed: Iterable[str]) -> tuple[list[str], list[str], list[str]]:
        """The paths git listed, sorted out: those to add (or remove, when gone), those to
        take out of the index (directories now, files over the cap) and the unstored."""
        add: list[str] = []
        drop: list[str] = []
        unstored: list[str] = []
        for path in listed:
            if path.endswith("/"):
                unstored.append(path.rstrip("/"))  # a nested repository
                continue
            try:
                info = os.lstat(self.root / path)
            except (FileNotFoundError, NotADirectoryError):
                add.append(path)  # gone: --remove takes it out
                continue
            if stat.S_ISDIR(info.st_mode):
                drop.append(path)  # a file became a directory: its files are listed too
            elif info.st_size > self.cap and not stat.S_ISLNK(info.st_mode):
                unstored.append(path)
                drop.append(path)
            else:
                add.append(path)
                if info.st_nlink > 1 and self._changes is not None:
                    self._changes.linked(path)
        return add, drop, unstored

    def _last_tree(self) -> str:
        try:
            tree = self._tree_file.read_text().strip()
        except FileNotFoundError:
            tree = ""
        return tree or self._write_tree()

    def _write_tree(self) -> str:
        tree = self._git("write-tree").decode().strip()
        temporary = self._tree_file.with_suffix(".tmp")
        _write_private(temporary, (tree + "\n").encode())
        os.replace(temporary, self._tree_file)
        return tree

    def _delete(self, paths: Sequence[str]) -> None:
        parents: set[Path] = set()
        for path in paths:
            target = self.root / path
            with contextlib.suppress(FileNotFoundError):
                if _is_dir(target):
                    shutil.rmtree(target)
                else:
                    target.unlink()
            parents.update(target.parents)
        if paths:
            self._git("update-index", "-z", "--force-remove", "--stdin", input=_nul_join(paths))
        # The deepest first: a directory the deletions emptied goes, up to the root.
        for parent in sorted(parents, key=lambda p: len(p.parts), reverse=True):
            if parent != self.root and self.root in parent.parents:
                with contextlib.suppress(OSError):
                    parent.rmdir()

    def _excludes_file(self) -> Path | None:
        """The excludes file the user's git configuration names, if any."""
        try:
            named = os.fsdecode(self._git("config", "--path", "--get", "core.excludesFile"))
        except SnapshotError:
            return None  # none named (or no git: the snapshot says so)
        return self.root / named.strip() if named.strip() else None

    def _sync_excludes(self) -> bool:
        """Copy the workspace repository's ``.git/info/exclude`` into the store's own, and
        exclude tether's data directory when it is inside the workspace (the snapshots
        and session logs never snapshot themselves); whether the store's changed."""
        try:
            wanted = (self.root / ".git" / "info" / "exclude").read_bytes()
        except OSError:
            wanted = b""
        if self._home == self.root:
            wanted += b"\n/*\n"
        elif self.root in self._home.parents:
            inside = _glob_literal(self._home.relative_to(self.root).as_posix())
            wanted += b"\n/" + inside + b"/\n"
        mine = self._git_dir / "info" / "exclude"
        try:
            have = mine.read_bytes()
        except OSError:
            have = None
        if have == wanted:
            return False
        private_dir(mine.parent)
        _write_private(mine, wanted)
        return True

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        private_dir(self.dir)
        fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._held.fd = fd
            # Under the lock nobody else uses the index: a lock file left is a dead process's.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(self._index) + ".lock")
            if not (self._git_dir / "HEAD").exists():
                self._create()
            try:
                yield
            except BaseException:
                if self._changes is not None:
                    self._changes.forget()
                raise
            if self._changes is not None:
                self._changes.settled(self._index)
        finally:
            self._held.fd = None
            os.close(fd)

    def _create(self) -> None:
        """Create the private repository in a temporary directory, then rename it in place,
        so a process killed meanwhile never leaves a half-made one."""
        building = Path(tempfile.mkdtemp(prefix="git-", dir=self.dir))
        try:
            # No template: no sample hooks, nothing the store does not use.
            self._git("init", "-q", "--bare", "--template=", str(building), bare=building)
            for key, value in _CONFIG:
                self._git("config", key, value, bare=building)
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(self._git_dir)
            os.rename(building, self._git_dir)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        for stale in (self._index, self._tree_file):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()

    def _inherited(self) -> tuple[int, ...]:
        fd: int | None = getattr(self._held, "fd", None)
        return () if fd is None else (fd,)

    def _git_at_once(self, *commands: tuple[str, ...]) -> list[bytes]:
        """Run each of ``commands`` (git reading the store, writing nothing) in parallel;
        their stdouts, in order."""
        running: list[tuple[list[str], subprocess.Popen[bytes]]] = []
        try:
            for args in commands:
                argv = ["git", *args]
                process = subprocess.Popen(
                    argv,
                    env=self._env,
                    cwd=self.root,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=self._inherited(),
                    umask=0o077,
                )
                running.append((argv, process))
            return [_output(argv, process) for argv, process in running]
        except OSError as exc:
            raise SnapshotError(_failure(argv, exc)) from None
        finally:
            for _, process in running:
                if process.poll() is None:
                    process.kill()
                    process.wait()

    def _git(self, *args: str, input: bytes | None = None, bare: Path | None = None) -> bytes:
        """Run ``git args`` on the store (or on the repository ``bare``, with no work tree);
        its stdout."""
        argv = ["git", *args]
        env = self._env
        if bare is not None:
            env = dict(env, GIT_DIR=str(bare))
            env.pop("GIT_WORK_TREE")
        try:
            done = subprocess.run(
                argv,
                env=env,
                cwd=self.root if bare is None else None,
                input=input,
                capture_output=True,
                check=True,
                pass_fds=self._inherited(),
                umask=0o077,
            )
        except (OSError, subprocess.CalledProcessError) as exc:
            raise SnapshotError(_failure(argv, exc)) from None
        return done.stdout


def _output(argv: list[str], process: subprocess.Popen[bytes]) -> bytes:
    """The stdout of ``process`` once it ended.

    Raises:
        SnapshotError: it failed.
    """
    out, err = process.communicate()
    if process.returncode:
        failed = subprocess.CalledProcessError(process.returncode, argv, out, err)
        raise SnapshotError(_failure(argv, failed))
    return out


def _failure(argv: list[str], exc: OSError | subprocess.CalledProcessError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "git is not installed (workspace snapshots need it)"
    if isinstance(exc, OSError):
        return f"{argv[0]} {argv[1]}: {exc}"
    stderr = exc.stderr.decode("utf-8", "replace").strip() if exc.stderr else ""
    return f"git {argv[1]} failed ({exc.returncode}): {stderr or 'no message'}"


def _glob_literal(path: str) -> bytes:
    """``path`` with the characters an ignore file treats as special escaped."""
    return os.fsencode("".join("\\" + c if c in "*?[]\\!#" else c for c in path))


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``, a file only its owner reads (0600), whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)


def _nul_split(out: bytes) -> list[str]:
    return [os.fsdecode(item) for item in out.split(b"\0") if item]


def _nul_join(paths: Sequence[str]) -> bytes:
    return b"".join(os.fsencode(path) + b"\0" for path in paths)


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False
