"""The ``mcp`` plugin: MCP servers owned by the session whose agent they serve.

It provides ``ctx.mcp`` (:class:`McpService`). Servers come from two places:

* the ACP client: the bridge hands a session's ``mcpServers`` to
  :meth:`McpService.attach` while it creates or loads the session;
* this plugin's configuration: ``servers`` for every agent, ``agents.<id>.servers``
  for the agent of that session id. They are attached on ``agent/setup``,
  after the creator's own (a server the client offers wins over a configured
  one of the same name).

**Ownership.** Each server is an effect of the agent's scope: started there
(before the agent is published, so its first prompt sees the tools), its
tools registered there under the agent's scope (``mcp__<server>__<tool>``,
visible to no other agent), and stopped when the scope unwinds — the last
step of the agent's teardown. A stdio server's process is recorded with the
host's running process groups, like a tool process, so a crash of tether
leaves none behind (:mod:`tether.mcp.stdio`). When the plugin itself
unloads, it stops every server still running.

**Failures never fail the session.** A server that does not start is
logged and reported to the agent as a notice (the model and the client's
transcript both see it); the agent runs without its tools. A server lost
later is reported the same way, and calls of its tools are error results.

The SDK (``mcp``), and what checks and starts a server, are imported only
once a server is configured or started.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
from msgspec import Meta

from tether.agent.commands import COMMANDS
from tether.agent.events import AGENT_CREATED, AGENT_SETUP
from tether.agent.types import Agent, UserMessage
from tether.llm.service import LLM
from tether.location import data_dir
from tether.loop.hooks import PRE_STEP
from tether.runtime.keys import ServiceKey
from tether.runtime.schema import FieldError, Schema
from tether.shell.guard import OrphanGuard
from tether.shell.orphans import state_path
from tether.shell.sandbox import SANDBOX, Sandbox

if TYPE_CHECKING:
    from tether.agent.commands import CommandRegistry
    from tether.agent.elicitation import Elicitation, Elicited
    from tether.mcp.connection import McpConnection, McpSettings
    from tether.mcp.live import Refresher, ServerTools
    from tether.mcp.prompts import PromptCommands
    from tether.mcp.servers import ServerSpec
    from tether.runtime import Context
    from tether.tools.definition import Tool

log = logging.getLogger(__name__)

name = "mcp"
optional = ("sandbox", "commands")

NOTICE_SOURCE = "notice"

_NO_SERVERS: Mapping[str, Mapping[str, object]] = MappingProxyType({})


class AgentServers(Schema, frozen=True):
    """The servers of one agent (by session id), on top of those of every agent."""

    servers: Mapping[str, Mapping[str, Any]] = msgspec.field(default_factory=dict)


class Config(Schema, frozen=True):
    """Configuration of the ``mcp`` plugin (see ``docs/mcp.md``)."""

    servers: Mapping[str, Mapping[str, Any]] = msgspec.field(default_factory=dict)
    """Servers for every agent: ``{name: {command, args, env, cwd}}`` or
    ``{name: {type: http|sse, url, headers}}``."""
    agents: Mapping[str, AgentServers] = msgspec.field(default_factory=dict)
    """Servers for the agent of one session id only."""
    startup_timeout_ms: Annotated[int, Meta(ge=100)] = 10_000
    """From spawn to initialized with its tools listed; a slower server fails to start."""
    call_timeout_ms: Annotated[int, Meta(ge=0)] = 0
    """A tool call unanswered by then is an error result; 0: no limit."""
    cancel_grace_ms: Annotated[int, Meta(ge=0)] = 1_000
    """How long a cancelled call waits for the server to show it honoured the cancel."""
    kill_grace_ms: Annotated[int, Meta(ge=0)] = 2_000
    """Between SIGTERM and SIGKILL when a stdio server is stopped."""
    max_result_chars: Annotated[int, Meta(ge=1)] = 100_000
    """Longer tool results are cut, with a note."""
    elicitation_timeout_ms: Annotated[int, Meta(ge=0)] = 600_000
    """A server's question to the person (elicitation) unanswered by then is answered
    ``cancel``; 0: no limit."""
    state_dir: str | None = None
    """Where the host's record of running process groups is (the shell's, by default:
    ``<data dir>/run``)."""

    def __post_init__(self) -> None:
        if not self.servers and not self.agents:
            return
        from tether.mcp.errors import McpConfigError
        from tether.mcp.servers import from_config

        for where, rows in self._rows():
            try:
                from_config(rows, where)
            except McpConfigError as exc:
                path, _, message = str(exc).partition(": ")
                raise FieldError(tuple(path.split(".")), message) from None

    def _rows(self) -> list[tuple[str, Mapping[str, Mapping[str, object]]]]:
        rows = [("servers", self.servers)]
        rows += [(f"agents.{key}.servers", value.servers) for key, value in self.agents.items()]
        return rows

    @property
    def settings(self) -> McpSettings:
        from tether.mcp.connection import McpSettings

        return McpSettings(
            startup_timeout=self.startup_timeout_ms / 1000,
            call_timeout=self.call_timeout_ms / 1000 if self.call_timeout_ms else None,
            cancel_grace=self.cancel_grace_ms / 1000,
            kill_grace=self.kill_grace_ms / 1000,
            max_result_chars=self.max_result_chars,
            elicitation_timeout=(
                self.elicitation_timeout_ms / 1000 if self.elicitation_timeout_ms else None
            ),
        )


class McpService:
    """``ctx.mcp``: starts servers for agents, in the agents' own scopes."""

    def __init__(
        self,
        config: Config,
        guard: OrphanGuard,
        sandbox: Callable[[], Sandbox | None],
        traced: Callable[[Agent], Mapping[str, str]] | None = None,
        commands: Callable[[], CommandRegistry | None] = lambda: None,
    ) -> None:
        self._config = config
        self._commands = commands
        """The ``commands`` service when it is there: servers' prompts become commands."""
        self._prompts: PromptCommands | None = None
        self._sandbox = sandbox
        """The ``sandbox`` service when it is there: servers run under its policy."""
        self._traced = traced
        """The trace context an agent's servers start with (``TRACEPARENT``, telemetry on)."""
        self._settings: McpSettings | None = None
        self._everyone: tuple[ServerSpec, ...] = ()
        if config.servers:
            # Imported only when servers are configured: most commands have none.
            from tether.mcp.servers import from_config

            self._everyone = from_config(config.servers, "servers")
        self._guard = guard
        self._attached: dict[str, tuple[Agent, set[str]]] = {}
        """The server names each live agent has, by agent id."""
        self._live: set[McpConnection] = set()
        self._tools: dict[McpConnection, ServerTools] = {}
        """The registered tools of each running connection."""
        self._prompt_reads: dict[McpConnection, Refresher] = {}
        """The reads of each running connection's changed prompt list."""
        self._closed = False

    def configured_for(self, agent: Agent) -> tuple[ServerSpec, ...]:
        """The configured servers of ``agent``: every agent's, then its own."""
        own = self._config.agents.get(agent.id)
        if own is None:
            return self._everyone
        from tether.mcp.servers import from_config

        mine = from_config(own.servers, f"agents.{agent.id}.servers")
        names = {spec.name for spec in mine}
        return (*(spec for spec in self._everyone if spec.name not in names), *mine)

    def connections(self, agent: Agent) -> list[McpConnection]:
        """The running connections of ``agent`` (for tests and diagnostics)."""
        return [c for c in self._live if c.owner is agent]

    async def attach(self, agent: Agent, specs: Sequence[ServerSpec]) -> list[str]:
        """Start ``specs`` for ``agent`` (concurrently) and register their tools in its scope.

        Call it while the agent is being set up (the ``setup`` of
        ``ctx.agents.create`` / ``resume``, or ``agent/setup``). A server whose
        name the agent already has is skipped. Returns the problems (a server
        that failed to start, a tool left out); each is also logged and
        delivered to the agent as a notice once it is published.

        Raises:
            FiberInactiveError: the agent's scope is unwinding (what started is stopped).
        """
        if self._closed:
            return [
                f"MCP server {spec.name!r} was not started: tether is stopping" for spec in specs
            ]
        names = self._names_of(agent)
        fresh = [spec for spec in specs if spec.name not in names]
        names.update(spec.name for spec in fresh)
        from tether.telemetry.context import process_context

        variables = {} if self._traced is None or not fresh else self._traced(agent)
        try:
            with process_context(variables):  # the start tasks copy it
                async with asyncio.TaskGroup() as group:
                    starts = [group.create_task(self._start(agent, spec)) for spec in fresh]
        except BaseExceptionGroup as failed:
            if len(failed.exceptions) == 1:
                raise failed.exceptions[0] from None
            raise
        problems = [problem for start in starts for problem in start.result()]
        if problems:
            for problem in problems:
                log.warning("session %s: %s", agent.id, problem)
            notice = _notice(problems)

            def tell(published: Agent) -> None:
                published.inject(notice)

            agent.ctx.on(AGENT_CREATED, tell)
        return problems

    async def on_agent_setup(self, agent: Agent) -> None:
        """``agent/setup``: attach the configured servers of ``agent``."""
        specs = self.configured_for(agent)
        if specs:
            await self.attach(agent, specs)

    async def shutdown(self) -> None:
        """Stop every server still running (the plugin unloads), then the guard."""
        self._closed = True
        await asyncio.gather(*(c.close() for c in list(self._live)), return_exceptions=True)
        self._live.clear()
        await self._guard.close()

    # -- internals --------------------------------------------------------------------

    def _names_of(self, agent: Agent) -> set[str]:
        entry = self._attached.get(agent.id)
        if entry is not None and entry[0] is agent:
            return entry[1]
        names: set[str] = set()
        self._attached[agent.id] = (agent, names)

        def forget() -> None:
            current = self._attached.get(agent.id)
            if current is not None and current[0] is agent:
                del self._attached[agent.id]

        agent.ctx.defer(forget, label="mcp servers")
        return names

    @property
    def settings(self) -> McpSettings:
        """The limits servers run under (built when a first server starts)."""
        if self._settings is None:
            self._settings = self._config.settings
        return self._settings

    async def _start(self, agent: Agent, spec: ServerSpec) -> list[str]:
        from tether.mcp.connection import McpConnection

        sandbox = self._sandbox()
        cwd = agent.session.header.cwd
        connection = McpConnection(
            spec,
            self.settings,
            cwd=cwd,
            guard=self._guard,
            owner=agent,
            on_lost=lambda lost, reason: self._lost(agent, lost, reason),
            sandbox=(
                sandbox.server_policy(cwd or os.getcwd(), agent.id, agent.session.settings.options)
                if sandbox
                else None
            ),
            on_tools_changed=self._tools_changed,
            on_prompts_changed=self._prompts_changed,
            auth=auth_of(spec),
            elicit=_eliciting(agent),
            completed=lambda elicitation: _completed(agent, elicitation),
        )
        listed: list[Any] = []

        async def lifetime() -> Any:
            self._live.add(connection)
            try:
                listed.extend(await connection.start())
            except BaseException:
                self._live.discard(connection)
                raise
            yield self._closer(connection)

        from tether.mcp.errors import McpStartError

        try:
            await agent.ctx.effect(lifetime, label=f"mcp:{spec.name}")
        except McpStartError as exc:
            return [f"MCP server {spec.name!r} failed to start: {exc}"]
        tools = self._server_tools(agent, connection)
        self._tools[connection] = tools
        problems = await tools.register(listed)
        problems += await self._prompt_commands().add(connection)
        self._prompt_reads[connection] = self._prompt_reader(agent, connection)
        log.info(
            "session %s: MCP server %s (MCP %s) started with %d tool(s)",
            agent.id,
            spec.name,
            connection.protocol_version,
            len(listed),
        )
        return [f"MCP server {spec.name!r}: {problem}" for problem in problems]

    def _prompt_commands(self) -> PromptCommands:
        if self._prompts is None:
            from tether.mcp.prompts import PromptCommands

            def find(agent: Agent, server: str) -> McpConnection | None:
                return next((c for c in self.connections(agent) if c.name == server), None)

            self._prompts = PromptCommands(self._commands, find)
        return self._prompts

    def _server_tools(self, agent: Agent, connection: McpConnection) -> ServerTools:
        from tether.mcp.live import ServerTools
        from tether.mcp.tools import build_tools, resource_tool

        def accepts_images(model: str | None) -> bool:
            llm = agent.ctx.get(LLM)
            return model is not None and llm is not None and llm.catalog.accepts_images(model)

        limit = self.settings.max_result_chars

        def build(server: McpConnection, listed: list[Any]) -> tuple[list[Tool[Any]], list[str]]:
            tools, problems = build_tools(server, listed, limit, accepts_images)
            if server.offers_resources:
                reader = resource_tool(server, limit)
                if any(tool.name == reader.name for tool in tools):
                    problems.append(
                        f"its resources cannot be read: a tool of its own is named {reader.name!r}"
                    )
                else:
                    tools.append(reader)
            return tools, problems

        def tell(text: str) -> None:
            agent.inject(UserMessage.text(text, source=NOTICE_SOURCE))

        return ServerTools(agent, connection, build, tell, self.settings.startup_timeout)

    def _prompt_reader(self, agent: Agent, connection: McpConnection) -> Refresher:
        """What reads ``connection``'s prompts again when the server says they changed."""
        from tether.mcp.live import Refresher

        async def read() -> None:
            added, removed = await self._prompt_commands().refresh(connection)
            if added or removed:
                log.info(
                    "session %s: MCP server %s changed its prompts: added %s; removed %s",
                    agent.id,
                    connection.name,
                    ", ".join(added) or "none",
                    ", ".join(removed) or "none",
                )

        def failed(exc: Exception) -> None:
            log.warning(
                "session %s: MCP server %s: its new prompt list could not be read: %s",
                agent.id,
                connection.name,
                exc,
            )

        name = f"mcp-prompts:{agent.id}:{connection.name}"
        return Refresher(name, read, failed, self.settings.startup_timeout)

    def _tools_changed(self, connection: McpConnection) -> None:
        tools = self._tools.get(connection)
        if tools is not None:
            tools.changed()

    def _prompts_changed(self, connection: McpConnection) -> None:
        reader = self._prompt_reads.get(connection)
        if reader is not None:
            reader.changed()

    async def settled(self, agent: Agent) -> None:
        """Wait for the tool and prompt lists of ``agent``'s servers being read again
        (each at most the startup timeout)."""
        for connection in self.connections(agent):
            tools = self._tools.get(connection)
            if tools is not None:
                await tools.settled()
            reader = self._prompt_reads.get(connection)
            if reader is not None:
                await reader.settled()

    async def before_step(
        self,
        step_input: tuple[UserMessage, ...],
        next_: Callable[[tuple[UserMessage, ...]], Awaitable[tuple[UserMessage, ...]]],
        agent: Agent,
        step: int,
    ) -> tuple[UserMessage, ...]:
        """``agent/pre-step``: a tool list being read again is applied before the step."""
        await self.settled(agent)
        return await next_(step_input)

    def _closer(self, connection: McpConnection) -> Any:
        async def close() -> None:
            tools = self._tools.pop(connection, None)
            reader = self._prompt_reads.pop(connection, None)
            try:
                if reader is not None:
                    await reader.close()
                if self._prompts is not None:
                    await self._prompts.remove(connection)
                if tools is not None:
                    await tools.close()
                await connection.close()
            finally:
                self._live.discard(connection)

        return close

    def _lost(self, owner: Agent, connection: McpConnection, reason: str) -> None:
        owner.inject(
            _notice([f"MCP server {connection.name!r} {reason}; its tools are unavailable"])
        )


def _eliciting(agent: Agent) -> Callable[[Elicitation], Awaitable[Elicited]] | None:
    """How ``agent``'s servers put their questions to a person — ``None`` (and servers
    are not told they may ask) when no front end here answers elicitations."""
    from tether.agent.elicitation import ELICITATION_REQUEST, put

    if not agent.ctx.heard(ELICITATION_REQUEST):
        return None

    async def elicit(elicitation: Elicitation) -> Elicited:
        return await put(agent, elicitation)

    return elicit


def _completed(agent: Agent, elicitation: Elicitation) -> None:
    """A server said ``agent``'s accepted URL question is done with: log it."""
    from tether.agent.elicitation import completed

    completed(agent, elicitation)


def _notice(problems: list[str]) -> UserMessage:
    return UserMessage.text("\n".join(problems), source=NOTICE_SOURCE)


async def apply(ctx: Context, config: Config) -> None:
    """Provide ``ctx.mcp``; listen to ``agent/setup``; stop every server when unloading."""
    state_dir = Path(config.state_dir) if config.state_dir is not None else data_dir() / "run"
    guard = OrphanGuard(state_path(state_dir))
    guard.sweep()

    def traced(agent: Agent) -> Mapping[str, str]:
        # Read only for an agent with servers: with telemetry off nothing of it is imported.
        from tether.telemetry.context import TRACING

        tracing = ctx.get(TRACING)
        return {} if tracing is None else tracing.session_environment(agent.id)

    service = McpService(
        config, guard, lambda: ctx.get(SANDBOX), traced, commands=lambda: ctx.get(COMMANDS)
    )
    await ctx.effect(lambda: service.shutdown, label="stop MCP servers")

    ctx.on(AGENT_SETUP, service.on_agent_setup)
    ctx.on(PRE_STEP, service.before_step)
    ctx.provide(MCP, service)


def auth_of(spec: ServerSpec) -> Any:
    """An HTTP server's OAuth, from the grant ``tether mcp login`` stored (if any)."""
    from tether.mcp.oauth import session_provider
    from tether.mcp.servers import HttpServer

    if not isinstance(spec, HttpServer):
        return None
    return session_provider(data_dir(), spec.name, spec.url, spec.client_metadata_url)


MCP = ServiceKey[McpService]("mcp")
"""``ctx.mcp``: the MCP servers of agents."""
