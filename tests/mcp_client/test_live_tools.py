"""In process: a server that changes its tools has them changed in its agent's registry,
whether it says so on the current specification's ``subscriptions/listen`` stream or,
as a 2025-era server does, with ``notifications/tools/list_changed``."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.mcp_client.support import SDK_SERVER, http_server
from tether.host import Tether
from tether.mcp.plugin import MCP
from tether.mcp.servers import HttpServer, ServerSpec, StdioServer
from tether.runtime.signal import CancelSignal
from tether.tools.registry import TOOLS


async def _passthrough(step_input: tuple[Any, ...]) -> tuple[Any, ...]:
    return step_input


def _said(agent: Any, text: str) -> bool:
    """Whether a stored event of the agent's session carries ``text`` (a notice)."""
    return any(text in repr(event) for event in agent.session.events)


@pytest.mark.parametrize("generation", ["current", "2025"])
@pytest.mark.parametrize("transport", ["stdio", "http", "sse"])
async def test_a_changed_list_is_applied_before_the_next_step_and_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, transport: str, generation: str
) -> None:
    monkeypatch.setenv("TETHER_HOME", str(tmp_path))
    options, version = (("--legacy",), "2025-11-25") if generation == "2025" else ((), "2026-07-28")
    if transport == "stdio":
        spec = StdioServer("t", sys.executable, (SDK_SERVER, *options))
        await _changes(tmp_path, spec, version)
        return
    async with http_server(transport, *options) as url:
        spec = HttpServer("t", url, "http" if transport == "http" else "sse")
        await _changes(tmp_path, spec, version)


async def _changes(tmp_path: Path, server: ServerSpec, version: str) -> None:
    async with Tether(data_dir=tmp_path) as tether:
        mcp = tether.runtime.ctx.get(MCP)
        assert mcp is not None

        async def setup(agent: Any) -> None:
            assert await mcp.attach(agent, [server]) == []

        handle = await tether.agents.create(cwd=str(Path.cwd()), setup=setup)
        agent = handle.agent
        registry = tether.runtime.ctx.get(TOOLS)
        assert registry is not None
        assert registry.get("mcp__t__huge", agent.id) is not None
        assert registry.get("mcp__t__fresh", agent.id) is None

        (connection,) = mcp.connections(agent)
        assert connection.protocol_version == version
        result = await connection.call("grow", {"name": "fresh"}, CancelSignal())
        assert not result.is_error
        # On stdio (and over SSE) the change comes before the call's answer; over
        # streamable HTTP it comes on a stream of its own, maybe just after.
        for _ in range(250):
            await mcp.before_step((), _passthrough, agent, 1)
            if registry.get("mcp__t__fresh", agent.id) is not None:
                break
            await asyncio.sleep(0.02)

        fresh = registry.get("mcp__t__fresh", agent.id)
        assert fresh is not None and fresh.description == "the tool fresh"
        assert registry.get("mcp__t__huge", agent.id) is None
        assert registry.get("mcp__t__echo", agent.id) is not None
        assert _said(
            agent, "MCP server 't' changed its tools: added mcp__t__fresh; removed mcp__t__huge"
        )
        await handle.dispose()
        assert registry.get("mcp__t__fresh", agent.id) is None
