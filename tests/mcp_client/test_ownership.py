"""In process: a session's server dies with that session alone, and with its plugin."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.mcp_client.support import RAW_SERVER
from tests.mcp_client.test_acp_servers import _alive
from tether.host import Tether
from tether.mcp.plugin import MCP, McpService
from tether.mcp.servers import StdioServer

SERVER = StdioServer("raw", sys.executable, (RAW_SERVER, "--good"))


async def _with_server(tether: Tether, mcp: McpService) -> Any:
    async def setup(agent: Any) -> None:
        assert await mcp.attach(agent, [SERVER]) == []

    return await tether.agents.create(cwd=str(Path.cwd()), setup=setup)


async def test_disposing_a_session_stops_its_server_and_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_HOME", str(tmp_path))
    async with Tether(data_dir=tmp_path) as tether:
        mcp = tether.runtime.ctx.get(MCP)
        assert mcp is not None
        a, b = await _with_server(tether, mcp), await _with_server(tether, mcp)
        (server_a,), (server_b,) = mcp.connections(a.agent), mcp.connections(b.agent)
        assert server_a.pid != server_b.pid
        await a.dispose()
        assert server_a.pid is not None and not _alive(server_a.pid)
        assert server_b.pid is not None and _alive(server_b.pid)
        assert mcp.connections(a.agent) == [] and len(mcp.connections(b.agent)) == 1
        await b.dispose()
        assert not _alive(server_b.pid)


async def test_unloading_the_mcp_plugin_stops_every_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_HOME", str(tmp_path))
    async with Tether(data_dir=tmp_path) as tether:
        mcp = tether.runtime.ctx.get(MCP)
        assert mcp is not None
        handle = await _with_server(tether, mcp)
        (server,) = mcp.connections(handle.agent)
        await tether.composer.row("mcp").fiber.dispose()  # type: ignore[union-attr]
        assert server.pid is not None and not _alive(server.pid)
        await handle.dispose()
