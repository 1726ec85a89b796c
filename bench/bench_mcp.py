"""MCP server benchmarks, in process through the default composition; prints its figures.

Usage: python bench/bench_mcp.py [--rounds N] [--sessions N] [--server raw|sdk]

Targets: a stdio server's tool call round trip through tether (the tool
pipeline: arguments checked against the server's schema, the call, the
result rendered) costs at most 2 ms more than the bare SDK client's
``call_tool`` against the same server (medians, interleaved); ten sessions,
each with its own stdio server, go from spawn to all ready (initialized,
tools listed, registered) in at most 1.5 s; disposing a session stops its
server process within 100 ms.

``--server raw`` (the default) uses ``tests/mcp_client/raw_server.py --good``, a
server of a few lines of standard library that starts in milliseconds, so
the figures are tether's; ``--server sdk`` uses the SDK's MCPServer test server,
whose own start (importing the SDK) dominates the spawn figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SERVERS = {
    "raw": [str(ROOT / "tests" / "mcp_client" / "raw_server.py"), "--good"],
    "sdk": [str(ROOT / "tests" / "mcp_client" / "sdk_server.py")],
}
TOOL = {"raw": ("bad", {}), "sdk": ("echo", {"text": "hi"})}


async def bare_client(
    argv: list[str],
    tool: str,
    arguments: dict[str, Any],
    asks: asyncio.Queue[bool],
    answers: asyncio.Queue[float],
) -> None:
    """The bare SDK client: for each ``True`` in ``asks``, one call, its seconds put in
    ``answers`` (``False`` ends it). One task, as the SDK's task groups need."""
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=argv)
    async with Client(stdio_client(params), cache=None) as client:
        session = client.session
        await session.list_tools()
        while await asks.get():
            start = time.perf_counter()
            await session.call_tool(tool, arguments)
            answers.put_nowait(time.perf_counter() - start)


async def main(rounds: int, sessions: int, server: str) -> None:
    from tether.host import Tether
    from tether.mcp.plugin import MCP
    from tether.mcp.servers import StdioServer
    from tether.tools.registry import TOOLS

    argv = SERVERS[server]
    spec = StdioServer(name="bench", command=sys.executable, args=tuple(argv))
    home = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    os.environ["TETHER_HOME"] = str(home)
    async with Tether(data_dir=home) as tether:
        mcp, tools = tether.runtime.ctx.get(MCP), tether.runtime.ctx.get(TOOLS)
        assert mcp is not None and tools is not None

        async def session() -> Any:
            return await tether.agents.create(cwd=str(home), setup=lambda a: _attach(mcp, a, spec))

        handle = await session()
        await round_trip(handle.agent, tools, argv, *TOOL[server], rounds=rounds)

        pid = mcp.connections(handle.agent)[0].pid
        assert pid is not None
        start = time.perf_counter()
        await handle.dispose()
        # dispose() returns once the server's process has exited and its group is gone.
        assert not _alive(pid)
        print(f"dispose of a session -> its server process gone: {_ms(start):.1f} ms")

        start = time.perf_counter()
        handles = await asyncio.gather(*(session() for _ in range(sessions)))
        assert all(len(mcp.connections(h.agent)) == 1 for h in handles)
        print(
            f"{sessions} sessions with their own {server} stdio server, spawn -> all ready: "
            f"{_ms(start):.0f} ms"
        )
        start = time.perf_counter()
        await asyncio.gather(*(h.dispose() for h in handles))
        print(f"disposing those {sessions} sessions: {_ms(start):.0f} ms")


async def round_trip(
    agent: Any, tools: Any, argv: list[str], tool: str, arguments: dict[str, Any], *, rounds: int
) -> None:
    """Median call through tether's pipeline and through the bare SDK client, interleaved."""
    from tether.content import ToolCallBlock
    from tether.runtime import CancelSignal
    from tether.tools.definition import ToolExec

    asks: asyncio.Queue[bool] = asyncio.Queue()
    answers: asyncio.Queue[float] = asyncio.Queue()
    bare = asyncio.ensure_future(bare_client(argv, tool, arguments, asks, answers))
    ours, theirs = [], []
    for index in range(rounds + 20):  # the first 20 of each warm up
        call = ToolCallBlock(id=f"c{index}", name=f"mcp__bench__{tool}", arguments=arguments)
        exec = ToolExec.for_call(call.id, CancelSignal(), agent)
        start = time.perf_counter()
        result = await tools.execute(call, exec)
        elapsed = time.perf_counter() - start
        assert not result.is_error, result.content
        asks.put_nowait(True)
        other = await answers.get()
        if index >= 20:
            ours.append(elapsed)
            theirs.append(other)
    asks.put_nowait(False)
    await bare
    tether_ms, bare_ms = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
    print(
        f"round trip ({rounds} calls, median): tether {tether_ms:.3f} ms, "
        f"bare SDK client {bare_ms:.3f} ms, overhead {tether_ms - bare_ms:+.3f} ms"
    )


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1e3


async def _attach(mcp: Any, agent: Any, spec: Any) -> None:
    problems = await mcp.attach(agent, [spec])
    assert not problems, problems


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--server", choices=sorted(SERVERS), default="raw")
    options = parser.parse_args()
    asyncio.run(main(options.rounds, options.sessions, options.server))
