"""What the model is told about where it works: cwd, platform, shell, date, git.

:func:`gather` takes one snapshot, when an agent makes its first request; the
system prompt built from it stays the same for the agent's life (a prompt
that changed from one request to the next would defeat the providers'
prompt caches). A command that prompts an agent as soon as tether has booted
(``tether run``) begins the snapshot of its cwd while tether boots
(:func:`gathering_early`): ``git status`` is a process of its own, and runs
beside the boot instead of after it. The git facts come from ``git status`` run in the cwd with
optional locks off (it never writes the repository's index), under a
time limit; when git is missing, slow or fails, the snapshot says the state
is unknown rather than guessing.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec

from tether.shell.environment import child_environment

__all__ = ["Environment", "GitState", "find_repository_root", "gather", "gathering_early"]

log = logging.getLogger(__name__)

GIT_TIMEOUT = 3.0
"""Seconds ``git status`` may take before the snapshot gives up on it."""

EARLY_FOR = 5.0
"""Seconds after it was begun that a snapshot begun early is the one :func:`gather`
hands out for its cwd; later, a new one is taken."""


class GitState(msgspec.Struct, frozen=True):
    """The repository the cwd is in."""

    root: Path
    branch: str | None
    """The branch checked out; ``None`` when HEAD is detached or git could not tell."""
    dirty: bool | None
    """Whether there are uncommitted changes (untracked files count); ``None``: unknown."""
    commit: str | None = None
    """HEAD's commit (abbreviated), when known."""


class Environment(msgspec.Struct, frozen=True):
    """One snapshot of the facts the system prompt states."""

    cwd: Path
    platform: str
    shell: str
    date: datetime.date
    git: GitState | None
    """``None``: the cwd is not inside a git repository."""


def find_repository_root(cwd: Path) -> Path | None:
    """The nearest directory at or above ``cwd`` holding ``.git`` (a directory or a
    worktree's file), or ``None``."""
    for directory in (cwd, *cwd.parents):
        if (directory / ".git").exists():
            return directory
    return None


async def gather(cwd: Path) -> Environment:
    """The snapshot for an agent working in ``cwd``. Never raises for git's sake.

    Taken now, unless one was begun early for the same directory less than
    :data:`EARLY_FOR` seconds ago (:func:`gathering_early`): then that one,
    awaited if it is still running. A caller cancelled while waiting for it
    leaves it running for its owner.
    """
    early = _early.get(_key(cwd))
    if early is not None:
        begun, snapshot = early
        loop = asyncio.get_running_loop()
        if snapshot.get_loop() is loop and loop.time() - begun <= EARLY_FOR:
            return await asyncio.shield(snapshot)
    return await _take(cwd)


@contextlib.asynccontextmanager
async def gathering_early(cwd: Path) -> AsyncIterator[None]:
    """Begin the snapshot of ``cwd`` now, for the agents whose first request comes soon.

    For a command that prompts an agent working in ``cwd`` right after tether
    has booted: what :func:`gather` would wait for (chiefly ``git status``)
    runs while tether boots. The snapshot is this block's: on leaving it, a
    snapshot still running is cancelled (its git process killed and reaped),
    and :func:`gather` takes its own again.
    """
    key = _key(cwd)
    snapshot = asyncio.create_task(_take(key))
    entry = (asyncio.get_running_loop().time(), snapshot)
    _early[key] = entry
    try:
        # One step of the loop: the snapshot spawns git before the caller goes
        # on with the synchronous work of booting (importing, mounting).
        await asyncio.sleep(0)
        yield
    finally:
        if _early.get(key) is entry:
            del _early[key]
        snapshot.cancel()
        await asyncio.wait([snapshot])
        if not snapshot.cancelled() and (error := snapshot.exception()) is not None:
            # Whoever took the snapshot got this error; nobody else is told.
            log.info("the environment snapshot of %s failed: %s", key, error)


_early: dict[Path, tuple[float, asyncio.Task[Environment]]] = {}
"""The snapshots begun early, by absolute cwd, with the loop time each was begun at."""


def _key(cwd: Path) -> Path:
    return Path(os.path.abspath(cwd))


async def _take(cwd: Path) -> Environment:
    root = find_repository_root(cwd)
    git = None if root is None else await _git_state(cwd, root)
    return Environment(
        cwd=cwd,
        platform=_platform(),
        shell=_shell(),
        date=datetime.date.today(),
        git=git,
    )


def _platform() -> str:
    uname = os.uname()
    described = f"{uname.sysname} {uname.release} ({uname.machine})"
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text(errors="replace").splitlines():
            if line.startswith("PRETTY_NAME="):
                return f"{described}, {line.partition('=')[2].strip().strip(chr(34))}"
    return described


def _shell() -> str:
    shell = os.environ.get("SHELL", "")
    return Path(shell).name if shell else "unknown"


async def _git_state(cwd: Path, root: Path) -> GitState:
    """Branch, commit and dirtiness from ``git status --porcelain=v2 --branch``."""
    # --no-ahead-behind: the counts against the upstream (a walk of the
    # history, which the snapshot does not state) are left uncounted.
    output = await _run_git(
        cwd, "status", "--porcelain=v2", "--branch", "--no-ahead-behind", "--untracked-files=normal"
    )
    if output is None:
        return GitState(root=root, branch=None, dirty=None)
    branch: str | None = None
    commit: str | None = None
    dirty = False
    for line in output.splitlines():
        if line.startswith("# branch.head "):
            head = line[len("# branch.head ") :].strip()
            branch = None if head == "(detached)" else head
        elif line.startswith("# branch.oid "):
            oid = line[len("# branch.oid ") :].strip()
            commit = None if oid == "(initial)" else oid[:12]
        elif line and not line.startswith("#"):
            dirty = True
    return GitState(root=root, branch=branch, dirty=dirty, commit=commit)


async def _run_git(cwd: Path, *args: str) -> str | None:
    """Run git in ``cwd``; its stdout, or ``None`` if it could not tell in time."""
    env = child_environment({"GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"})
    try:
        process = await asyncio.create_subprocess_exec(
            "git",
            "--no-optional-locks",
            *args,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except OSError as exc:
        log.info("git is not available for the system prompt: %s", exc)
        return None
    try:
        stdout, _ = await asyncio.wait_for(process.communicate(), GIT_TIMEOUT)
    except TimeoutError:
        log.info(
            "git status in %s took longer than %ss; its state is left unknown", cwd, GIT_TIMEOUT
        )
        return None
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
    if process.returncode != 0:
        return None
    return stdout.decode(errors="replace")
