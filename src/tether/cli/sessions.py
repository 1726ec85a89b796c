"""``tether sessions``: list, show, export and delete stored sessions."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from tether.cli.boot import PERSISTENCE_ROW, row_problem, start
from tether.cli.render import transcript

if TYPE_CHECKING:
    from tether.persist.service import Persistence
    from tether.session import Session

EXIT_OK = 0
EXIT_FAILED = 1


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


async def _say_if_live(persistence: Persistence, session: Session) -> None:
    """On stderr: the session is open in a running process, and its turn is not over."""
    holder = await persistence.holder(session.id)
    if holder is None:
        return
    where = f"process {holder}" if holder else "another process"
    running = "" if session.open_turn is None else f"; turn {session.open_turn} is still running"
    print(f"tether: session {session.id} is open in {where}{running}", file=sys.stderr)


async def sessions(args: argparse.Namespace) -> int:
    from tether.persist.backends.errors import LogStoreError
    from tether.persist.service import PERSISTENCE
    from tether.session import SessionError

    tether = await start(args, with_model=False, quiet_rows=(PERSISTENCE_ROW,))
    try:
        persistence = tether.runtime.ctx.get(PERSISTENCE)
        if persistence is None:
            reason = row_problem(tether, PERSISTENCE_ROW)
            print(f"tether: stored sessions cannot be read ({reason})", file=sys.stderr)
            return EXIT_FAILED
        try:
            if args.sessions_command == "list":
                summaries = await persistence.list()
                if not summaries:
                    print("no sessions", file=sys.stderr)
                for s in summaries:
                    title = s.title or ("(unreadable: " + s.error + ")" if s.error else "")
                    print(
                        f"{s.id}\t{s.cwd or '-'}\t{_when(s.created_at)}\t"
                        f"{s.turn_count} turns\t{title}"
                    )
            elif args.sessions_command == "show":
                session = await persistence.load(args.id)
                for line in transcript(session):
                    print(line)
                await _say_if_live(persistence, session)
            elif args.sessions_command == "export":
                session = await persistence.load(args.id)
                await _say_if_live(persistence, session)
                if args.format == "md":
                    for line in transcript(session, markdown=True):
                        print(line)
                else:
                    print(json.dumps({"header": session.header.to_record()}, ensure_ascii=False))
                    for event in session.events:
                        print(json.dumps(event.to_record(), ensure_ascii=False))
            elif args.sessions_command == "delete":
                await persistence.delete(args.id)
                print(f"deleted {args.id}", file=sys.stderr)
        except (LogStoreError, SessionError, LookupError) as exc:
            print(f"tether: {exc}", file=sys.stderr)
            return EXIT_FAILED
        return EXIT_OK
    finally:
        await tether.stop()
