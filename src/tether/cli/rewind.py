"""Rewind and fork on the command line: ``tether sessions rewind|diff``, ``--fork``, and the
lines chat's ``/rewind`` and ``/fork`` show.

What each does is :mod:`tether.front.rewind`'s; this module reads the
arguments, holds or loads the session, and says the outcome in lines a
person reads (results on stdout, refusals on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Literal, NamedTuple

from tether.agent.commands import CommandError
from tether.front.rewind import (
    WORKSPACES,
    Forked,
    RewindError,
    Rewound,
    Workspaces,
    fork_session,
    held,
    restore_workspace,
    rewind_code,
    workspace_of,
)
from tether.rewind.plan import TurnPoint, plan_rewind, turn_points
from tether.rewind.store import SnapshotError

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.host import Tether
    from tether.persist.service import Persistence
    from tether.session import Session

__all__ = [
    "REWIND_CHOICES",
    "REWIND_ERRORS",
    "ChatRewind",
    "RewindChoice",
    "branch_lines",
    "chat_fork",
    "chat_rewind",
    "fork_from",
    "forked_lines",
    "parse_fork",
    "rewind_command",
    "rewound_lines",
    "sessions_diff",
    "sessions_rewind",
    "turn_lines",
]

RewindChoice = Literal["code", "conversation", "both"]
REWIND_CHOICES: tuple[RewindChoice, ...] = ("code", "conversation", "both")

REWIND_ERRORS = (RewindError, SnapshotError)
"""What a rewind refuses with or fails on, besides a bad turn (a ``LookupError``)."""

EXIT_OK = 0
EXIT_FAILED = 1

PROMPT_WIDTH = 60


def workspaces_of(tether: Tether) -> Workspaces:
    """The ``workspaces`` service.

    Raises:
        RewindError: the ``rewind`` plugin is not composed.
    """
    workspaces = tether.runtime.ctx.get(WORKSPACES)
    if workspaces is None:
        raise RewindError("workspace snapshots are off (no tether.plugins.rewind row)")
    return workspaces


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


def parse_fork(spec: str) -> tuple[str, int | None]:
    """``ID`` or ``ID@TURN``: the session and the turn (``None``: the whole session).

    Raises:
        RewindError: TURN is not a whole number >= 1.
    """
    session_id, at, turn = spec.partition("@")
    if not at:
        return session_id, None
    if not turn.isdigit() or int(turn) < 1:
        raise RewindError(f"--fork {spec}: the turn after @ must be a number >= 1")
    return session_id, int(turn)


async def fork_from(tether: Tether, spec: str, *, cwd: str) -> Forked:
    """``--fork ID[@TURN]``: store a branch of the stored session, said on stderr.

    Raises:
        RewindError, UsageError, LookupError, LogStoreError, SessionError: it cannot be made.
    """
    from tether.cli.boot import resolve_session
    from tether.persist.service import PERSISTENCE

    persistence = tether.runtime.ctx.get(PERSISTENCE)
    if persistence is None:
        raise RewindError("forking needs stored sessions (no persistence row)")
    wanted, turn = parse_fork(spec)
    session_id = await resolve_session(tether, wanted, cwd=cwd)
    parent = await persistence.load(session_id)
    forked = await fork_session(persistence, tether.runtime.ctx.get(WORKSPACES), parent, turn=turn)
    for line in forked_lines(forked):
        print(f"tether: {line}", file=sys.stderr)
    return forked


async def rewind_command(tether: Tether, persistence: Persistence, args: argparse.Namespace) -> int:
    """``sessions rewind`` or ``sessions diff``; the exit status.

    Raises:
        RewindError, LookupError, SnapshotError, LogStoreError, SessionError: said by the caller.
    """
    if args.sessions_command == "diff":
        return await sessions_diff(tether, persistence, args)
    return await sessions_rewind(tether, persistence, args)


def branch_lines(session: Session) -> list[str]:
    """For ``sessions show``: the parent a forked session branched from (none otherwise)."""
    lineage = session.header.lineage
    if lineage is None or lineage.delegation is not None:
        return []
    return [f"(a branch of session {lineage.parent}: its first {lineage.seed_length} events)"]


async def sessions_rewind(
    tether: Tether, persistence: Persistence, args: argparse.Namespace
) -> int:
    """``tether sessions rewind ID --to TURN [--code|--conversation|--both] [--force]``.

    Raises:
        RewindError, LookupError, SnapshotError, LogStoreError, SessionError: said by the caller.
    """
    choice: RewindChoice = args.what or "both"
    session_id: str = args.id
    if choice == "conversation":
        parent = await persistence.load(session_id)
        forked = await fork_session(
            persistence, tether.runtime.ctx.get(WORKSPACES), parent, turn=args.to
        )
        _say(forked_lines(forked))
        return EXIT_OK
    workspaces = workspaces_of(tether)
    if choice == "code":
        async with held(tether.sessions, persistence, session_id) as session:
            rewound = await rewind_code(workspaces, session, args.to, force=args.force)
        _say(rewound_lines(rewound))
        return EXIT_OK
    holder = await persistence.holder(session_id)
    if holder is not None:
        raise RewindError(f"session {session_id} is open {holder.where}: stop it before a rewind")
    parent = await persistence.load(session_id)
    rewound = await restore_workspace(workspaces, parent, args.to, force=args.force)
    forked = await fork_session(persistence, workspaces, parent, turn=args.to, rewound=rewound)
    _say([*rewound_lines(rewound), *forked_lines(forked)])
    return EXIT_OK


async def sessions_diff(tether: Tether, persistence: Persistence, args: argparse.Namespace) -> int:
    """``tether sessions diff ID [--turn N]``: the workspace's changes since turn N started
    (default: the first turn with a snapshot), as a unified diff on stdout.

    Raises:
        RewindError, LookupError, SnapshotError, LogStoreError: said by the caller.
    """
    session = await persistence.load(args.id)
    turn = args.turn
    if turn is None:
        turn = next((p.turn for p in turn_points(session.events) if p.snapshot is not None), None)
        if turn is None:
            raise RewindError(f"session {session.id} has no workspace snapshot")
    store = workspace_of(workspaces_of(tether), session)
    plan = await asyncio.to_thread(plan_rewind, list(session.events), turn, store)
    patch = await asyncio.to_thread(store.patch, plan.target.tree, plan.now.tree)
    sys.stdout.write(patch)
    if not patch:
        print(f"no file changed since turn {turn} started", file=sys.stderr)
    if plan.outside:
        print(f"changed outside the agent: {', '.join(plan.outside)}", file=sys.stderr)
    if plan.unrestorable:
        print(f"not in any snapshot: {', '.join(plan.unrestorable)}", file=sys.stderr)
    return EXIT_OK


def _say(lines: list[str]) -> None:
    for line in lines:
        print(line)


class ChatRewind(NamedTuple):
    """What ``/rewind`` or ``/fork`` did: the lines to show, and the branch the chat goes
    on in (``None``: the same session)."""

    lines: list[str]
    branch: str | None


async def chat_rewind(tether: Tether, agent: Agent, argument: str) -> ChatRewind:
    """``/rewind`` (list the turns) or ``/rewind TURN [code|conversation|both] [force]``.

    Raises:
        CommandError: bad arguments, a turn is running, or the rewind refused (the
            message says why, and which files).
    """
    words = argument.split()
    if not words:
        return ChatRewind(
            ["turns (/rewind TURN [code|conversation|both] [force]):", *turn_lines(agent.session)],
            None,
        )
    turn = _turn_word(words[0])
    rest = set(words[1:])
    force = "force" in rest
    chosen = rest - {"force"}
    if len(chosen) > 1 or not chosen <= set(REWIND_CHOICES):
        raise CommandError("use /rewind TURN [code|conversation|both] [force]")
    choice: RewindChoice = next((c for c in REWIND_CHOICES if c in chosen), "both")
    _idle(agent)
    try:
        return await _chat_rewind(tether, agent, turn, choice, force=force)
    except (LookupError, *REWIND_ERRORS) as exc:
        raise CommandError(str(exc)) from None


async def _chat_rewind(
    tether: Tether, agent: Agent, turn: int, choice: RewindChoice, *, force: bool
) -> ChatRewind:
    if choice == "code":
        done = await rewind_code(workspaces_of(tether), agent.session, turn, force=force)
        return ChatRewind(rewound_lines(done), None)
    rewound: Rewound | None = None
    if choice == "both":
        workspaces = workspaces_of(tether)
        rewound = await restore_workspace(workspaces, agent.session, turn, force=force)
    forked = await _fork(tether, agent, turn, rewound)
    lines = [*(rewound_lines(rewound) if rewound else []), *forked_lines(forked)]
    return ChatRewind(lines, forked.id)


async def chat_fork(tether: Tether, agent: Agent, argument: str) -> ChatRewind:
    """``/fork [TURN]``: a branch of this session (before TURN, else at its end); the chat
    goes on in it.

    Raises:
        CommandError: a bad turn, a turn is running, or the branch cannot be stored.
    """
    turn = _turn_word(argument.strip()) if argument.strip() else None
    _idle(agent)
    try:
        forked = await _fork(tether, agent, turn, None)
    except (LookupError, *REWIND_ERRORS) as exc:
        raise CommandError(str(exc)) from None
    return ChatRewind(forked_lines(forked), forked.id)


async def _fork(tether: Tether, agent: Agent, turn: int | None, rewound: Rewound | None) -> Forked:
    from tether.persist.service import PERSISTENCE

    persistence = tether.runtime.ctx.get(PERSISTENCE)
    if persistence is None:
        raise RewindError("a branch needs stored sessions (no persistence row)")
    workspaces = tether.runtime.ctx.get(WORKSPACES)
    return await fork_session(persistence, workspaces, agent.session, turn=turn, rewound=rewound)


def _turn_word(word: str) -> int:
    if not word.isdigit() or int(word) < 1:
        raise CommandError(f"{word!r} is not a turn number (/rewind lists them)")
    return int(word)


def _idle(agent: Agent) -> None:
    if agent.session.open_turn is not None:
        raise CommandError("a turn is running: wait for it to end, or cancel it, first")
