"""One server's tools in its agent's registry, kept in line with the server's list.

A server that sends ``notifications/tools/list_changed`` has its list read
again in a task of its own (:meth:`ServerTools.changed`); the tools that
appeared are registered in the agent's scope, those gone are removed, those
whose definition changed are replaced, and the agent is told in a notice
(stored like every notice, so the person sees it in the terminal, the
editor and the web page; the model reads it with the next step). A step of
the agent waits for a refresh under way (:meth:`ServerTools.settled`), so
the next model request offers the new list. Several notifications during a
refresh cause one more refresh, not one each.

The refresh task is stopped with the server (:meth:`ServerTools.close`).

:class:`Refresher` is that task alone, for any list a server says changed (its
prompts too, :meth:`tether.mcp.prompts.PromptCommands.refresh`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from tether.tools.errors import ToolConflictError
from tether.tools.registry import TOOLS

if TYPE_CHECKING:
    import mcp_types as types

    from tether.agent.types import Agent
    from tether.mcp.connection import McpConnection
    from tether.tools.definition import Tool

log = logging.getLogger(__name__)

Builder = Callable[["McpConnection", "list[types.Tool]"], "tuple[list[Tool[Any]], list[str]]"]
"""Makes tether tools of a server's listed tools (and the problems of those left out)."""


class Refresher:
    """One list of one server read again in a task of its own, each time the server
    says it changed: several changes during a read cause one more read, not one each.
    """

    def __init__(
        self,
        name: str,
        read: Callable[[], Awaitable[None]],
        failed: Callable[[Exception], None],
        wait_limit: float,
    ) -> None:
        self._name = name
        """The task's name."""
        self._read = read
        """Reads the list again and applies it."""
        self._failed = failed
        """Hears a read that failed (it is not retried until the next change)."""
        self._wait_limit = wait_limit
        """The longest :meth:`settled` waits."""
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._closed = False

    def changed(self) -> None:
        """The list changed: read it (once more if a read is under way)."""
        if self._closed:
            return
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.get_running_loop().create_task(self._reading(), name=self._name)

    async def settled(self) -> None:
        """Wait for a read under way (at most the wait limit)."""
        task = self._task
        if task is None or task.done():
            return
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(task), self._wait_limit)

    async def close(self) -> None:
        """Stop a read under way; later changes are ignored."""
        self._closed = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def _reading(self) -> None:
        while True:
            self._again = False
            try:
                await self._read()
            except Exception as exc:
                self._failed(exc)
            if not self._again or self._closed:
                return


class ServerTools:
    """The registered tools of one server of one agent."""

    def __init__(
        self,
        agent: Agent,
        connection: McpConnection,
        build: Builder,
        tell: Callable[[str], None],
        wait_limit: float,
    ) -> None:
        self._agent = agent
        self._connection = connection
        self._build = build
        self._tell = tell
        """Delivers one notice line to the agent."""
        self._registered: dict[str, tuple[Any, Callable[[], Awaitable[None]]]] = {}
        """Tool name → (the listed tool it came from, its remover)."""
        self._refresher = Refresher(
            f"mcp-tools:{agent.id}:{connection.name}", self._refresh_once, self._failed, wait_limit
        )

    async def register(self, listed: list[types.Tool]) -> list[str]:
        """Register the tools of ``listed``; returns the problems (tools left out)."""
        tools, problems = self._build(self._connection, listed)
        sources = _by_name(self._connection, listed)
        for tool in tools:
            problem = await self._add(tool, sources.get(tool.name))
            if problem is not None:
                problems.append(problem)
        return problems

    def changed(self) -> None:
        """The server said its list changed: refresh it (once more if one is under way)."""
        self._refresher.changed()

    async def settled(self) -> None:
        """Wait for a refresh under way (at most the wait limit; a failure is logged)."""
        await self._refresher.settled()

    async def close(self) -> None:
        """Stop a refresh under way; the registrations go with the agent's scope."""
        await self._refresher.close()

    # -- internals --------------------------------------------------------------------

    def _failed(self, exc: Exception) -> None:
        log.warning(
            "session %s: MCP server %s: its new tool list could not be read: %s",
            self._agent.id,
            self._connection.name,
            exc,
        )

    async def _refresh_once(self) -> None:
        listed = await self._connection.list_tools()
        tools, problems = self._build(self._connection, listed)
        sources = _by_name(self._connection, listed)
        wanted = {tool.name: tool for tool in tools}
        removed = [name for name in self._registered if name not in wanted]
        kept = {
            name
            for name, tool in wanted.items()
            if name in self._registered and self._registered[name][0] == sources.get(name)
        }
        for name in removed:
            await self._registered.pop(name)[1]()
        added, replaced = [], []
        for name, tool in wanted.items():
            if name in kept:
                continue
            if name in self._registered:
                await self._registered.pop(name)[1]()
                replaced.append(name)
            else:
                added.append(name)
            problem = await self._add(tool, sources.get(name))
            if problem is not None:
                problems.append(problem)
        self._report(added, removed, replaced, problems)

    async def _add(self, tool: Tool[Any], source: object) -> str | None:
        registry = self._agent.ctx.service(TOOLS)
        try:
            remove = await registry.register(tool, scope=self._agent.id)
        except ToolConflictError as exc:
            return f"a tool was left out: {exc}"
        self._registered[tool.name] = (source, remove)
        return None

    def _report(
        self, added: list[str], removed: list[str], replaced: list[str], problems: list[str]
    ) -> None:
        parts = [
            f"{label} {', '.join(names)}"
            for label, names in (("added", added), ("removed", removed), ("changed", replaced))
            if names
        ]
        if not parts and not problems:
            return
        name = self._connection.name
        lines = [f"MCP server {name!r} changed its tools: {'; '.join(parts)}"] if parts else []
        lines += [f"MCP server {name!r}: {problem}" for problem in problems]
        for line in lines:
            log.info("session %s: %s", self._agent.id, line)
        self._tell("\n".join(lines))


def _by_name(connection: McpConnection, listed: list[types.Tool]) -> dict[str, Any]:
    """Each listed tool's definition (as data) by the tether name it gets."""
    from tether.mcp.tools import tool_name

    return {tool_name(connection.name, item.name): item.model_dump() for item in listed}
