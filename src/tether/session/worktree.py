"""``worktree/created``: the session's agent works in a git worktree it owns.

Appended to a child's log before the child is published, when its ``task``
call asked for ``isolation: worktree`` (see ``docs/agents.md``)::

    {"path": "/src/app/.git/tether-worktrees/20261205-…", "branch": "tether/20261205-…",
     "head": "4b82…", "base": "9f1c…"}

``path`` is the worktree's top directory, ``branch`` its branch, ``head`` the
commit it was created at (the parent's ``HEAD``), ``base`` the tree of its
files then (``HEAD`` plus the parent's uncommitted changes). The worktree is
removed with its branch when the child is disposed unchanged, and kept
otherwise; the event is what finds it after a crash (``tether sessions
show``). Not model-visible. Part of the core vocabulary.
"""

from __future__ import annotations

from typing import ClassVar

from tether.session.fields import check_id
from tether.session.payload import EventStruct

__all__ = ["WorktreeCreated"]

_TYPE = "worktree/created"


class WorktreeCreated(EventStruct, frozen=True):
    """The session's worktree (see the module docstring)."""

    type: ClassVar[str] = _TYPE

    path: str
    branch: str
    head: str
    base: str

    def __post_init__(self) -> None:
        for name in ("path", "branch", "head", "base"):
            check_id(_TYPE, name, getattr(self, name))
