"""Makes a test server written with the SDK (MCPServer) a 2025-era one: ``server/discover``
is an unknown method, as it is to every server written before 2026-07-28, and on stdio
and SSE it serves the SDK's handshake-only loop (``initialize`` first). Imported by the
test servers run as scripts (``sdk_server.py``, ``asking_server.py``), from their directory.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.runner import serve_loop
from mcp.shared.exceptions import MCPError
from mcp_types import METHOD_NOT_FOUND, RequestParams


async def _no_discover(ctx: object, params: object) -> None:
    raise MCPError(code=METHOD_NOT_FOUND, message="Method not found")


def make_legacy(server: MCPServer) -> None:
    """Turn ``server`` into a 2025-era server (see the module docs)."""
    low = server._lowlevel_server

    async def handshake_only(
        read: Any, write: Any, options: Any, raise_exceptions: bool = False
    ) -> None:
        async with low.lifespan(low) as state:
            await serve_loop(
                low,
                read,
                write,
                lifespan_state=state,
                init_options=options,
                raise_exceptions=raise_exceptions,
            )

    low.add_request_handler("server/discover", RequestParams, _no_discover)
    low.run = handshake_only  # type: ignore[method-assign]
