"""MCP servers offered by the ACP client: started per session, owned by it, gone with it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.acp.harness import AcpProcess, serving
from tests.mcp.support import stdio, results, notices


async def new_session(server: AcpProcess, *servers: object, cwd: Path | None = None) -> str:
    response = await server.conn.new_session(cwd=str(cwd or server.home), mcp_servers=list(servers))
    return response.session_id


def call(tool: str, **arguments: object) -> str:
    return f"/tool {tool} {json.dumps(arguments)}"


async def test_a_stdio_server_tools_are_called_as_mcp_server_tool(tmp_path: Path) -> None:
    async with serving(tmp_path, "--mode", "auto", model="offline") as server:
        sid = await new_session(server, stdio("files"))
        assert await server.prompt(sid, call("mcp__files__echo", text="hi")) == "end_turn"
        assert results(server.log(sid)) == [("mcp__files__echo", "echo: hi", False)]
