"""The registry's reference servers (npm packages, pinned), on each transport, through
the paths a user takes: ``tether mcp test NAME`` lists their tools, and in an ACP
session the model calls them and gets the server's own answers. A stdio server runs
below tether while its session lives and is gone once the session is disposed (or
``tether mcp test`` ends); an HTTP server is never a process of tether's."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from acp.schema import EnvVariable, McpServerStdio

from tests.acp.harness import ROOT, AcpProcess, env_for, serving
from tests.mcp_client.support import http, results, sse
from tests.mcp_client.test_acp_servers import call, new_session
from tests.npm_packages import installed
from tests.shell.support import ended
from tether.cli.main import main

EVERYTHING = "@modelcontextprotocol/server-everything@2026.8.31"
FILESYSTEM = "@modelcontextprotocol/server-filesystem@2026.8.31"
MARK = "TETHER_TEST_SERVER_MARK"
"""An environment variable given to a stdio server, so its processes can be found."""


def _package(name: str) -> str:
    """The entry script of an installed reference server (both installed at once)."""
    return str(installed(EVERYTHING, FILESYSTEM) / "node_modules" / name / "dist" / "index.js")


def _marked(mark: str) -> set[int]:
    """The live processes whose environment carries ``MARK=mark``."""
    found = set()
    needle = f"{MARK}={mark}".encode()
    for entry in os.listdir("/proc"):
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes() if entry.isdigit() else b""
            state = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state != "Z":
            found.add(int(entry))
    return found


def _descendants(pid: int) -> set[int]:
    """The processes below ``pid``, at any depth."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text() if entry.isdigit() else ""
        except OSError:
            continue
        if stat:
            parents[int(entry)] = int(stat.rpartition(")")[2].split()[1])
    below: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - below
        below |= frontier
    return below


def _nodes(pids: set[int]) -> set[int]:
    """Those of ``pids`` that run Node.js."""
    found = set()
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if Path(argv[0].decode()).name == "node":
            found.add(pid)
    return found


async def _mcp_test(home: Path, name: str) -> str:
    """The line ``tether mcp test NAME`` prints, run as the user runs it."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tether.cli.main",
        "--data-dir",
        str(home),
        "mcp",
        "test",
        name,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env_for(home),
        cwd=str(ROOT),
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode().strip()


class _Logged:
    """What a server process prints (stdout and stderr, merged), read as awaited."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        self._stream = process.stdout

    async def says(self, text: str, within: float = 30.0) -> None:
        """Return once a line holding ``text`` is printed; fail after ``within`` seconds.

        Raises:
            TimeoutError: no such line came in time.
            AssertionError: the server ended first.
        """
        async with asyncio.timeout(within):
            while text.encode() not in await self._stream.readline():
                if self._stream.at_eof():
                    raise AssertionError(f"the server ended before saying {text!r}")


@asynccontextmanager
async def _everything_over(transport: str) -> AsyncIterator[tuple[str, _Logged]]:
    """The everything server over ``transport`` (``sse`` or ``streamableHttp``) on a
    free port of 127.0.0.1; yields its URL and its output."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        "node",
        _package("@modelcontextprotocol/server-everything"),
        transport,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PORT": str(port)},
    )
    try:
        output = _Logged(process)
        await output.says(f"port {port}")
        yield f"http://127.0.0.1:{port}/{'sse' if transport == 'sse' else 'mcp'}", output
    finally:
        process.kill()
        await process.wait()


def _node(name: str, mark: str, *args: str) -> McpServerStdio:
    """A reference server on stdio, its processes marked with ``mark``."""
    return McpServerStdio(
        name=name, command="node", args=list(args), env=[EnvVariable(name=MARK, value=mark)]
    )


def _everything_calls() -> list[str]:
    return [call("mcp__every__echo", message="hi"), call("mcp__every__get-sum", a=2, b=3)]


EVERYTHING_LISTED = "ok: 13 tool(s): echo, get-annotated-message, get-env,"
"""What ``tether mcp test`` says of the everything server: its tools for the client
features tether offers (those needing roots or sampling are not listed)."""
EVERYTHING_ANSWERS = [
    ("mcp__every__echo", "Echo: hi", False),
    ("mcp__every__get-sum", "The sum of 2 and 3 is 5.", False),
]


async def _session(server: AcpProcess, offered: object, prompts: list[str]) -> str:
    """A new session offered ``offered``, in which the model runs each of ``prompts``."""
    sid = await new_session(server, offered)
    for prompt in prompts:
        assert await server.prompt(sid, prompt) == "end_turn"
    return sid


async def _owned_then_gone(server: AcpProcess, sid: str, mark: str) -> None:
    """The marked stdio server runs below tether until its session is closed, then is gone."""
    running = _marked(mark)
    assert running and running <= _descendants(server.process.pid)
    await server.conn.close_session(session_id=sid)
    for pid in running:
        assert await ended(pid, within=10.0)


async def test_everything_over_stdio(tmp_path: Path) -> None:
    script = _package("@modelcontextprotocol/server-everything")
    mark = uuid.uuid4().hex
    home = tmp_path / "home"
    words = ("add", "-e", f"{MARK}={mark}", "every", "--", "node", script, "stdio")
    assert main(["--data-dir", str(home), "mcp", *words]) == 0
    line = await _mcp_test(home, "every")
    assert line.startswith("every  stdio") and EVERYTHING_LISTED in line, line
    assert not _marked(mark)  # stopped before the command ends

    async with serving(tmp_path, "--mode", "auto", model="offline") as server:
        sid = await _session(server, _node("every", mark, script, "stdio"), _everything_calls())
        assert results(server.log(sid)) == EVERYTHING_ANSWERS
        await _owned_then_gone(server, sid, mark)


@pytest.mark.parametrize("transport", ["sse", "streamableHttp"])
async def test_everything_over_http(tmp_path: Path, transport: str) -> None:
    """Over HTTP the server is no process of tether's; closing the session ends the
    server's session (the SSE stream closed, or an HTTP ``DELETE``)."""
    kind = "sse" if transport == "sse" else "http"
    home = tmp_path / "home"
    async with _everything_over(transport) as (url, output):
        words = ("add", "--transport", kind, "every", url)
        assert main(["--data-dir", str(home), "mcp", *words]) == 0
        line = await _mcp_test(home, "every")
        assert line.startswith(f"every  {kind}") and EVERYTHING_LISTED in line, line

        async with serving(tmp_path, "--mode", "auto", model="offline") as server:
            offered = sse("every", url) if kind == "sse" else http("every", url)
            sid = await _session(server, offered, _everything_calls())
            assert results(server.log(sid)) == EVERYTHING_ANSWERS
            assert not _nodes(_descendants(server.process.pid))
            await server.conn.close_session(session_id=sid)
            closed = "Client Disconnected" if kind == "sse" else "session termination request"
            await output.says(closed, within=10.0)


async def test_filesystem_over_stdio_reads_inside_its_directory_only(tmp_path: Path) -> None:
    script = _package("@modelcontextprotocol/server-filesystem")
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "notes.txt").write_text("buy milk\n")
    (tmp_path / "secret.txt").write_text("hidden\n")
    mark = uuid.uuid4().hex
    home = tmp_path / "home"
    words = ("add", "-e", f"{MARK}={mark}", "files", "--", "node", script, str(allowed))
    assert main(["--data-dir", str(home), "mcp", *words]) == 0
    line = await _mcp_test(home, "files")
    assert line.startswith("files  stdio"), line
    assert "ok: 14 tool(s): read_file, read_text_file, read_media_file," in line, line
    assert not _marked(mark)  # stopped before the command ends

    async with serving(tmp_path, "--mode", "auto", model="offline") as server:
        prompts = [
            call("mcp__files__read_text_file", path=str(allowed / "notes.txt")),
            call("mcp__files__read_text_file", path=str(tmp_path / "secret.txt")),
        ]
        sid = await _session(server, _node("files", mark, script, str(allowed)), prompts)
        inside, outside = results(server.log(sid))
        assert inside == ("mcp__files__read_text_file", "buy milk\n", False)
        assert outside[2] and "Access denied - path outside allowed directories" in outside[1]
        assert "hidden" not in outside[1]
        await _owned_then_gone(server, sid, mark)
