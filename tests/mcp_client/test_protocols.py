"""Both generations of servers, on every transport: a server of the current
specification (2026-07-28) is reached with ``server/discover``; a 2025-era server,
which answers it "method not found", gets the ``initialize`` handshake. Either way
its tools are listed and called."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from tests.mcp_client.support import RAW_SERVER, SDK_SERVER, http_server
from tether.mcp.connection import McpConnection, McpSettings
from tether.mcp.servers import HttpServer, ServerSpec, StdioServer
from tether.runtime.signal import CancelSignal

CURRENT = "2026-07-28"
OLD = "2025-11-25"


class _Owner:
    id = "protocols"


@asynccontextmanager
async def _stdio(script: str, *args: str) -> AsyncIterator[ServerSpec]:
    yield StdioServer("t", sys.executable, (script, *args))


@asynccontextmanager
async def _http(mode: str, *options: str) -> AsyncIterator[ServerSpec]:
    async with http_server(mode, *options) as url:
        yield HttpServer("t", url, "sse" if mode == "sse" else "http")


def _servers() -> dict[str, tuple[object, str, str]]:
    """Where the server is, the version spoken, and a tool to call (with its answer)."""
    return {
        "stdio, current": (lambda: _stdio(SDK_SERVER), CURRENT, "echo"),
        "stdio, 2025": (lambda: _stdio(SDK_SERVER, "--legacy"), OLD, "echo"),
        "stdio, 2025, hand-written": (lambda: _stdio(RAW_SERVER, "--good"), OLD, "bad"),
        "stdio, 2025, silent to server/discover": (
            lambda: _stdio(RAW_SERVER, "--good", "--mute"),
            OLD,
            "bad",
        ),
        "streamable http, stateless, current": (lambda: _http("stateless"), CURRENT, "echo"),
        "streamable http, sessions, current": (lambda: _http("http"), CURRENT, "echo"),
        "streamable http, 2025": (lambda: _http("http", "--legacy"), OLD, "echo"),
        "sse, current": (lambda: _http("sse"), CURRENT, "echo"),
        "sse, 2025": (lambda: _http("sse", "--legacy"), OLD, "echo"),
    }


@pytest.mark.parametrize("case", list(_servers()))
async def test_each_generation_is_spoken_on_each_transport(case: str) -> None:
    where, version, tool = _servers()[case]
    async with where() as spec:  # type: ignore[operator]
        # The default startup timeout: a server silent to server/discover starts too.
        connection = McpConnection(spec, McpSettings(), cwd=None, guard=None, owner=_Owner())
        try:
            listed = await connection.start()
            assert connection.protocol_version == version
            assert tool in {item.name for item in listed}
            arguments = {"text": "hi"} if tool == "echo" else {}
            result = await connection.call(tool, arguments, CancelSignal())
            assert not result.is_error
            assert result.content[0].text == ("echo: hi" if tool == "echo" else "ok")  # type: ignore[union-attr]
        finally:
            await connection.close()
