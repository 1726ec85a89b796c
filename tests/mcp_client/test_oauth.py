"""OAuth against a real local authorization server (the SDK's, in ``oauth_server.py``):
``tether mcp login`` as a person runs it (a process printing the address, a browser
following it), the tokens kept 0600, refreshed by a session once expired, revoked
by ``tether mcp logout``."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest

from tests.mcp_client.support import HERE
from tether.cli.main import main
from tether.mcp.connection import McpConnection, McpSettings
from tether.mcp.errors import McpStartError
from tether.mcp.oauth import session_provider, token_path
from tether.mcp.servers import HttpServer
from tether.runtime.signal import CancelSignal

OAUTH_SERVER = str(HERE / "oauth_server.py")
EXPIRES = 1
"""Seconds an access token of the test server lives."""


class _Owner:
    id = "oauth"


@asynccontextmanager
async def oauth_server() -> AsyncIterator[str]:
    """The OAuth test server on 127.0.0.1; yields its MCP endpoint."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        OAUTH_SERVER,
        str(port),
        "--expires",
        str(EXPIRES),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    try:
        async with asyncio.timeout(30):
            while b"Uvicorn running on" not in await process.stderr.readline():
                pass
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        await process.wait()


async def _login(home: Path) -> str:
    """``tether mcp login web`` in a process of its own; the person's browser follows the
    address it prints. Returns what it printed."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from tether.cli.launch import entry; entry()",
        "--data-dir",
        str(home),
        "mcp",
        "login",
        "--no-browser",
        "web",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "TETHER_HOME": str(home)},
    )
    assert process.stdout is not None
    printed: list[str] = []
    async with asyncio.timeout(60):
        while not (line := (await process.stdout.readline()).decode()).startswith("http"):
            assert line, f"it ended without an address: {printed}"
            printed.append(line)
        async with httpx2.AsyncClient(follow_redirects=True) as browser:
            page = await browser.get(line.strip())
        assert page.status_code == 200 and "authorized" in page.text
        rest = (await process.stdout.read()).decode()
        assert await process.wait() == 0, rest
    return "".join(printed) + line + rest


async def _call(home: Path, url: str, tool: str) -> str:
    """Start the server as a session does (the stored grant), call ``tool``, stop it."""
    connection = McpConnection(
        HttpServer("web", url),
        McpSettings(startup_timeout=30),
        cwd=None,
        guard=None,
        owner=_Owner(),
        auth=session_provider(home, "web", url),
    )
    try:
        await connection.start()
        result = await connection.call(tool, {}, CancelSignal())
        return result.content[0].text  # type: ignore[union-attr,no-any-return]
    finally:
        await connection.close()


@pytest.mark.timeout(120)
async def test_login_refresh_and_logout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path
    async with oauth_server() as url:
        words = ("add", "--transport", "http", "web", url)
        assert await asyncio.to_thread(main, ["--data-dir", str(home), "mcp", *words]) == 0

        # Without a login a session's start fails, saying what to do.
        with pytest.raises(McpStartError, match="tether mcp login web"):
            await _call(home, url, "whoami")

        printed = await _login(home)
        assert "Open this address to authorize tether with 'web'" in printed
        assert "web: logged in (4 tool(s), MCP 2026-07-28)" in printed
        path = token_path(home, "web")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        kept = json.loads(path.read_text())
        client_id = kept["client"]["client_id"]

        # The access token has expired: the session refreshes it and keeps the new one.
        await asyncio.sleep(max(0.0, kept["expires_at"] - time.time()) + 0.05)
        assert await _call(home, url, "whoami") == client_id
        seen = dict(pair.split("=") for pair in (await _call(home, url, "grants_seen")).split())
        # One code; a refresh at least (a slow machine may let the new token expire too).
        assert seen["codes"] == "1" and int(seen["refreshes"]) >= 1
        renewed = json.loads(path.read_text())
        assert renewed["tokens"]["access_token"] != kept["tokens"]["access_token"]
        assert stat.S_IMODE(path.stat().st_mode) == 0o600

        capsys.readouterr()
        logout = ["--data-dir", str(home), "mcp", "logout", "web"]
        assert await asyncio.to_thread(main, logout) == 0
        assert capsys.readouterr().out.strip() == "web: tokens revoked and forgotten"
        assert not path.exists()
        with pytest.raises(McpStartError, match="tether mcp login web"):
            await _call(home, url, "whoami")


def test_login_is_for_http_servers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--data-dir", str(tmp_path), "mcp"]
    assert main([*base, "add", "local", "--", sys.executable, "-c", "pass"]) == 0
    assert main([*base, "login", "local"]) == 2
    assert "'local' is a stdio server: OAuth is for HTTP servers" in capsys.readouterr().err
    assert main([*base, "logout", "nobody"]) == 2
    assert "no MCP server named 'nobody'" in capsys.readouterr().err
