"""In process: a session's server dies with that session alone, and with its plugin."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.mcp_client.support import RAW_SERVER, STUBBORN_SERVER
from tests.mcp_client.test_acp_servers import _alive
from tether.host import Tether
from tether.mcp.plugin import MCP, McpService
from tether.mcp.servers import StdioServer

SERVER = StdioServer("raw", sys.executable, (RAW_SERVER, "--good"))


async def _with_server(tether: Tether, mcp: McpService, server: StdioServer = SERVER) -> Any:
    async def setup(agent: Any) -> None:
        assert await mcp.attach(agent, [server]) == []

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


@pytest.mark.parametrize("leader", ["leaves-at-eof", "stays"])
async def test_dispose_returns_once_a_stubborn_server_and_its_children_are_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, leader: str
) -> None:
    """The server ignores SIGTERM, and so do its eight children: when its
    stdin closes it either leaves them behind, or stays until SIGKILL."""
    monkeypatch.setenv("TETHER_HOME", str(tmp_path))
    pidfile = tmp_path / "pids"
    args = (STUBBORN_SERVER, str(pidfile), *(["--stay"] if leader == "stays" else []))
    stubborn = StdioServer("stubborn", sys.executable, args)
    # The server writes its pids outside its workspace: no sandbox here.
    overlay = {
        "plugins": [
            {"id": "mcp", "config": {"kill_grace_ms": 200}},
            {"id": "sandbox", "config": {"mode": "full-access"}},
        ]
    }
    async with Tether(data_dir=tmp_path, overlays=[overlay]) as tether:
        mcp = tether.runtime.ctx.get(MCP)
        assert mcp is not None
        handle = await _with_server(tether, mcp, stubborn)
        pids = [int(pid) for pid in pidfile.read_text().split()]
        assert len(pids) == 9 and all(map(_alive, pids))
        await handle.dispose()
        # No wait: they are gone the moment dispose returns.
        assert [pid for pid in pids if _alive(pid)] == []
