"""An MCP server written with the SDK (MCPServer), for the tests: ``python sdk_server.py
[stdio | http PORT | stateless PORT | sse PORT] [--legacy]``.

It speaks both generations of the protocol, as the SDK's server does: a client's
``server/discover`` gets the current one (2026-07-28), a client's ``initialize``
the 2025 one. ``stateless`` is streamable HTTP with no session (the current
specification's way); ``http`` keeps sessions; ``sse`` is the 2024 HTTP+SSE
transport. With ``--legacy`` it is a 2025-era server: ``server/discover`` is an
unknown method, as it is to every server written before 2026-07-28 (on stdio and
SSE it serves the SDK's handshake-only loop, over streamable HTTP it refuses
``server/discover``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from legacy_server import make_legacy  # beside this script
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

server = MCPServer("tests")


@server.tool()
def echo(text: str) -> str:
    """Answer with the text."""
    return f"echo: {text}"


@server.resource("notes://today", mime_type="text/plain")
def today() -> str:
    """Today's notes."""
    return "buy milk"


@server.resource("notes://logo", mime_type="image/png")
def logo() -> bytes:
    """A binary resource."""
    return b"\x89PNG1234"


@server.prompt()
def review(topic: str, tone: str = "plain") -> str:
    """Ask for a review of a topic."""
    return f"Review {topic} in a {tone} tone."


@server.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool()
def env(name: str) -> str:
    """The value of one environment variable (or <unset>)."""
    return os.environ.get(name, "<unset>")


@server.tool()
def traceparent(ctx: Context) -> str:  # type: ignore[type-arg]
    """The ``traceparent`` of this request's ``_meta`` (or <none>)."""
    meta = ctx.request_context.meta or {}
    return str(meta.get("traceparent", "<none>"))


@server.tool()
async def wait(seconds: float, marker: str = "") -> str:
    """Sleep asynchronously; write ``marker`` (a path) when done."""
    await asyncio.sleep(seconds)
    if marker:
        Path(marker).write_text("finished")  # noqa: ASYNC240
    return "waited"


@server.tool()
async def stuck(seconds: float) -> str:
    """Block the whole server for ``seconds`` (its event loop: the SDK runs a plain
    function in a worker thread, which would leave the server free)."""
    time.sleep(seconds)  # noqa: ASYNC251
    return "unstuck"


@server.tool()
def huge(size: int) -> str:
    """A text of ``size`` characters."""
    return "x" * size


PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c63000100000500010d0a2db40000000049454e44ae426082"
)


@server.tool()
def picture() -> Image:
    """A 1x1 PNG."""
    return Image(data=PNG_1X1, format="png")


@server.tool()
async def grow(name: str, ctx: Context) -> str:  # type: ignore[type-arg]
    """Add a tool ``name`` (answering its own name), remove ``huge``, and say the list
    changed (``notifications/tools/list_changed``)."""

    def added() -> str:
        return name

    server.add_tool(added, name=name, description=f"the tool {name}")
    server.remove_tool("huge")
    if ctx.session.protocol_version in MODERN_PROTOCOL_VERSIONS:
        await ctx.notify_tools_changed()  # to the client's subscriptions/listen stream
    else:
        await ctx.session.send_tool_list_changed()
    return f"grew {name}"


@server.tool()
async def swap_prompt(name: str, ctx: Context, description: str = "") -> str:  # type: ignore[type-arg]
    """Add a prompt ``name`` (taking ``subject``; described ``description``, by default
    "the prompt NAME"), remove ``review``, and say the prompt list changed
    (``notifications/prompts/list_changed``)."""

    def added(subject: str) -> str:
        return f"About {subject}."

    server.prompt(name=name, description=description or f"the prompt {name}")(added)
    server.remove_prompt("review")
    if ctx.session.protocol_version in MODERN_PROTOCOL_VERSIONS:
        await ctx.notify_prompts_changed()  # to the client's subscriptions/listen stream
    else:
        await ctx.session.send_prompt_list_changed()
    return f"swapped in {name}"


@server.tool()
def exit() -> str:
    """The process ends at once."""
    os._exit(7)


if __name__ == "__main__":
    if "--legacy" in sys.argv:
        sys.argv.remove("--legacy")
        make_legacy(server)
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        server.run("stdio")
    elif mode == "sse":
        server.run("sse", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run(
            "streamable-http",
            host="127.0.0.1",
            port=int(sys.argv[2]),
            stateless_http=mode == "stateless",
        )
