"""Rewind and fork, as every front end offers them: the workspace, the conversation, or both.

* **Code** (:func:`rewind_code`): the workspace goes back to the snapshot
  taken as turn N started (:mod:`tether.rewind.plan`); the session logs a
  ``rewound`` snapshot, so what tether rewrote is never taken later for a
  change made outside the agent.
* **Conversation** (:func:`fork_session`): the log is never cut. A new
  session starts from the events before turn N's ``turn/start`` — a branch
  whose header's lineage names the parent and that seq — and the parent stays
  as it was, every event loadable. Prompts the copied events still held
  queued (turn N's own, at least) are cancelled in the branch (logged, as a
  cancel logs them), so nothing runs unasked; their texts are handed back.
  A fork without a turn copies the whole log (an open turn is closed as a
  crash would be: ``interrupted``).
* **Both**: the workspace is restored, and the branch logs the ``rewound``
  snapshot.

Safety: a code rewind refuses (:class:`OutsideChangesError`, naming the
files) when a file it would overwrite was changed outside the agent since
the snapshot, unless forced. Files no snapshot holds are listed in the
result, never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tether.plugins.rewind import WORKSPACES, Workspaces
from tether.rewind.plan import RewindPlan, plan_rewind, prompt_text, turn_point, turn_points
from tether.rewind.store import Restored, WorkspaceStore
from tether.session import (
    InboxSpliced,
    Lineage,
    Session,
    SessionHeader,
    repair,
    replay_inbox,
)
from tether.session.store import new_session_id

if TYPE_CHECKING:
    from tether.persist.service import Persistence
    from tether.session.store import SessionStore

__all__ = [
    "WORKSPACES",
    "Changes",
    "Forked",
    "OutsideChangesError",
    "RewindError",
    "Rewound",
    "Workspaces",
    "changes_since",
    "first_snapshot_turn",
    "fork_session",
    "held",
    "restore_workspace",
    "rewind_code",
    "workspace_of",
]


class RewindError(Exception):
    """A rewind or fork cannot be done as asked (said in one line)."""


class OutsideChangesError(RewindError):
    """Files the rewind would overwrite were changed outside the agent since the snapshot."""

    def __init__(self, turn: int, paths: tuple[str, ...]) -> None:
        self.turn = turn
        self.paths = paths
        super().__init__(self.describe("--force"))

    def describe(self, force: str) -> str:
        """The refusal in one line, naming ``force`` as the way to overwrite anyway."""
        paths = self.paths
        shown = ", ".join(paths[:10]) + (f" and {len(paths) - 10} more" if len(paths) > 10 else "")
        return (
            f"{len(paths)} file(s) changed outside the agent since turn {self.turn} started "
            f"would be overwritten: {shown}; rewind with {force} to overwrite them anyway"
        )


@dataclass(frozen=True)
class Rewound:
    """A workspace rewound to the start of ``turn``: the plan it followed and what it did."""

    turn: int
    plan: RewindPlan
    restored: Restored


@dataclass(frozen=True)
class Forked:
    """A branch of ``parent``: session ``id``, which copied the parent's first ``seq`` events."""

    id: str
    parent: str
    seq: int
    turn: int | None
    dropped: tuple[str, ...]
    """The texts of the prompts that were still queued at the fork point (not run)."""


def workspace_of(workspaces: Workspaces, session: Session) -> WorkspaceStore:
    """The snapshot store of ``session``'s workspace.

    Raises:
        RewindError: the session's workspace is never snapshotted.
    """
    cwd = session.header.cwd
    store = workspaces.store(cwd) if cwd else None
    if store is None:
        raise RewindError(f"session {session.id} works in {cwd or '?'}, which has no snapshots")
    return store


async def restore_workspace(
    workspaces: Workspaces, session: Session, turn: int, *, force: bool
) -> Rewound:
    """Restore ``session``'s workspace to the start of ``turn`` (nothing is logged).

    Raises:
        NoSnapshotError: no such turn, or it has no snapshot.
        OutsideChangesError: files changed outside the agent would be overwritten
            (never raised with ``force``).
        RewindError: the workspace is never snapshotted.
        SnapshotError: git failed.
    """
    store = workspace_of(workspaces, session)
    events = list(session.events)
    plan = await asyncio.to_thread(plan_rewind, events, turn, store)
    if plan.outside and not force:
        raise OutsideChangesError(turn, plan.outside)
    restored = await asyncio.to_thread(
        store.restore, plan.target.tree, frozenset(plan.unrestorable)
    )
    return Rewound(turn, plan, restored)


async def rewind_code(
    workspaces: Workspaces, session: Session, turn: int, *, force: bool
) -> Rewound:
    """Rewind the workspace of ``session`` (live in this process, no turn running) to
    the start of ``turn``, and log the ``rewound`` snapshot in it.

    Raises:
        RewindError: a turn is running, or as :func:`restore_workspace`.
    """
    if session.open_turn is not None:
        raise RewindError(f"turn {session.open_turn} is running: cancel it before a rewind")
    rewound = await restore_workspace(workspaces, session, turn, force=force)
    await workspaces.record(session, "rewound", restored=rewound.plan.target_seq)
    return rewound


async def fork_session(
    persistence: Persistence,
    workspaces: Workspaces | None,
    parent: Session,
    *,
    turn: int | None,
    rewound: Rewound | None = None,
    seq: int | None = None,
) -> Forked:
    """Store a branch of ``parent`` made before ``turn`` started (``None``: after its
    last event; ``seq``, when given instead: holding the parent's first ``seq``
    events); its workspace snapshot is ``rewound``'s when the workspace was
    restored for it, else the workspace as it is (``forked``). Returns once the
    branch is on disk.

    Raises:
        NoSnapshotError: the parent has no turn ``turn``.
        RewindError: ``seq`` is not from 1 to the parent's number of events.
        OSError, LogStoreError: the branch could not be stored.
    """
    cut = _fork_point(parent, turn, seq)
    header = SessionHeader(
        id=new_session_id(),
        created_at=time.time(),
        cwd=parent.header.cwd,
        lineage=Lineage(parent.id, cut),
        meta=dict(parent.header.meta),
    )
    branch = Session.restore(header, parent.events[:cut], registry=parent.registry)
    repair(branch)
    pending = replay_inbox(branch.events)
    dropped: list[str] = []
    for queue, messages in (("queued", pending.queued), ("steering", pending.steering)):
        if messages:
            dropped += [prompt_text(message) for message in messages]
            ids = tuple(message.id for message in messages)
            branch.append(InboxSpliced(queue=queue, op="cancel", ids=ids))  # type: ignore[arg-type]
    if workspaces is not None:
        if rewound is not None:
            await workspaces.record(branch, "rewound", restored=rewound.plan.target_seq)
        else:
            await workspaces.record(branch, "forked")
    await persistence.store_new(branch)
    return Forked(branch.id, parent.id, cut, turn, tuple(dropped))


def _fork_point(parent: Session, turn: int | None, seq: int | None) -> int:
    """The number of ``parent``'s events a branch copies (see :func:`fork_session`).

    Raises:
        NoSnapshotError: the parent has no turn ``turn``.
        RewindError: ``seq`` is out of range.
    """
    length = len(parent.events)
    if seq is not None:
        if not 1 <= seq <= length:
            raise RewindError(
                f"session {parent.id} has {length} events: a branch holds 1 to {length} "
                f"of them, not {seq}"
            )
        return seq
    return length if turn is None else turn_point(parent.events, turn).seq


@contextlib.asynccontextmanager
async def held(
    sessions: SessionStore, persistence: Persistence, session_id: str
) -> AsyncIterator[Session]:
    """The stored session ``session_id``, live in this process (its lease taken) while
    the block runs; what the block appends is on disk when it ends.

    Raises:
        SessionLeasedError: another process has the session open.
        SessionConflictError: it is live in this process.
        Everything :meth:`Persistence.load` raises.
    """
    session = await persistence.prepare_resume(session_id)
    try:
        sessions.enter(session)
    except BaseException:
        persistence.abandon(session)
        raise
    sessions.announce(session)
    try:
        yield session
        await sessions.flush(session)
    finally:
        sessions.detach(session)


@dataclass(frozen=True)
class Changes:
    """What changed in a workspace since the snapshot at the start of ``turn``."""

    turn: int
    patch: str
    """A unified diff from that snapshot to the workspace now (empty: nothing changed)."""
    outside: tuple[str, ...]
    """The changed files that were changed outside the agent."""
    unrestorable: tuple[str, ...]
    """Files no snapshot holds (over the cap, nested repositories, outside the workspace)."""


def first_snapshot_turn(session: Session) -> int:
    """The first turn of ``session`` with a workspace snapshot.

    Raises:
        RewindError: it has none.
    """
    turn = next((p.turn for p in turn_points(session.events) if p.snapshot is not None), None)
    if turn is None:
        raise RewindError(f"session {session.id} has no workspace snapshot")
    return turn


async def changes_since(workspaces: Workspaces, session: Session, turn: int | None) -> Changes:
    """The workspace's changes since turn ``turn`` started (``None``: the first turn with
    a snapshot), read from the snapshots and the disk now (so shell changes count too).

    Raises:
        NoSnapshotError: no such turn, or it has no snapshot.
        RewindError: the workspace is never snapshotted, or the session has no snapshot.
        SnapshotError: git failed.
    """
    store = workspace_of(workspaces, session)
    if turn is None:
        turn = first_snapshot_turn(session)
    plan = await asyncio.to_thread(plan_rewind, list(session.events), turn, store)
    patch = await asyncio.to_thread(store.patch, plan.target.tree, plan.now.tree)
    return Changes(turn, patch, plan.outside, plan.unrestorable)
