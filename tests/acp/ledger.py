"""A test plugin: writes who was created and disposed, and what was left when the bridge closed.

Lines of the file at ``config.path``: ``created <id>``, ``disposed <id>``,
and ``closed agents=<ids> sessions=<ids>`` (comma-separated, live at the
moment the ACP bridge's teardown completed).
"""

from __future__ import annotations

from pydantic import BaseModel

from tether.acp.bridge import CLOSED
from tether.agent.events import AGENT_CREATED, AGENT_DISPOSED
from tether.runtime import Context

name = "ledger"
inject = ("agents", "sessions")


class Config(BaseModel):
    path: str


def apply(ctx: Context, config: Config) -> None:
    def write(line: str) -> None:
        with open(config.path, "a", encoding="utf-8") as ledger:
            ledger.write(line + "\n")

    def closed(bridge: object) -> None:
        agents = ",".join(agent.id for agent in ctx.agents.list())
        sessions = ",".join(session.id for session in ctx.sessions.list())
        write(f"closed agents={agents} sessions={sessions}")

    ctx.on(AGENT_CREATED, lambda agent: write(f"created {agent.id}"))
    ctx.on(AGENT_DISPOSED, lambda agent: write(f"disposed {agent.id}"))
    ctx.on(CLOSED, closed)
