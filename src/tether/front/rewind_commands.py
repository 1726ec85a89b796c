"""``/rewind``, ``/fork`` and ``/diff`` as every front end offers them: parsed once, run
once, said in the same lines in a chat, an editor or a page.

:func:`rewind_request` reads ``TURN [code|conversation|both] [force]`` and
does what :mod:`tether.front.rewind` does for it; :func:`fork_request` reads
``[TURN]``; :func:`diff_request` reads ``[TURN]``. Each refuses bad input, a
running turn or an unsafe rewind with a :class:`CommandError` whose one line
says why (an outside change names the files, and ``force``). A branch made is
handed back (:attr:`Branching.branch`): a front end that can go on in it does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from tether.agent.commands import CommandError
from tether.front.rewind import (
    Changes,
    Forked,
    OutsideChangesError,
    RewindError,
    Rewound,
    Workspaces,
    changes_since,
    fork_session,
    held,
    restore_workspace,
    rewind_code,
)
from tether.rewind.plan import TurnPoint, turn_points
from tether.rewind.store import SnapshotError

if TYPE_CHECKING:
    from tether.persist.service import Persistence
    from tether.session import Session
    from tether.session.store import SessionStore

__all__ = [
    "REWIND_CHOICES",
    "REWIND_ERRORS",
    "REWIND_USAGE",
    "Branching",
    "RewindChoice",
    "RewindDone",
    "changes_lines",
    "changes_notes",
    "diff_request",
    "fork_request",
    "forked_lines",
    "parse_rewind",
    "rewind_live",
    "rewind_request",
    "rewind_stored",
    "rewound_lines",
    "turn_lines",
]

RewindChoice = Literal["code", "conversation", "both"]
REWIND_CHOICES: tuple[RewindChoice, ...] = ("code", "conversation", "both")
REWIND_USAGE = "/rewind TURN [code|conversation|both] [force]"

REWIND_ERRORS = (RewindError, SnapshotError)
"""What a rewind refuses with or fails on, besides a bad turn (a ``LookupError``)."""

PROMPT_WIDTH = 60


@dataclass(frozen=True)
class Branching:
    """What ``/rewind`` or ``/fork`` did: the lines to show, and the branch stored
    (``None``: the session itself went on)."""

    lines: list[str]
    branch: str | None


def turn_lines(session: Session) -> list[str]:
    """One line per turn of ``session``: its number, whether it has a snapshot, its prompt."""
    points = turn_points(session.events)
    if not points:
        return ["(the session has no turns yet)"]
    return [_turn_line(point) for point in points]


def _turn_line(point: TurnPoint) -> str:
    prompt = point.prompt if len(point.prompt) <= PROMPT_WIDTH else point.prompt[:59] + "…"
    snapshot = "" if point.snapshot is not None else "  (no snapshot: conversation only)"
    return f"{point.turn:>4}  {prompt or '(no prompt)'}{snapshot}"


def rewound_lines(rewound: Rewound) -> list[str]:
    """What a code rewind did, in lines."""
    restored = rewound.restored
    plan = rewound.plan
    lines = [
        f"workspace {plan.target.root}: back to the start of turn {rewound.turn} "
        f"({len(restored.written)} file(s) written back, {len(restored.deleted)} deleted)"
    ]
    if plan.outside:
        lines.append(f"overwritten changes made outside the agent: {', '.join(plan.outside)}")
    if plan.unrestorable:
        lines.append(
            "not restorable, left as they are (over the size cap, a nested repository, or "
            f"outside the workspace): {', '.join(plan.unrestorable)}"
        )
    return lines


def forked_lines(forked: Forked) -> list[str]:
    """What a fork did, in lines."""
    where = f"before turn {forked.turn}" if forked.turn is not None else "at its end"
    lines = [
        f"session {forked.id}: a branch of {forked.parent} {where} "
        f"(its first {forked.seq} events); {forked.parent} keeps every event"
    ]
    lines += [f"not run in the branch (it was queued there): {text}" for text in forked.dropped]
    return lines


def changes_lines(changes: Changes) -> list[str]:
    """What ``/diff`` shows: the notes on the files, then the unified diff."""
    return changes_notes(changes) + changes.patch.splitlines()


def changes_notes(changes: Changes) -> list[str]:
    """The notes on a diff: nothing changed, files changed outside the agent, files no
    snapshot holds."""
    lines: list[str] = []
    if not changes.patch:
        lines.append(f"no file changed since turn {changes.turn} started")
    if changes.outside:
        lines.append(f"changed outside the agent: {', '.join(changes.outside)}")
    if changes.unrestorable:
        lines.append(f"not in any snapshot: {', '.join(changes.unrestorable)}")
    return lines


def parse_rewind(argument: str) -> tuple[int, RewindChoice, bool]:
    """``TURN [code|conversation|both] [force]``: the turn, the choice (default ``both``)
    and whether to force.

    Raises:
        CommandError: the words are not that.
    """
    words = argument.split()
    if not words:
        raise CommandError(f"use {REWIND_USAGE}")
    turn = turn_word(words[0])
    rest = set(words[1:])
    chosen = rest - {"force"}
    if len(chosen) > 1 or not chosen <= set(REWIND_CHOICES):
        raise CommandError(f"use {REWIND_USAGE}")
    choice: RewindChoice = next((c for c in REWIND_CHOICES if c in chosen), "both")
    return turn, choice, "force" in rest


def turn_word(word: str) -> int:
    """``word`` as a turn number.

    Raises:
        CommandError: it is not a whole number >= 1.
    """
    if not word.isdigit() or int(word) < 1:
        raise CommandError(f"{word!r} is not a turn number (/rewind lists them)")
    return int(word)


async def rewind_request(
    workspaces: Workspaces | None,
    persistence: Persistence | None,
    session: Session,
    argument: str,
) -> Branching:
    """``/rewind`` (the turns, listed) or ``/rewind TURN [code|conversation|both] [force]``
    on ``session``, live in this process.

    Raises:
        CommandError: bad arguments, a turn is running, or the rewind refused (the
            message says why, and which files).
    """
    if not argument.strip():
        return Branching([f"turns ({REWIND_USAGE}):", *turn_lines(session)], None)
    turn, choice, force = parse_rewind(argument)
    _idle(session)
    try:
        return await _rewind(workspaces, persistence, session, turn, choice, force=force)
    except OutsideChangesError as exc:
        raise CommandError(exc.describe("force")) from None
    except (LookupError, *REWIND_ERRORS) as exc:
        raise CommandError(str(exc)) from None


async def _rewind(
    workspaces: Workspaces | None,
    persistence: Persistence | None,
    session: Session,
    turn: int,
    choice: RewindChoice,
    *,
    force: bool,
) -> Branching:
    done = await rewind_live(workspaces, persistence, session, turn, choice, force=force)
    return Branching(done.lines(), None if done.forked is None else done.forked.id)


@dataclass(frozen=True)
class RewindDone:
    """What a rewind did: the workspace restored (``code``, ``both``) and the branch
    stored (``conversation``, ``both``)."""

    rewound: Rewound | None
    forked: Forked | None

    def lines(self) -> list[str]:
        """What it did, in lines a person reads."""
        return [
            *(rewound_lines(self.rewound) if self.rewound else []),
            *(forked_lines(self.forked) if self.forked else []),
        ]


async def rewind_live(
    workspaces: Workspaces | None,
    persistence: Persistence | None,
    session: Session,
    turn: int,
    choice: RewindChoice,
    *,
    force: bool,
) -> RewindDone:
    """Rewind ``session`` (live in this process, idle) to the start of ``turn``: its
    workspace (logging ``rewound`` in it), its conversation (a branch), or both (the
    branch logs ``rewound``).

    Raises:
        OutsideChangesError: files changed outside the agent would be overwritten.
        NoSnapshotError, RewindError, SnapshotError: as :mod:`tether.front.rewind`.
    """
    if choice == "code":
        return RewindDone(await rewind_code(_on(workspaces), session, turn, force=force), None)
    rewound: Rewound | None = None
    if choice == "both":
        rewound = await restore_workspace(_on(workspaces), session, turn, force=force)
    forked = await fork_session(
        _stored(persistence), workspaces, session, turn=turn, rewound=rewound
    )
    return RewindDone(rewound, forked)


async def rewind_stored(
    workspaces: Workspaces | None,
    persistence: Persistence,
    sessions: SessionStore,
    session_id: str,
    *,
    turn: int,
    choice: RewindChoice,
    force: bool,
) -> RewindDone:
    """Rewind the stored session ``session_id``, live in no process: ``code`` holds it
    under its lease while the ``rewound`` snapshot is logged; ``conversation`` and
    ``both`` store a branch of it and leave it as it is.

    Raises:
        RewindError: it is open in another process (``both``), or as :func:`rewind_live`.
        SessionLeasedError, LookupError, LogStoreError: it cannot be held or loaded.
    """
    if choice == "conversation":
        parent = await persistence.load(session_id)
        return RewindDone(None, await fork_session(persistence, workspaces, parent, turn=turn))
    if choice == "code":
        async with held(sessions, persistence, session_id) as session:
            return RewindDone(await rewind_code(_on(workspaces), session, turn, force=force), None)
    holder = await persistence.holder(session_id)
    if holder is not None:
        raise RewindError(f"session {session_id} is open {holder.where}: stop it before a rewind")
    parent = await persistence.load(session_id)
    rewound = await restore_workspace(_on(workspaces), parent, turn, force=force)
    forked = await fork_session(persistence, workspaces, parent, turn=turn, rewound=rewound)
    return RewindDone(rewound, forked)


async def fork_request(
    workspaces: Workspaces | None,
    persistence: Persistence | None,
    session: Session,
    argument: str,
) -> Branching:
    """``/fork [TURN]``: a branch of ``session`` (before TURN, else at its end).

    Raises:
        CommandError: a bad turn, a turn is running, or the branch cannot be stored.
    """
    turn = turn_word(argument.strip()) if argument.strip() else None
    _idle(session)
    try:
        forked = await fork_session(_stored(persistence), workspaces, session, turn=turn)
    except (LookupError, *REWIND_ERRORS) as exc:
        raise CommandError(str(exc)) from None
    return Branching(forked_lines(forked), forked.id)


async def diff_request(workspaces: Workspaces | None, session: Session, argument: str) -> Changes:
    """``/diff [TURN]``: the workspace's changes since TURN started (default: the first
    turn with a snapshot), shell changes included.

    Raises:
        CommandError: a bad turn, no snapshot, or git failed.
    """
    turn = turn_word(argument.strip()) if argument.strip() else None
    try:
        return await changes_since(_on(workspaces), session, turn)
    except (LookupError, *REWIND_ERRORS) as exc:
        raise CommandError(str(exc)) from None


def _on(workspaces: Workspaces | None) -> Workspaces:
    if workspaces is None:
        raise RewindError("workspace snapshots are off (no tether.plugins.rewind row)")
    return workspaces


def _stored(persistence: Persistence | None) -> Persistence:
    if persistence is None:
        raise RewindError("a branch needs stored sessions (no persistence row)")
    return persistence


def _idle(session: Session) -> None:
    if session.open_turn is not None:
        raise CommandError("a turn is running: wait for it to end, or cancel it, first")
