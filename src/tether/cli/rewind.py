"""Rewind and fork on the command line: ``tether sessions rewind|diff``, ``--fork``, and
chat's ``/rewind`` and ``/fork``.

What each does, and the lines it is said in, is the front layer's
(:mod:`tether.front.rewind`, :mod:`tether.front.rewind_commands`, shared with
the editor and the web page); this module reads the arguments, finds the
services, and prints (results on stdout, refusals on stderr).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from tether.front.rewind import (
    WORKSPACES,
    Forked,
    RewindError,
    Workspaces,
    changes_since,
    fork_session,
)
from tether.front.rewind_commands import (
    REWIND_ERRORS,
    Branching,
    RewindChoice,
    changes_notes,
    fork_request,
    forked_lines,
    rewind_request,
    rewind_stored,
)

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.host import Tether
    from tether.persist.service import Persistence
    from tether.session import Session

__all__ = [
    "REWIND_ERRORS",
    "branch_lines",
    "chat_fork",
    "chat_rewind",
    "fork_from",
    "parse_fork",
    "rewind_command",
    "sessions_diff",
    "sessions_rewind",
]

EXIT_OK = 0


def workspaces_of(tether: Tether) -> Workspaces:
    """The ``workspaces`` service.

    Raises:
        RewindError: the ``rewind`` plugin is not composed.
    """
    workspaces = tether.runtime.ctx.get(WORKSPACES)
    if workspaces is None:
        raise RewindError("workspace snapshots are off (no tether.plugins.rewind row)")
    return workspaces


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
    workspaces = (
        tether.runtime.ctx.get(WORKSPACES) if choice == "conversation" else workspaces_of(tether)
    )
    done = await rewind_stored(
        workspaces,
        persistence,
        tether.sessions,
        args.id,
        turn=args.to,
        choice=choice,
        force=args.force,
    )
    _say(done.lines())
    return EXIT_OK


async def sessions_diff(tether: Tether, persistence: Persistence, args: argparse.Namespace) -> int:
    """``tether sessions diff ID [--turn N]``: the workspace's changes since turn N started
    (default: the first turn with a snapshot), as a unified diff on stdout.

    Raises:
        RewindError, LookupError, SnapshotError, LogStoreError: said by the caller.
    """
    session = await persistence.load(args.id)
    changes = await changes_since(workspaces_of(tether), session, args.turn)
    sys.stdout.write(changes.patch)
    for line in changes_notes(changes):
        print(line, file=sys.stderr)
    return EXIT_OK


def _say(lines: list[str]) -> None:
    for line in lines:
        print(line)


async def chat_rewind(tether: Tether, agent: Agent, argument: str) -> Branching:
    """``/rewind`` in chat (:func:`tether.front.rewind_commands.rewind_request`).

    Raises:
        CommandError: bad arguments, a turn is running, or the rewind refused.
    """
    workspaces, persistence = _services(tether)
    return await rewind_request(workspaces, persistence, agent.session, argument)


async def chat_fork(tether: Tether, agent: Agent, argument: str) -> Branching:
    """``/fork [TURN]`` in chat: a branch of this session; the chat goes on in it.

    Raises:
        CommandError: a bad turn, a turn is running, or the branch cannot be stored.
    """
    workspaces, persistence = _services(tether)
    return await fork_request(workspaces, persistence, agent.session, argument)


def _services(tether: Tether) -> tuple[Workspaces | None, Persistence | None]:
    from tether.persist.service import PERSISTENCE

    ctx = tether.runtime.ctx
    return ctx.get(WORKSPACES), ctx.get(PERSISTENCE)
