"""An MCP server's resources, read by its ``mcp__<server>__read_resource`` tool."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.mcp_client.support import SDK_SERVER
from tether.host import Tether
from tether.mcp.plugin import MCP
from tether.mcp.servers import StdioServer
from tether.runtime.signal import CancelSignal
from tether.tools.definition import ToolExec
from tether.tools.registry import TOOLS


async def test_the_read_resource_tool_reads_text_describes_binary_and_refuses_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_HOME", str(tmp_path))
    server = StdioServer("t", sys.executable, (SDK_SERVER,))
    async with Tether(data_dir=tmp_path) as tether:
        mcp = tether.runtime.ctx.get(MCP)
        assert mcp is not None

        async def setup(agent: Any) -> None:
            assert await mcp.attach(agent, [server]) == []

        handle = await tether.agents.create(cwd=str(Path.cwd()), setup=setup)
        agent = handle.agent
        registry = tether.runtime.ctx.get(TOOLS)
        assert registry is not None
        tool = registry.get("mcp__t__read_resource", agent.id)
        assert tool is not None

        async def read(uri: str) -> Any:
            args = tool.args.model_validate({"uri": uri})
            return await tool.execute(args, _exec())

        text = await read("notes://today")
        assert (text.content, text.is_error) == ("buy milk", False)
        binary = await read("notes://logo")
        assert binary.content == "[resource notes://logo: image/png, 8 bytes]"
        unknown = await read("notes://nothing")
        assert unknown.is_error
        assert unknown.content == (
            "MCP server 't' could not read notes://nothing: Unknown resource: notes://nothing"
        )
        await handle.dispose()


def _exec() -> ToolExec:
    return ToolExec(agent=None, call_id="c1", signal=CancelSignal(), cwd=None)
