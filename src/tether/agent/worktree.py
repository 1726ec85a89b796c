"""An agent in a git worktree it owns: ``ctx.agents.create(..., isolation="worktree")``.

The worktree (:mod:`tether.rewind.worktree`) is made before the agent, from
the repository ``cwd`` is in (its ``HEAD`` plus its uncommitted work), and
named by the agent's id: the agent's session cwd is the same place inside
it, so its shell, file tools, sandbox writable roots and snapshots all point
there. Before the agent is published its log records ``worktree/created``
(what finds the worktree after a crash), and its scope owns the worktree:
the scope unwinds last in the teardown, after the agent's processes were
stopped, and closes it — removed with its branch when unchanged, kept
otherwise. ``handle.worktree`` reads it; ``await handle.worktree.closed()``
gives the outcome (kept or not, the diff) once the agent is disposed.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal

import msgspec

from tether.agent.errors import AgentCreateError
from tether.rewind.worktree import Worktree, WorktreeError, open_worktree
from tether.session.store import new_session_id
from tether.session.worktree import WorktreeCreated

if TYPE_CHECKING:
    from tether.agent.registry import Setup
    from tether.agent.types import Agent, AgentHandle

__all__ = ["ISOLATIONS", "Isolation", "create_isolated"]

log = logging.getLogger(__name__)

Isolation = Literal["none", "worktree"]
"""Where a new agent works: ``none``, in ``cwd``; ``worktree``, in a git worktree it owns."""
ISOLATIONS: tuple[str, ...] = ("none", "worktree")

Create = Callable[[str, str, "Setup"], Awaitable["AgentHandle"]]
"""Creates the agent: ``(session_id, cwd, setup)``."""


async def create_isolated(
    create: Create, *, session_id: str | None, cwd: str | None, setup: Setup | None
) -> AgentHandle:
    """Make a worktree of ``cwd``'s repository, then the agent in it (see the module docs).

    A creation that fails closes the worktree (removed: nothing changed it).

    Raises:
        AgentCreateError: the worktree could not be made (no git, no
            repository, no commit), in one line.
    """
    name = session_id or new_session_id()
    try:
        worktree = await open_worktree(cwd or os.getcwd(), name)
    except WorktreeError as exc:
        raise AgentCreateError(str(exc)) from None
    try:
        handle = await create(name, str(worktree.cwd), _owning(worktree, setup))
    except BaseException:
        await close_logged(worktree)
        raise
    return msgspec.structs.replace(handle, worktree=worktree)


def _owning(worktree: Worktree, setup: Setup | None) -> Setup:
    """The agent's setup: its log names the worktree, its scope closes it; then ``setup``."""

    async def owning(agent: Agent) -> None:
        agent.session.append(
            WorktreeCreated(
                path=str(worktree.root),
                branch=worktree.branch,
                head=worktree.head,
                base=worktree.base,
            )
        )
        agent.ctx.defer(lambda: close_logged(worktree), label=f"worktree {worktree.branch}")
        if setup is not None:
            result = setup(agent)
            if inspect.isawaitable(result):
                await result

    return owning


async def close_logged(worktree: Worktree) -> None:
    """Close ``worktree``; a git failure leaves it on disk and is logged."""
    try:
        await worktree.close()
    except WorktreeError as exc:
        log.warning("worktree %s left on disk: %s", worktree.root, exc)
