"""Git worktrees a child agent owns: created from its parent's workspace, closed with it.

:func:`open_worktree` makes ``<git common dir>/tether-worktrees/<name>``, a
``git worktree`` on a new branch ``tether/<name>`` at the parent's ``HEAD``,
then brings over the parent's uncommitted work: the tracked changes
(``git diff --binary HEAD``, staged or not, applied with ``git apply``) and
the untracked files git does not ignore (copied). That state is the
worktree's **base**, kept as a tree id (written with a private index, so
neither repository's index changes). The directory is inside the
repository's git directory: never part of the tracked tree, never listed as
untracked, and ``git worktree list`` names it.

:meth:`Worktree.close` decides what becomes of it once its owner is done
(after the owner's processes were stopped): a worktree whose files equal its
base and whose ``HEAD`` did not move is removed with its branch; a changed
one is **kept** as it is (nothing is committed), and the outcome names its
path, its branch and its diff against the base. ``close`` runs once; every
later call returns the same outcome.

Every failure is a :class:`WorktreeError` with a one-line message: git is
missing, the directory is not in a repository, the repository has no commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DIFF_LIMIT",
    "WORKTREES_DIR",
    "Worktree",
    "WorktreeError",
    "WorktreeOutcome",
    "open_worktree",
]

WORKTREES_DIR = "tether-worktrees"
"""The directory of the git common dir that holds tether's worktrees."""
BRANCH_PREFIX = "tether/"
DIFF_LIMIT = 20_000
"""Characters of a diff an outcome carries; a longer one is cut at a line, with a note."""

_GIT_ENV_DROPPED = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR")


class WorktreeError(Exception):
    """A worktree could not be made or read; the message is one line."""


@dataclass(frozen=True)
class WorktreeOutcome:
    """What became of a closed worktree."""

    kept: bool
    """Whether it is left on disk (it had changes)."""
    path: str
    branch: str
    diff: str
    """Its changes against its base (cut to :data:`DIFF_LIMIT`, see ``cut``)."""
    cut: bool = False
    """Whether ``diff`` was cut short."""

    def describe(self) -> str:
        """The outcome for a model or a person: kept or removed, then the diff."""
        if not self.kept:
            return f"[worktree {self.path}: no changes; removed with branch {self.branch}]"
        note = (
            f"\n[diff cut at {DIFF_LIMIT} characters: the worktree holds every change]"
            if self.cut
            else ""
        )
        return (
            f"[worktree kept: {self.path} (branch {self.branch}); "
            f"its changes against the base it started from:]\n{self.diff}{note}"
        )


class Worktree:
    """One worktree made by :func:`open_worktree` (see the module docstring)."""

    def __init__(self, *, root: Path, cwd: Path, branch: str, head: str, base: str) -> None:
        self.root = root
        """The worktree's top directory."""
        self.cwd = cwd
        """Where the owner works: the parent's directory, at the same place in the worktree."""
        self.branch = branch
        self.head = head
        """The commit it was created at (the parent's ``HEAD``)."""
        self.base = base
        """The tree of its files when it was created (``HEAD`` plus the parent's changes)."""
        self._closing: asyncio.Future[WorktreeOutcome] | None = None
        self._closed = asyncio.Event()

    @property
    def outcome(self) -> WorktreeOutcome | None:
        """The outcome of :meth:`close`, once it has finished; ``None`` before."""
        closing = self._closing
        if closing is None or not closing.done() or closing.exception() is not None:
            return None
        return closing.result()

    async def close(self) -> WorktreeOutcome:
        """Remove the worktree and its branch if unchanged, else keep it; once.

        Raises:
            WorktreeError: git failed reading or removing it (it is then left).
        """
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        return await asyncio.shield(self._closing)

    async def closed(self) -> WorktreeOutcome | None:
        """Wait until its owner's :meth:`close` has finished (without closing it); the
        outcome, or ``None`` when closing failed."""
        await self._closed.wait()
        return self.outcome

    async def _close(self) -> WorktreeOutcome:
        try:
            return await self._decide()
        finally:
            self._closed.set()

    async def _decide(self) -> WorktreeOutcome:
        if not self.root.exists():
            return WorktreeOutcome(kept=False, path=str(self.root), branch=self.branch, diff="")
        now = await _tree_of(self.root)
        head = (await _git(self.root, "rev-parse", "HEAD")).strip()
        if now == self.base and head == self.head:
            await _git(self.root, "worktree", "remove", "--force", str(self.root))
            await _git(_common_dir_parent(self.root), "branch", "-D", self.branch)
            return WorktreeOutcome(kept=False, path=str(self.root), branch=self.branch, diff="")
        diff = await _git(self.root, "diff", "--no-color", "--no-ext-diff", self.base, now)
        text, cut = _bounded(diff)
        return WorktreeOutcome(
            kept=True, path=str(self.root), branch=self.branch, diff=text, cut=cut
        )


async def open_worktree(cwd: str, name: str) -> Worktree:
    """A worktree of the repository ``cwd`` is in, named ``name`` (see the module docstring).

    Raises:
        WorktreeError: git is missing, ``cwd`` is in no repository (or one
            without a commit), or git failed.
    """
    top = Path((await _git(Path(cwd), "rev-parse", "--show-toplevel", what=cwd)).strip())
    head = (await _git(top, "rev-parse", "--verify", "-q", "HEAD", what=cwd)).strip()
    common = Path((await _git(top, "rev-parse", "--git-common-dir")).strip())
    root = (top / common if not common.is_absolute() else common).resolve() / WORKTREES_DIR / name
    branch = BRANCH_PREFIX + name
    await _git(top, "worktree", "add", "-q", "-b", branch, str(root), head)
    try:
        await _bring_over(top, root)
        base = await _tree_of(root)
    except BaseException as exc:
        # Half made: it goes, with its branch, before the error is told.
        with contextlib.suppress(WorktreeError):
            await _git(top, "worktree", "remove", "--force", str(root))
            await _git(top, "branch", "-D", branch)
        if isinstance(exc, OSError):
            raise WorktreeError(
                f"worktree isolation: could not copy {exc.filename}: {exc.strerror}"
            ) from None
        raise
    return Worktree(root=root, cwd=_same_place(cwd, top, root), branch=branch, head=head, base=base)


async def _bring_over(top: Path, root: Path) -> None:
    """Apply the uncommitted work of the repository at ``top`` to the worktree at ``root``:
    its tracked changes (staged or not, binary included) and its untracked files that
    git does not ignore.

    Raises:
        WorktreeError: git could not read or apply them.
        OSError: an untracked file could not be copied.
    """
    changes = await _git(top, "diff", "--binary", "--ignore-submodules", "HEAD")
    if changes.strip():
        await _git(
            root,
            "apply",
            "--whitespace=nowarn",
            "-",
            input=changes.encode(errors="surrogateescape"),
        )
    untracked = await _git(top, "ls-files", "-z", "--others", "--exclude-standard")
    for relative in filter(None, untracked.split("\0")):
        _copy(top / relative, root / relative)


def _same_place(cwd: str, top: Path, root: Path) -> Path:
    """Where ``cwd`` (inside the repository at ``top``) is in the worktree at ``root``."""
    return root / os.path.relpath(Path(cwd).resolve(), top.resolve())


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_symlink():
        target.symlink_to(os.readlink(source))
    else:
        shutil.copy2(source, target)


async def _tree_of(root: Path) -> str:
    """The tree of ``root``'s files as git sees them (ignored files left out), written
    through a private index: the worktree's own index is not touched."""
    with tempfile.TemporaryDirectory(prefix="tether-index-") as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        await _git(root, "read-tree", "HEAD", env=env)
        await _git(root, "add", "-A", ".", env=env)
        return (await _git(root, "write-tree", env=env)).strip()


def _common_dir_parent(root: Path) -> Path:
    """A directory of the main repository to run git in once ``root`` is gone."""
    return root.parent.parent


def _not_started(where: Path) -> WorktreeError:
    """Why git could not start in ``where``: the directory is gone, or git is missing."""
    if not where.is_dir():
        return WorktreeError(f"worktree isolation: {where} is not a directory")
    return WorktreeError("worktree isolation needs git, and git is not installed")


def _bounded(diff: str) -> tuple[str, bool]:
    if len(diff) <= DIFF_LIMIT:
        return diff, False
    head = diff[:DIFF_LIMIT]
    return head[: head.rfind("\n") + 1] or head, True


async def _git(
    where: Path,
    *args: str,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
    what: str | None = None,
) -> str:
    """Run git in ``where``; its stdout.

    Raises:
        WorktreeError: git is missing, or it failed (its first line of error;
            with ``what``, a failure means ``what`` is in no repository with a commit).
    """
    full_env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROPPED}
    full_env.update(env or {})
    try:
        process = await asyncio.create_subprocess_exec(
            "git",
            *args,
            cwd=where,
            env=full_env,
            stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except FileNotFoundError:
        raise _not_started(where) from None
    out, err = await process.communicate(input)
    if process.returncode != 0:
        if what is not None:
            raise WorktreeError(
                f"worktree isolation needs a git repository with a commit: {what} is not in one"
            )
        first = (err.decode(errors="replace").strip().splitlines() or ["no message"])[0]
        raise WorktreeError(f"git {args[0]} failed: {first}")
    return out.decode(errors="surrogateescape")
