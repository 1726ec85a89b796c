"""An MCP server's prompts as slash commands: ``/mcp__<server>__<prompt> [arguments]``.

Each prompt a server lists when it starts becomes a command of the
``commands`` registry, so every front end that offers commands (the chat,
an editor's ``available_commands_update``) offers it, with the prompt's
arguments as its input hint. Commands are shared by the sessions of a host,
servers are not: a command stays while any session has a server of that name
listing the prompt, and runs with the server of the session that uses it.

Arguments are ``name=value`` words (quoted as a shell would, ``topic="the
build"``); a word without ``=`` fills the next argument not yet given, in the
order the prompt declares them. An unknown argument name, too many words or a
missing required argument is refused on one line, naming what is wrong.

Using the command sends ``prompts/get`` and queues what it answers as the
person's next turn: the text of every message, each embedded text resource
as an attached resource (``<resource uri=…>``), other content described.

A server that says its prompt list changed (``notifications/prompts/list_changed``,
or the ``subscriptions/listen`` stream of a current server) has its prompts read
again (:meth:`PromptCommands.refresh`): the commands follow the new list, and
``commands/changed`` tells the front ends (an editor's
``available_commands_update``).

A prompt whose command name would not be one (lower-case letters, digits,
``-`` and ``_``, at most 32 characters) is left out, with a notice.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from tether.agent.commands import (
    Command,
    CommandArgument,
    CommandCall,
    CommandConflictError,
    CommandError,
)
from tether.agent.types import UserMessage
from tether.content import TextBlock, embedded_resource
from tether.mcp.errors import McpStartError, McpUnavailableError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import mcp_types as types

    from tether.agent.commands import CommandRegistry
    from tether.agent.types import Agent
    from tether.mcp.connection import McpConnection

_COMMAND = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")

Finder = Callable[["Agent", str], "McpConnection | None"]
"""The connection of an agent's server of that name, if it has one running."""


def command_name(server: str, prompt: str) -> str:
    """``mcp__<server>__<prompt>``, characters outside ``[a-zA-Z0-9_-]`` as ``_``."""
    return f"mcp__{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', prompt)}"


def prompt_command(
    server: str,
    prompt: types.Prompt,
    find: Finder,
    offered_to: Callable[[Agent], bool] | None = None,
) -> Command:
    """The command of ``prompt`` of the servers named ``server`` (offered in the sessions
    ``offered_to`` accepts).

    Raises:
        ValueError: its name is not a valid command name.
    """
    name = command_name(server, prompt.name)
    if not _COMMAND.match(name):
        raise ValueError(
            f"prompt {prompt.name!r} has no command: /{name} is not lower-case "
            "letters, digits, '-' and '_' of at most 32 characters"
        )
    declared = [(a.name, bool(a.required)) for a in prompt.arguments or ()]
    arguments = tuple(
        CommandArgument(a.name, a.description, bool(a.required)) for a in prompt.arguments or ()
    )
    hint = " ".join(f"{n}=…" if required else f"[{n}=…]" for n, required in declared) or None

    async def run(call: CommandCall) -> str:
        from mcp.shared.exceptions import MCPError

        connection = find(call.agent, server)
        if connection is None:
            raise CommandError(f"MCP server {server!r} is not running in this session")
        arguments = parse_arguments(call.argument, declared, prompt.name)
        try:
            result = await connection.get_prompt(prompt.name, arguments)
        except McpUnavailableError as exc:
            raise CommandError(str(exc)) from None
        except MCPError as exc:
            raise CommandError(
                f"MCP server {server!r} refused prompt {prompt.name!r}: {exc.error.message}"
            ) from None
        content = prompt_content(result.messages)
        if not content:
            raise CommandError(
                f"MCP server {server!r} answered prompt {prompt.name!r} with nothing"
            )
        call.agent.followup(UserMessage(content))
        count = len(result.messages)
        return f"Sent prompt {prompt.name!r} of MCP server {server!r} ({count} message(s))."

    description = (
        prompt.description or prompt.title or f"prompt {prompt.name} of MCP server {server}"
    )
    return Command(name, description, run, hint=hint, arguments=arguments, offered_to=offered_to)


def parse_arguments(text: str, declared: Sequence[tuple[str, bool]], prompt: str) -> dict[str, str]:
    """The arguments ``text`` gives (see the module docs).

    Raises:
        CommandError: an unknown name, too many words, a missing required argument,
            unbalanced quotes.
    """
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise CommandError(f"prompt {prompt!r}: {exc}") from None
    names = [name for name, _ in declared]
    given: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if sep and key in names:
            given[key] = value
        elif sep and key.isidentifier():
            known = ", ".join(names) or "none"
            raise CommandError(f"prompt {prompt!r} has no argument {key!r} (it takes: {known})")
        else:
            free = [name for name in names if name not in given]
            if not free:
                raise CommandError(
                    f"prompt {prompt!r} takes {len(names)} argument(s): {word!r} is one too many"
                )
            given[free[0]] = word
    missing = [name for name, required in declared if required and name not in given]
    if missing:
        raise CommandError(f"prompt {prompt!r} needs {', '.join(missing)}")
    return given


def prompt_content(messages: Sequence[types.PromptMessage]) -> tuple[TextBlock, ...]:
    """The text of ``messages`` as the blocks of one user message (see the module docs)."""
    import mcp_types as types

    blocks: list[TextBlock] = []
    for message in messages:
        block = message.content
        if isinstance(block, types.TextContent):
            blocks.append(TextBlock(block.text))
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                blocks.append(embedded_resource(str(resource.uri), resource.text))
            else:
                blocks.append(
                    TextBlock(f"[resource {resource.uri}: {resource.mime_type or 'binary'}]")
                )
        elif isinstance(block, types.ResourceLink):
            blocks.append(TextBlock(f"[resource link: {block.uri}]"))
        else:
            blocks.append(TextBlock(f"[{block.type}: {getattr(block, 'mime_type', '')}]"))
    return tuple(blocks)


class PromptCommands:
    """The prompt commands of every running server, each registered while a server
    lists it (see the module docs)."""

    def __init__(self, registry: Callable[[], CommandRegistry | None], find: Finder) -> None:
        self._registry = registry
        self._find = find
        self._held: dict[str, Callable[[], Awaitable[None]]] = {}
        """Each registered command's remover."""
        self._listed: dict[str, set[McpConnection]] = {}
        """The connections that list each command's prompt (set before the command is
        registered: the ``commands/changed`` of its registration sees it offered)."""
        self._of: dict[McpConnection, list[str]] = {}

    async def add(self, connection: McpConnection) -> list[str]:
        """Register the commands of ``connection``'s prompts; returns the problems."""
        registry = self._registry()
        if registry is None or not connection.offers_prompts:
            return []
        from mcp.shared.exceptions import MCPError

        try:
            prompts = await connection.list_prompts()
        except (McpUnavailableError, MCPError, McpStartError) as exc:
            return [f"its prompts could not be listed: {exc}"]
        return await self._register(registry, connection, prompts)

    async def _register(
        self, registry: CommandRegistry, connection: McpConnection, prompts: list[types.Prompt]
    ) -> list[str]:
        """Register the commands of ``prompts`` of ``connection``; returns the problems."""
        problems: list[str] = []
        names = self._of.setdefault(connection, [])
        for prompt in prompts:
            offered = self._offered(command_name(connection.name, prompt.name))
            try:
                command = prompt_command(connection.name, prompt, self._find, offered)
            except ValueError as exc:
                problems.append(str(exc))
                continue
            listed = self._listed.setdefault(command.name, set())
            listed.add(connection)
            if command.name not in self._held:
                try:
                    self._held[command.name] = await registry.register(command)
                except CommandConflictError as exc:
                    self._unlist(command.name, connection)
                    problems.append(f"prompt {prompt.name!r} has no command: {exc}")
                    continue
            names.append(command.name)
        return problems

    def _offered(self, name: str) -> Callable[[Agent], bool]:
        """Whether a server of ``agent`` lists the prompt of command ``name`` now."""

        def offered(agent: Agent) -> bool:
            return any(c.owner is agent for c in self._listed.get(name, ()))

        return offered

    async def refresh(self, connection: McpConnection) -> tuple[list[str], list[str]]:
        """Follow ``connection``'s new prompt list: its commands are withdrawn, then those
        of the prompts it lists now registered (a changed prompt's command is replaced,
        unless another server still lists the old one). Returns the command names
        added and removed; the problems are logged.

        Raises:
            McpUnavailableError, McpStartError, MCPError (the SDK's): the list could
                not be read (the commands stay as they were).
        """
        registry = self._registry()
        if registry is None:
            return [], []
        prompts = await connection.list_prompts()
        before = set(self._of.get(connection, ()))
        await self.remove(connection)
        for problem in await self._register(registry, connection, prompts):
            log.warning("MCP server %s: %s", connection.name, problem)
        after = set(self._of.get(connection, ()))
        return sorted(after - before), sorted(before - after)

    async def remove(self, connection: McpConnection) -> None:
        """Withdraw ``connection``'s commands no other running server lists."""
        for name in self._of.pop(connection, []):
            if self._unlist(name, connection):
                remover = self._held.pop(name, None)
                if remover is not None:
                    await remover()

    def _unlist(self, name: str, connection: McpConnection) -> bool:
        """``connection`` no longer lists the prompt of command ``name``; whether no
        connection does now."""
        listed = self._listed.get(name)
        if listed is None:
            return False
        listed.discard(connection)
        if listed:
            return False
        del self._listed[name]
        return True
