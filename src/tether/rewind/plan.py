"""What a rewind to a turn does, read from a session's ``workspace/snapshot`` events.

A rewind to turn N restores the snapshot taken as turn N started: the files
as they were before that turn did anything. :func:`plan_rewind` compares it
with the workspace now and finds:

* **restore** — the paths that differ, to be written back or deleted;
* **outside** — those of them changed *outside the agent* since that
  snapshot. The log's snapshots cut time into intervals; the changes within
  one belong to the agent when a writing tool call ran in it (it starts at
  a ``call`` snapshot), when one of the session's background tasks was
  running at either end, or when tether rewrote the workspace (it ends at a
  ``rewound`` or ``forked`` snapshot). Any other change — between turns,
  between two calls, after the last snapshot — was made by someone else;
* **unrestorable** — files no snapshot could hold (over the size cap, nested
  repositories) and files outside the workspace that calls since then
  named: they are listed, never silently skipped, and never touched.

A turn that started before snapshots were taken (an older log, or the
snapshot plugin not composed) has no snapshot: it cannot be rewound to.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from tether.content import TextBlock
from tether.rewind.store import Snapshot, WorkspaceStore
from tether.session import (
    Event,
    InboxSpliced,
    TurnStart,
    UserMessageEvent,
    WorkspaceSnapshot,
)

__all__ = [
    "NoSnapshotError",
    "RewindPlan",
    "TurnPoint",
    "plan_rewind",
    "prompt_text",
    "snapshots",
    "turn_point",
    "turn_points",
]


class NoSnapshotError(LookupError):
    """The turn asked for does not exist, or has no workspace snapshot."""


@dataclass(frozen=True)
class TurnPoint:
    """A turn of a session, as a point to rewind or fork to."""

    turn: int
    seq: int
    """The seq of its ``turn/start``: a fork at this turn copies the events before it."""
    snapshot: int | None
    """The seq of its turn-start ``workspace/snapshot``, if one was taken."""
    prompt: str
    """The text of the prompt it ran (empty if none is logged)."""


def snapshots(events: Sequence[Event]) -> list[tuple[int, WorkspaceSnapshot]]:
    """Every ``workspace/snapshot`` of ``events`` with its seq, in order."""
    return [
        (event.seq, event.payload)
        for event in events
        if isinstance(event.payload, WorkspaceSnapshot)
    ]


def turn_points(events: Sequence[Event]) -> list[TurnPoint]:
    """Every turn of ``events``, oldest first, with its start, snapshot and prompt."""
    points: list[TurnPoint] = []
    prompts: dict[str, str] = {}
    current: dict[str, object] | None = None
    for event in events:
        payload = event.payload
        if isinstance(payload, InboxSpliced) and payload.op == "insert":
            for message in payload.messages:
                prompts[message.id] = prompt_text(message)
        elif isinstance(payload, TurnStart):
            if current is not None:
                points.append(TurnPoint(**current))  # type: ignore[arg-type]
            current = {"turn": payload.turn, "seq": event.seq, "snapshot": None, "prompt": ""}
        elif current is None:
            continue
        elif isinstance(payload, InboxSpliced) and payload.op == "claim" and not current["prompt"]:
            current["prompt"] = next((prompts[i] for i in payload.ids if i in prompts), "")
        elif isinstance(payload, UserMessageEvent) and not current["prompt"]:
            current["prompt"] = prompt_text(payload)
        elif (
            isinstance(payload, WorkspaceSnapshot)
            and payload.moment == "turn"
            and payload.turn == current["turn"]
            and current["snapshot"] is None
        ):
            current["snapshot"] = event.seq
    if current is not None:
        points.append(TurnPoint(**current))  # type: ignore[arg-type]
    return points


def turn_point(events: Sequence[Event], turn: int) -> TurnPoint:
    """Turn ``turn`` of ``events``.

    Raises:
        NoSnapshotError: the session has no such turn.
    """
    for point in turn_points(events):
        if point.turn == turn:
            return point
    last = max((p.turn for p in turn_points(events)), default=0)
    raise NoSnapshotError(
        f"the session has no turn {turn}"
        + (f" (its turns are 1 to {last})" if last else " (it has no turns)")
    )


@dataclass(frozen=True)
class RewindPlan:
    """What restoring ``target`` (the snapshot at seq ``target_seq``) does now."""

    target_seq: int
    target: WorkspaceSnapshot
    now: Snapshot
    restore: tuple[str, ...]
    outside: tuple[str, ...]
    unrestorable: tuple[str, ...]


def plan_rewind(events: Sequence[Event], turn: int, store: WorkspaceStore) -> RewindPlan:
    """Plan a rewind of the workspace of ``store`` to the start of turn ``turn``.

    Blocking: takes a snapshot of the workspace now (not logged) and compares
    trees in ``store``.

    Raises:
        NoSnapshotError: no such turn, or it has no snapshot of this workspace.
        SnapshotError: git failed.
    """
    point = turn_point(events, turn)
    root = str(store.root)
    chain = [(seq, snap) for seq, snap in snapshots(events) if snap.root == root]
    index = next((i for i, (seq, _) in enumerate(chain) if seq == point.snapshot), None)
    if index is None:
        raise NoSnapshotError(f"turn {turn} has no workspace snapshot of {root} to rewind to")
    target_seq, target = chain[index]
    now = store.snapshot()
    restore = set(store.changed(target.tree, now.tree))
    outside: set[str] = set()
    later = [snap for _, snap in chain[index:]]
    for before, after in itertools.pairwise(later):
        if not _agents(before, after):
            outside.update(store.changed(before.tree, after.tree))
    last = later[-1]
    if last.moment != "call" and not last.running:
        outside.update(store.changed(last.tree, now.tree))
    unrestorable = set(target.unstored) | set(now.unstored)
    for snap in later:
        unrestorable.update(snap.unstored)
        unrestorable.update(snap.outside)
    restore -= unrestorable
    return RewindPlan(
        target_seq=target_seq,
        target=target,
        now=now,
        restore=tuple(sorted(restore)),
        outside=tuple(sorted(outside & restore)),
        unrestorable=tuple(sorted(unrestorable)),
    )


def _agents(before: WorkspaceSnapshot, after: WorkspaceSnapshot) -> bool:
    """Whether the changes from ``before`` to ``after`` are the agent's (or tether's)."""
    return before.moment == "call" or bool(before.running) or bool(after.running) or after.by_tether


def prompt_text(message: UserMessageEvent) -> str:
    """The text of a prompt, on one line."""
    return " ".join(
        " ".join(block.text.split()) for block in message.content if isinstance(block, TextBlock)
    )
