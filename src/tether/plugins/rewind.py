"""The ``rewind`` plugin: a snapshot of the workspace at every turn and around every writing call.

It listens where the loop and the tool pipeline run, and logs each snapshot
as a ``workspace/snapshot`` event (:mod:`tether.session.snapshot`) in the
agent's session, bound to the seq it lands at:

* ``agent/pre-step`` (waterfall), the first step of a turn: ``turn``, before
  the turn's first model request;
* ``tool/before-execute`` (waterfall), for a call that can write: ``call``,
  once every later listener let the call run (a call a person or a rule
  denies takes none);
* ``tool/after-execute`` (waterfall), for the same calls: ``called``.

A call *can write* unless its tool declares itself read-only: a
``read``/``search``/``think``/``fetch``/``switch_mode`` kind, or
``concurrency_safe`` (which an MCP tool is when it declares ``readOnlyHint``).
``write``, ``edit``, ``bash``, ``task`` and undeclared plugin and MCP tools
can.

The workspace is the session's cwd; snapshots are kept in a private store
per workspace (:mod:`tether.rewind.store`) under tether's data directory.
Each store watches its workspace (inotify, :mod:`tether.rewind.watch`) from
its first snapshot until the plugin unloads, so a snapshot reads only the
paths that changed.
The filesystem root and the home directory are never snapshotted (a session
started there has no snapshots). A snapshot that fails (no git, a full disk)
is logged, once per workspace and reason, and the turn or call goes on
without it: rewinding to it is then refused, never wrong.

Provides ``workspaces`` (:class:`Workspaces`): the store of a workspace, and
:meth:`Workspaces.record`, which logs a snapshot for a session (a rewind's
``rewound``, a fork's ``forked``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from msgspec import Meta

from tether.location import data_dir
from tether.loop.hooks import PRE_STEP
from tether.rewind.store import (
    DEFAULT_CAP,
    DEFAULT_RESERVE,
    LowDiskError,
    SnapshotError,
    WorkspaceStore,
)
from tether.runtime.keys import ServiceKey
from tether.runtime.schema import Schema
from tether.session import SnapshotMoment, WorkspaceSnapshot
from tether.shell.definition import SHELL, TaskStatus
from tether.tools.execute import AFTER_EXECUTE, BEFORE_EXECUTE, ToolInvocation

if TYPE_CHECKING:
    from tether.agent import Agent, UserMessage
    from tether.runtime import Context
    from tether.session import Session
    from tether.tools import Tool, ToolResult

__all__ = ["READ_ONLY_KINDS", "WORKSPACES", "Config", "Workspaces", "can_write"]

log = logging.getLogger(__name__)

name = "rewind"
optional = ("shell",)

READ_ONLY_KINDS = frozenset({"read", "search", "think", "fetch", "switch_mode"})
"""Tool kinds whose calls change no file."""


class Config(Schema, frozen=True):
    """Configuration of workspace snapshots."""

    max_file_bytes: Annotated[int, Meta(ge=1)] = DEFAULT_CAP
    """Files larger than this are left out of snapshots (and listed as not restorable)."""
    min_free_bytes: Annotated[int, Meta(ge=0)] = DEFAULT_RESERVE
    """No snapshot is taken while the data directory's disk has less free than this."""
    data_dir: Path | None = None
    """Where the private stores live (under ``workspaces/``); default: tether's data dir."""


WORKSPACES = ServiceKey["Workspaces"]("workspaces")
"""``ctx.workspaces``: the snapshot stores of workspaces, and logging a snapshot."""


def can_write(tool: Tool[Any] | None) -> bool:
    """Whether a call of ``tool`` may change files (see the module docstring)."""
    return tool is not None and not tool.concurrency_safe and tool.shown.kind not in READ_ONLY_KINDS


class Workspaces:
    """The snapshot stores, one per workspace root, and the snapshots the plugin logs."""

    def __init__(self, ctx: Context, config: Config) -> None:
        self._ctx = ctx
        self._home = data_dir(config.data_dir)
        self._cap = config.max_file_bytes
        self._reserve = config.min_free_bytes
        self._stores: dict[Path, WorkspaceStore] = {}
        self._said: set[tuple[str, str]] = set()
        self._watching = True

    def store(self, cwd: str) -> WorkspaceStore | None:
        """The store of the workspace at ``cwd``; ``None`` for one never snapshotted
        (the filesystem root, the home directory)."""
        root = Path(os.path.realpath(cwd))
        if root == Path(root.anchor) or root == Path(os.path.realpath(Path.home())):
            return None
        store = self._stores.get(root)
        if store is None:
            store = self._stores[root] = WorkspaceStore(
                root, self._home, cap=self._cap, reserve=self._reserve, watch=self._watching
            )
        return store

    def close(self) -> None:
        """Stop watching every workspace (their inotify descriptors are closed); a store
        used or made afterwards scans its whole workspace at each snapshot."""
        self._watching = False
        for store in self._stores.values():
            store.close()

    async def record(
        self,
        session: Session,
        moment: SnapshotMoment,
        *,
        call: str | None = None,
        restored: int | None = None,
        outside: tuple[str, ...] = (),
    ) -> WorkspaceSnapshot | None:
        """Snapshot ``session``'s workspace now and append it as ``moment``; the event's
        payload, or ``None`` when none was taken (said in the log once per reason).

        Raises:
            SessionError: the session refused the append (it is closed).
        """
        cwd = session.header.cwd
        store = self.store(cwd) if cwd else None
        if store is None:
            return None
        try:
            taken = await asyncio.to_thread(store.snapshot)
        except LowDiskError as exc:
            # The session logs will say the disk is full if it matters; this is no failure.
            log.info("no workspace snapshot of %s: %s", store.root, exc)
            return None
        except (SnapshotError, OSError) as exc:
            self._say(str(store.root), str(exc))
            return None
        snapshot = WorkspaceSnapshot(
            moment=moment,
            turn=session.open_turn or session.last_turn,
            tree=taken.tree,
            root=str(store.root),
            call=call,
            restored=restored,
            running=self._running(session.id),
            unstored=taken.unstored,
            outside=outside,
        )
        session.append(snapshot)
        return snapshot

    def _running(self, owner: str) -> tuple[str, ...]:
        shell = self._ctx.get(SHELL)
        if shell is None:
            return ()
        return tuple(
            task.id
            for task in shell.list()
            if task.status is TaskStatus.RUNNING and shell.owner_of(task.id) == owner
        )

    def _say(self, root: str, problem: str) -> None:
        level = logging.DEBUG if (root, problem) in self._said else logging.WARNING
        self._said.add((root, problem))
        log.log(level, "no workspace snapshot of %s: %s", root, problem)

    # -- the listeners ---------------------------------------------------------------

    async def before_step(
        self,
        step_input: tuple[UserMessage, ...],
        next_: Callable[[tuple[UserMessage, ...]], Awaitable[tuple[UserMessage, ...]]],
        agent: Agent,
        step: int,
    ) -> tuple[UserMessage, ...]:
        """``agent/pre-step``: the first step of a turn takes the ``turn`` snapshot."""
        if step == 1:
            await self.record(agent.session, "turn")
        return await next_(step_input)

    async def before_call(
        self,
        invocation: ToolInvocation,
        next_: Callable[[ToolInvocation], Awaitable[ToolInvocation]],
    ) -> ToolInvocation:
        """``tool/before-execute``: a call that can write takes the ``call`` snapshot,
        once the listeners after this one let it run."""
        invocation = await next_(invocation)
        agent = invocation.exec.agent
        if agent is not None and can_write(invocation.tool):
            await self.record(
                agent.session,
                "call",
                call=invocation.exec.call_id,
                outside=self._outside(invocation, agent.session.header.cwd),
            )
        return invocation

    async def after_call(
        self,
        result: ToolResult,
        next_: Callable[[ToolResult], Awaitable[ToolResult]],
        invocation: ToolInvocation,
    ) -> ToolResult:
        """``tool/after-execute``: the same calls take the ``called`` snapshot."""
        agent = invocation.exec.agent
        if agent is not None and can_write(invocation.tool):
            await self.record(agent.session, "called", call=invocation.exec.call_id)
        return await next_(result)

    def _outside(self, invocation: ToolInvocation, cwd: str | None) -> tuple[str, ...]:
        """The files the call names that are outside its workspace."""
        tool = invocation.tool
        if tool is None or cwd is None:
            return ()
        root = os.path.realpath(cwd)
        named = tool.shown.locations(invocation.shown_args, cwd)
        return tuple(
            sorted(
                {
                    where.path
                    for where in named
                    if os.path.commonpath([root, os.path.realpath(where.path)]) != root
                }
            )
        )


async def apply(ctx: Context, config: Config) -> None:
    workspaces = Workspaces(ctx, config)
    ctx.defer(workspaces.close, label="stop watching workspaces")
    ctx.provide(WORKSPACES, workspaces)
    ctx.on(PRE_STEP, workspaces.before_step)
    ctx.on(BEFORE_EXECUTE, workspaces.before_call)
    ctx.on(AFTER_EXECUTE, workspaces.after_call)
