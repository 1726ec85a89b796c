"""The agent loop plugin: the factory behind ``ctx.agents``, agents from config,
and the ``compaction`` service.

Rows of its config's ``agents`` list (``name``, ``model``, ``system``, ``cwd``,
``session_id``; the agent's id is its session id) are created when the plugin loads and
are owned by the plugin's fiber (their handles are discarded): they live until
the agent loop unloads. A row with a ``session_id`` resumes that session when
it is stored, and creates it otherwise.

The system prompt settings (``system``, ``system_append``, ``instructions``,
``user_instructions`` and the size caps) are described in
:mod:`tether.loop.prompt`; ``context_windows`` and ``compaction`` in
:mod:`tether.loop.compaction`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import msgspec
from msgspec import Meta

from tether.agent.registry import AGENTS
from tether.agent.types import AgentOptions
from tether.location import data_dir
from tether.loop.budget import BUDGETS, DEFAULT_RESERVE_OUTPUT, NO_CLUSTER_MESSAGE
from tether.loop.compaction import COMPACTION, CompactionSettings
from tether.loop.factory import LoopFactory
from tether.loop.prompt import PromptSettings
from tether.loop.turn import DEFAULT_MAX_TURN_OUTPUT, TurnRunner
from tether.persist.service import PERSISTENCE
from tether.runtime.schema import FieldError, Schema
from tether.session.budget import Budget
from tether.session.model import FALLBACK_MODEL

if TYPE_CHECKING:
    from tether.loop.day_budget import DayLedger
    from tether.runtime import Context

log = logging.getLogger(__name__)

name = "agent_loop"
inject = ("sessions", "llm", "tools", "agents")
optional = ("persistence", "cluster")
"""A composed persistence row is up before any agent is created: a configured
agent's session id is claimed, and a stored one resumed, by the persistence
that will store it (PostgreSQL connects slowly; the agent loop waits). The
cluster (PostgreSQL) keeps the cluster budget."""

USER_INSTRUCTIONS = "AGENTS.md"
"""The user's own instruction file, in tether's home directory by default."""
MIN_WINDOW = 1_024


class AgentRow(Schema, frozen=True):
    """An agent created from configuration."""

    name: str
    """What to call the agent in logs."""
    model: str | None = None
    system: str | None = None
    system_append: str | None = None
    cwd: str | None = None
    session_id: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise FieldError(("name",), "must not be empty")


class CompactionConfig(Schema, frozen=True):
    """When to compact a conversation, and how much of it to keep verbatim."""

    enabled: bool = True
    """Compact on its own before a request that passes ``threshold``."""
    threshold: Annotated[float, Meta(gt=0, le=1)] = 0.8
    """The share of the model's context window a request may fill."""
    keep_recent: Annotated[float, Meta(ge=0, le=1)] = 0.25
    """The share of the window the most recent messages may keep verbatim."""
    summary_max_tokens: Annotated[int, Meta(ge=256, le=100_000)] = 4_096

    def __post_init__(self) -> None:
        if self.keep_recent >= self.threshold:
            raise FieldError(
                ("keep_recent",),
                f"must be less than threshold ({self.threshold}), got {self.keep_recent}: "
                "what is kept must leave room below the threshold",
            )


class Config(Schema, frozen=True):
    """Configuration of the agent loop: the defaults of its agents, and agents to create."""

    model: str = FALLBACK_MODEL
    """The default model reference (``provider`` or ``provider:model``)."""
    base_url: str | None = None
    """The endpoint ``model`` is reached at when it was chosen apart from its
    provider's configuration (``--base-url``): each new session's header
    records it, so a resume reaches it again. The adapter row carries the
    endpoint itself."""
    system: str | None = None
    """Replaces the default system prompt's base (role, environment, tools, safety)."""
    system_append: str | None = None
    """Added at the end of the system prompt."""
    instructions: bool = True
    """Add the project's AGENTS.md (or CLAUDE.md, GEMINI.md) files to the system prompt."""
    user_instructions: str | None = None
    """The user's own instruction file; default ``AGENTS.md`` in tether's home directory."""
    instructions_max_bytes: Annotated[int, Meta(ge=256)] = 32_768
    """The most bytes of one instruction file the model is given."""
    instructions_max_total_bytes: Annotated[int, Meta(ge=256)] = 65_536
    """The most bytes of all instruction files together."""
    context_windows: Mapping[str, int] = msgspec.field(default_factory=dict)
    """Context windows in tokens, by model reference or model name."""
    compaction: CompactionConfig = msgspec.field(default_factory=CompactionConfig)
    max_steps: Annotated[int, Meta(ge=1, le=10_000)] = 50
    max_turn_output: Annotated[int, Meta(ge=1)] = DEFAULT_MAX_TURN_OUTPUT
    """Characters of model output (text, reasoning, tool-call arguments) one turn
    may stream; past it the stream is stopped and the turn ends ``error``."""
    budget: Budget | None = None
    """What each session's model requests may spend (see ``docs/budget.md``)."""
    budget_dir: Path | None = None
    """Where the host's per-day budget ledger is kept; default: the data directory's
    ``budget`` directory."""
    reserve_output: Annotated[int, Meta(ge=1)] = DEFAULT_RESERVE_OUTPUT
    """Under a budget, the output tokens reserved for (and allowed to) a request
    that sets no ``max_tokens``."""
    agents: tuple[AgentRow, ...] = ()

    def __post_init__(self) -> None:
        for model, tokens in self.context_windows.items():
            if not model.strip():
                raise FieldError(("context_windows",), "a model name must not be empty")
            if tokens < MIN_WINDOW:
                raise FieldError(
                    ("context_windows", model),
                    f"must be at least {MIN_WINDOW} tokens, got {tokens}",
                )
        if self.user_instructions is not None and not self.user_instructions.strip():
            raise FieldError(("user_instructions",), "must not be empty (leave it out instead)")

    def prompt_settings(self) -> PromptSettings:
        """The system prompt settings these hold."""
        user = (
            Path(self.user_instructions).expanduser()
            if self.user_instructions is not None
            else data_dir() / USER_INSTRUCTIONS
        )
        return PromptSettings(
            system=self.system,
            system_append=self.system_append,
            instructions=self.instructions,
            user_instructions=user,
            max_file_bytes=self.instructions_max_bytes,
            max_total_bytes=self.instructions_max_total_bytes,
        )

    def compaction_settings(self) -> CompactionSettings:
        """The compaction settings these hold."""
        compaction = self.compaction
        return CompactionSettings(
            enabled=compaction.enabled,
            threshold=compaction.threshold,
            keep_recent=compaction.keep_recent,
            summary_max_tokens=compaction.summary_max_tokens,
            windows=dict(self.context_windows),
        )


def day_ledger(config: Config) -> DayLedger | None:
    """The host's per-day ledger, when the budget keeps a per-day limit."""
    if config.budget is None or not config.budget.keeps_day:
        return None
    from tether.loop.day_budget import DayLedger

    return DayLedger(config.budget_dir or data_dir() / "budget")


class ClusterBudgetError(ValueError):
    """A cluster budget is configured and sessions are not stored in PostgreSQL."""


async def apply(ctx: Context, config: Config) -> None:
    if config.budget is not None and config.budget.keeps_cluster:
        from tether.persist.cluster import CLUSTER

        if ctx.get(CLUSTER) is None:
            raise ClusterBudgetError(NO_CLUSTER_MESSAGE)
    defaults = AgentOptions(
        model=config.model,
        base_url=config.base_url,
        system=config.system,
        system_append=config.system_append,
        max_steps=config.max_steps,
        budget=config.budget,
    )
    runner = TurnRunner(
        ctx,
        prompt=config.prompt_settings(),
        compaction=config.compaction_settings(),
        max_turn_output=config.max_turn_output,
        reserve_output=config.reserve_output,
        day_ledger=day_ledger(config),
    )
    factory = LoopFactory(ctx, runner, defaults)
    ctx.provide(COMPACTION, runner.compaction)
    ctx.provide(BUDGETS, runner.budgets)
    agents = ctx.service(AGENTS)
    await agents.provide_factory(factory)
    for row in config.agents:
        options = AgentOptions(
            model=row.model or config.model,
            base_url=None if row.model else config.base_url,
            system=row.system if row.system is not None else config.system,
            system_append=row.system_append
            if row.system_append is not None
            else config.system_append,
            max_steps=config.max_steps,
            budget=config.budget,
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
