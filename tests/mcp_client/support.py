"""MCP servers for the tests, as the ACP client offers them."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from acp.schema import EnvVariable, HttpMcpServer, McpServerStdio, SseMcpServer

HERE = Path(__file__).resolve().parent
SDK_SERVER = str(HERE / "sdk_server.py")
RAW_SERVER = str(HERE / "raw_server.py")
STUBBORN_SERVER = str(HERE / "stubborn_server.py")


def stdio(name: str = "t", *args: str, script: str = SDK_SERVER, **env: str) -> McpServerStdio:
    """The SDK test server (or ``script``) on stdio."""
    return McpServerStdio(
        name=name,
        command=sys.executable,
        args=[script, *args],
        env=[EnvVariable(name=key, value=value) for key, value in env.items()],
    )


def command(name: str, *argv: str) -> McpServerStdio:
    """Any command as a stdio server."""
    return McpServerStdio(name=name, command=argv[0], args=list(argv[1:]), env=[])


def http(name: str, url: str) -> HttpMcpServer:
    return HttpMcpServer(type="http", name=name, url=url, headers=[])


def sse(name: str, url: str) -> SseMcpServer:
    return SseMcpServer(type="sse", name=name, url=url, headers=[])


def results(log: list[dict[str, Any]]) -> list[tuple[str, str, bool]]:
    """``(tool name, content, is_error)`` of every ``tool/result`` in a stored log."""
    return [
        (event["data"]["name"], event["data"]["content"], event["data"]["is_error"])
        for event in log
        if event["type"] == "tool/result"
    ]


def notices(log: list[dict[str, Any]]) -> list[str]:
    """The text of every notice delivered to the agent (``user/message`` from ``notice``)."""
    return [
        block["text"]
        for event in log
        if event["type"] == "user/message" and event["data"].get("source") == "notice"
        for block in event["data"]["content"]
    ]


@asynccontextmanager
async def http_server(mode: str, *options: str) -> AsyncIterator[str]:
    """The SDK test server over ``mode`` (``http``, ``stateless`` or ``sse``, with
    ``options`` such as ``--legacy``) on 127.0.0.1; yields its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        SDK_SERVER,
        mode,
        str(port),
        *options,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    try:
        async with asyncio.timeout(30):
            while b"Uvicorn running on" not in await process.stderr.readline():
                pass
        path = "/sse" if mode == "sse" else "/mcp"
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        process.kill()
        await process.wait()
