"""A process that creates an agent under a chosen session id, for the create race tests.

Usage: python create_racer.py OVERLAY DATA_DIR SESSION_ID NAME

(An empty OVERLAY keeps sessions in JSONL files; with ``TETHER_DATABASE_URL``
set, sessions are kept in PostgreSQL.)

It creates the agent and prints ``created``, or ``refused <ErrorType>: <message>``
and exits. A created one then waits for a line on stdin, prompts ``from NAME``,
waits for the turn, disposes the agent (its log durable) and prints ``stored``,
or ``failed <message>`` when the work was not stored.
"""

import asyncio
import sys
from pathlib import Path

from tether import Tether, UserMessage
from tether.agent import AgentConflictError, AgentError


async def main(overlay: str, data_dir: str, session_id: str, name: str) -> None:
    overlays = [Path(overlay)] if overlay else []
    async with Tether(overlays=overlays, data_dir=Path(data_dir), model="offline") as tether:
        try:
            handle = await tether.agents.create(session_id, cwd="/race")
        except AgentConflictError as exc:
            print(f"refused {type(exc).__name__}: {exc}", flush=True)
            return
        print("created", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        handle.agent.followup(UserMessage.text(f"from {name}"))
        await handle.agent.when_idle()
        try:
            await handle.dispose()
        except AgentError as exc:
            print(f"failed {exc}", flush=True)
            return
        print("stored", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
