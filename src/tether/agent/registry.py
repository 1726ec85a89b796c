"""The agents registry (``ctx.agents``): who is live, and the door to create one.

The registry lists live agents and routes ``create``/``resume`` to the
:class:`AgentFactory` that the agent loop registers; it does not depend on the
loop package. Reached through ``ctx.agents``, it is bound to the caller: the
agent a plugin creates is owned by that plugin's fiber (see ``tether.loop``).

Events (``emit``, listeners contained): ``agent/created (agent)`` when an
agent is published, ``agent/disposed (agent)`` when its registry entry
detaches.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from tether.agent.errors import AgentConflictError, AgentError
from tether.agent.events import AGENT_DISPOSED
from tether.agent.types import Agent, AgentHandle, AgentOptions
from tether.runtime.keys import ServiceKey

if TYPE_CHECKING:
    from tether.agent.worktree import Isolation
    from tether.runtime import Context
    from tether.session.lineage import Lineage

log = logging.getLogger(__name__)

Setup = Callable[[Agent], Awaitable[None] | None]
"""Composes an agent's scoped world before it is published (scoped tools,
listeners on ``agent.ctx``); raising rolls the creation back."""


class AgentFactory(Protocol):
    """Builds agents; the agent loop registers one behind the registry."""

    async def create(
        self,
        caller: Context,
        *,
        session_id: str | None,
        cwd: str | None,
        options: AgentOptions | None,
        setup: Setup | None,
        meta: Mapping[str, str] | None = None,
        lineage: Lineage | None = None,
        model: str | None = None,
    ) -> AgentHandle: ...

    async def resume(
        self,
        caller: Context,
        session_id: str,
        *,
        options: AgentOptions | None,
        setup: Setup | None,
    ) -> AgentHandle: ...


class AgentRegistry:
    """Live agents by id (= session id)."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._live: dict[str, Agent] = {}
        self._factory: AgentFactory | None = None

    def get(self, agent_id: str) -> Agent | None:
        """The live agent with this id, or ``None``."""
        return self._live.get(agent_id)

    def list(self) -> list[Agent]:
        """Live agents, in the order they were published."""
        return list(self._live.values())

    def for_caller(self, ctx: Context) -> AgentsView:
        return AgentsView(self, ctx)

    # -- used by factories -------------------------------------------------------

    def enter(self, agent: Agent) -> None:
        """Publish ``agent``.

        Raises:
            AgentConflictError: an agent with its id is live.
        """
        if agent.id in self._live:
            raise AgentConflictError(f"agent {agent.id!r} is already live")
        self._live[agent.id] = agent

    def detach(self, agent: Agent) -> None:
        """Unpublish ``agent`` if it is the live entry for its id; emits ``agent/disposed``.

        The id is reusable from this moment.
        """
        if self._live.get(agent.id) is agent:
            del self._live[agent.id]
            self._ctx.emit(AGENT_DISPOSED, agent)

    def provide_factory(self, factory: AgentFactory) -> Callable[[], None]:
        """Install ``factory``; returns the function that removes it.

        Raises:
            AgentError: another factory is installed.
        """
        if self._factory is not None:
            raise AgentError("an agent factory is already registered")
        self._factory = factory

        def remove() -> None:
            if self._factory is factory:
                self._factory = None

        return remove

    def factory(self) -> AgentFactory:
        if self._factory is None:
            raise AgentError(
                "no agent factory is registered: mount the agent loop plugin (tether.loop)"
            )
        return self._factory


class AgentsView:
    """``ctx.agents`` as one caller sees it: what it creates, its fiber owns."""

    def __init__(self, registry: AgentRegistry, caller: Context) -> None:
        self._registry = registry
        self._caller = caller

    @property
    def registry(self) -> AgentRegistry:
        """The registry itself (for the agent loop, which publishes agents)."""
        return self._registry

    def get(self, agent_id: str) -> Agent | None:
        return self._registry.get(agent_id)

    def list(self) -> list[Agent]:
        return self._registry.list()

    async def create(
        self,
        session_id: str | None = None,
        *,
        cwd: str | None = None,
        options: AgentOptions | None = None,
        setup: Setup | None = None,
        meta: Mapping[str, str] | None = None,
        lineage: Lineage | None = None,
        model: str | None = None,
        isolation: Isolation = "none",
    ) -> AgentHandle:
        """Create and publish an agent with a new session; the caller's fiber co-owns it.

        ``options`` default to the agent loop's; ``model``, when given, replaces
        their model. ``meta`` adds labels to the session's header (``model``,
        and ``tools`` when the options restrict them, are recorded there by the
        loop); ``lineage`` is the header's (a delegated child's, see
        :mod:`tether.session.lineage`). ``isolation="worktree"`` makes the agent
        work in a git worktree of ``cwd``'s repository that it owns
        (:mod:`tether.agent.worktree`; ``handle.worktree``).

        Raises:
            AgentConflictError: ``session_id`` is live, is stored already (resume
                it instead), or is being created or is open in another process
                (of two processes creating one id, exactly one succeeds).
            AgentCreateError: setup raised, or the caller is unloading, or the
                worktree could not be made (no git, no repository); nothing was
                published.
            AgentError: no agent loop is mounted.
        """
        factory = self._registry.factory()
        if isolation == "worktree":
            from tether.agent.worktree import create_isolated

            async def create(name: str, where: str, owning: Setup) -> AgentHandle:
                return await factory.create(
                    self._caller,
                    session_id=name,
                    cwd=where,
                    options=options,
                    setup=owning,
                    meta=meta,
                    lineage=lineage,
                    model=model,
                )

            return await create_isolated(create, session_id=session_id, cwd=cwd, setup=setup)
        if isolation != "none":
            raise ValueError(f"isolation must be 'none' or 'worktree', got {isolation!r}")
        return await factory.create(
            self._caller,
            session_id=session_id,
            cwd=cwd,
            options=options,
            setup=setup,
            meta=meta,
            lineage=lineage,
            model=model,
        )

    async def resume(
        self,
        session_id: str,
        *,
        options: AgentOptions | None = None,
        setup: Setup | None = None,
    ) -> AgentHandle:
        """Rebuild an agent from its persisted session (inbox included; turns continue).

        Raises:
            AgentConflictError: the session is live, or being resumed here.
            AgentError: no agent loop or no persistence is mounted.
            SessionNotFoundError, CorruptLogError: from persistence.
        """
        return await self._registry.factory().resume(
            self._caller, session_id, options=options, setup=setup
        )

    async def provide_factory(self, factory: AgentFactory) -> None:
        """Install ``factory`` for as long as the caller's fiber lives."""
        await self._caller.effect(
            lambda: self._registry.provide_factory(factory), label="agent factory"
        )


AGENTS = ServiceKey["AgentsView"]("agents")
"""``ctx.agents``: the caller's :class:`AgentsView` of the registry."""

name = "agents"


def apply(ctx: Context, config: None) -> None:
    """Provide ``ctx.agents``."""
    ctx.provide(AGENTS, AgentRegistry(ctx))
