"""What a person types, made into a command run or a prompt, the same way in every front end.

The chat, an editor (ACP) and the web page share three steps:

* **slash commands** — :func:`command_for` finds the registered command a
  text ``/name argument`` names (a server's prompt ``/mcp__server__prompt``
  is one, :mod:`tether.mcp.prompts`); :func:`run_command` runs it, a
  refusal being a :class:`~tether.agent.commands.CommandError` and a bug of
  the command a :class:`CommandFailedError` of one line (its traceback is
  logged at debug level, never shown);
* **the offered commands** — :func:`offered_now`: the registered commands a
  session offers (a server's prompt only where that server lists it; an
  editor's ``available_commands_update``); :func:`offered_commands`: the
  same once any prompt list being read again is applied, so a listing made
  after a server said its prompts changed shows the new ones;
* **resource mentions** — :func:`attach_mcp_resources`: the ``@server:uri``
  words of a prompt, read from the session's MCP servers
  (:mod:`tether.mcp.mentions`); :func:`list_mcp_resources`: what each of
  the session's servers lists, for a front end that offers mentions (each
  server asked within its ``startup_timeout_ms``; a failure is its entry's
  error, never raised).

A session without the ``mcp`` plugin has no servers: nothing is attached,
nothing listed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, NamedTuple

from tether.agent.commands import Command, CommandCall, CommandError, parse_command
from tether.mcp.mentions import Attached, attach_resources

if TYPE_CHECKING:
    from tether.agent.commands import CommandRegistry
    from tether.agent.types import Agent
    from tether.mcp.connection import McpConnection

__all__ = [
    "CommandFailedError",
    "ListedResource",
    "ServerResources",
    "attach_mcp_resources",
    "command_for",
    "list_mcp_resources",
    "mcp_connections",
    "offered_commands",
    "offered_now",
    "run_command",
]

log = logging.getLogger(__name__)


class CommandFailedError(Exception):
    """A command failed on a bug of its own; the message (``failed: TYPE: TEXT``, one
    line) says how, for a front end to put after the command's name."""


class ListedResource(NamedTuple):
    """One resource a server lists (``resources/list``)."""

    uri: str
    name: str
    title: str | None
    description: str | None
    mime_type: str | None


class ServerResources(NamedTuple):
    """What one server of a session lists: its resources, or why it could not."""

    server: str
    resources: tuple[ListedResource, ...]
    error: str | None


def command_for(registry: CommandRegistry | None, text: str) -> tuple[Command, str] | None:
    """The registered command ``text`` (``/name`` or ``/name argument``) names, with its
    argument; ``None`` when it names none (the text is an ordinary prompt)."""
    parsed = parse_command(text)
    if registry is None or parsed is None:
        return None
    command = registry.get(parsed[0])
    return None if command is None else (command, parsed[1])


async def run_command(command: Command, agent: Agent, argument: str) -> str | None:
    """Run ``command`` on ``agent``; its answer for the person (``None``: none).

    Raises:
        CommandError: the command refused its input (the message says why).
        CommandFailedError: it failed on a bug of its own (logged with its traceback
            at debug level).
    """
    try:
        return await command.run(CommandCall(agent, argument))
    except CommandError:
        raise
    except Exception as exc:
        log.debug("/%s failed", command.name, exc_info=True)
        raise CommandFailedError(f"failed: {type(exc).__name__}: {exc}") from exc


async def offered_commands(agent: Agent, registry: CommandRegistry | None) -> list[Command]:
    """``registry``'s commands offered in ``agent``'s session (a server's prompt where
    that server lists it), sorted by name, once the prompt and tool lists of ``agent``'s
    servers being read again are applied."""
    if registry is None:
        return []
    from tether.mcp.plugin import MCP

    service = agent.ctx.get(MCP)
    if service is not None:
        await service.settled(agent)
    return offered_now(agent, registry)


def offered_now(agent: Agent, registry: CommandRegistry | None) -> list[Command]:
    """``registry``'s commands offered in ``agent``'s session now (a server's prompt
    where that server lists it), sorted by name."""
    if registry is None:
        return []
    return [c for c in registry.list() if c.offered_to is None or c.offered_to(agent)]


def mcp_connections(agent: Agent) -> list[McpConnection]:
    """The running MCP servers of ``agent`` (none without the ``mcp`` plugin)."""
    # Imported here: a front end loads the MCP plugin's module only once it is asked.
    from tether.mcp.plugin import MCP

    service = agent.ctx.get(MCP)
    return [] if service is None else service.connections(agent)


async def attach_mcp_resources(agent: Agent, text: str) -> Attached:
    """The resources the ``@server:uri`` words of ``text`` name, read from ``agent``'s
    servers (see :mod:`tether.mcp.mentions`); nothing when it has none."""
    connections = mcp_connections(agent) if "@" in text else []
    if not connections:
        return Attached((), (), ())
    return await attach_resources(text, connections)


async def list_mcp_resources(agent: Agent) -> list[ServerResources]:
    """What each of ``agent``'s servers that offers resources lists, by server name
    (the servers asked concurrently).

    A server that fails to list them (it answered an error, it is no longer
    running, it did not answer within the servers' ``startup_timeout_ms``) has its
    reason in ``error``; nothing is raised.
    """
    from tether.mcp.plugin import MCP

    service = agent.ctx.get(MCP)
    if service is None:
        return []
    limit = service.settings.startup_timeout
    offering = [c for c in service.connections(agent) if c.offers_resources]
    asked = (_resources_of(c, limit) for c in sorted(offering, key=lambda c: c.name))
    return list(await asyncio.gather(*asked))


async def _resources_of(connection: McpConnection, limit: float) -> ServerResources:
    """What ``connection`` lists (``resources/list``, every page), or why it could not."""
    from mcp.shared.exceptions import MCPError

    from tether.mcp.errors import McpStartError, McpUnavailableError

    try:
        async with asyncio.timeout(limit):
            resources = await connection.list_resources()
    except TimeoutError:
        reason = f"it did not answer resources/list within {limit:g} s"
        return ServerResources(connection.name, (), reason)
    except MCPError as exc:
        return ServerResources(connection.name, (), exc.error.message)
    except (McpUnavailableError, McpStartError) as exc:
        return ServerResources(connection.name, (), str(exc))
    rows = tuple(
        ListedResource(str(r.uri), r.name, r.title, r.description, r.mime_type) for r in resources
    )
    return ServerResources(connection.name, rows, None)
