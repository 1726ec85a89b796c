"""The agent loop plugin: the factory behind ``ctx.agents``, and agents from config.

Rows of its config's ``agents`` list (``name``, ``model``, ``system``, ``cwd``,
``session_id``; the agent's id is its session id) are created when the plugin loads and
are owned by the plugin's fiber (their handles are discarded): they live until
the agent loop unloads. A row with a ``session_id`` resumes that session when
it is stored, and creates it otherwise.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated

from msgspec import Meta

from tether.agent.registry import AGENTS
from tether.agent.types import AgentOptions
from tether.loop.factory import LoopFactory
from tether.loop.turn import TurnRunner
from tether.persist.service import PERSISTENCE
from tether.runtime.schema import FieldError, Schema

if TYPE_CHECKING:
    from tether.runtime import Context

log = logging.getLogger(__name__)

name = "agent_loop"
inject = ("sessions", "llm", "tools", "agents")


class AgentRow(Schema, frozen=True):
    """An agent created from configuration."""

    name: str
    """What to call the agent in logs."""
    model: str | None = None
    system: str | None = None
    cwd: str | None = None
    session_id: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise FieldError(("name",), "must not be empty")


class Config(Schema, frozen=True):
    """Configuration of the agent loop: the defaults of its agents, and agents to create."""

    model: str = "offline"
    """The default model reference (``provider`` or ``provider:model``)."""
    system: str | None = None
    max_steps: Annotated[int, Meta(ge=1, le=10_000)] = 50
    agents: tuple[AgentRow, ...] = ()


async def apply(ctx: Context, config: Config) -> None:
    defaults = AgentOptions(model=config.model, system=config.system, max_steps=config.max_steps)
    factory = LoopFactory(ctx, TurnRunner(ctx), defaults)
    agents = ctx.service(AGENTS)
    await agents.provide_factory(factory)
    for row in config.agents:
        options = AgentOptions(
            model=row.model or config.model,
            system=row.system if row.system is not None else config.system,
            max_steps=config.max_steps,
        )
        persistence = ctx.get(PERSISTENCE)
        stored = False
        if row.session_id is not None and persistence is not None:
            stored = await persistence.exists(row.session_id)
        if stored:
            assert row.session_id is not None
            await agents.resume(row.session_id, options=options)
        else:
            await agents.create(row.session_id, cwd=row.cwd, options=options)
        log.info("agent %r created from configuration", row.name)
