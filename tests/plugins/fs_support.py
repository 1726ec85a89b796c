"""A world with the file tools mounted, and a way to call them as an agent would."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.agent.world import World, build_world
from tether.agent import Agent
from tether.content import ToolCallBlock
from tether.runtime import CancelSignal
from tether.runtime.compose import PluginRow
from tether.tools import ToolExec, ToolResult

PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)
"""A whole 1x1 PNG image."""


@dataclass
class Files:
    world: World
    agent: Agent
    root: Path

    async def call(
        self,
        tool: str,
        *,
        approved: bool = False,
        agent: Agent | None = None,
        signal: CancelSignal | None = None,
        **arguments: Any,
    ) -> tuple[str, bool]:
        """Call ``tool`` through the registry as the agent: (content, is_error)."""
        result = await self.result(tool, approved=approved, agent=agent, signal=signal, **arguments)
        return str(result.content), bool(result.is_error)

    async def result(
        self,
        tool: str,
        *,
        approved: bool = False,
        agent: Agent | None = None,
        signal: CancelSignal | None = None,
        model: str | None = None,
        **arguments: Any,
    ) -> ToolResult:
        """Call ``tool`` through the registry as the agent, for ``model``: the whole result."""
        caller = agent or self.agent
        return await self.world.get("tools").execute(
            ToolCallBlock(id="c", name=tool, arguments=arguments),
            ToolExec(
                agent=caller,
                call_id="c",
                signal=signal or CancelSignal(),
                cwd=caller.session.header.cwd,
                approved=approved,
                model=model,
            ),
        )

    async def ok(self, tool: str, **arguments: Any) -> str:
        content, failed = await self.call(tool, **arguments)
        assert not failed, content
        return content

    async def refused(self, tool: str, **arguments: Any) -> str:
        content, failed = await self.call(tool, **arguments)
        assert failed, content
        return content


@asynccontextmanager
async def file_tools(
    tmp_path: Path, *, sandbox: dict[str, Any] | None = None, **config: Any
) -> AsyncIterator[Files]:
    """A world whose agent works in ``tmp_path / "ws"``, with ``tool_fs`` mounted
    (and the ``sandbox`` plugin, configured with ``sandbox``, when it is given)."""
    world = await build_world(tmp_path / "data")
    try:
        rows = [PluginRow(id="tool_fs", plugin="tether.plugins.tool_fs", config=config)]
        if sandbox is not None:
            rows.insert(0, PluginRow(id="sandbox", plugin="tether.plugins.sandbox", config=sandbox))
        report = await world.composer.apply(rows)
        assert report.ok, report.problems
        root = tmp_path / "ws"
        root.mkdir(exist_ok=True)
        agent = (await world.get("agents").create(cwd=str(root))).agent
        yield Files(world, agent, root)
    finally:
        await world.runtime.dispose()
