"""An MCP server written with the SDK (FastMCP), for the tests: ``python sdk_server.py
[stdio | http PORT | sse PORT]``.

Tools: ``echo``, ``pid`` (its process id), ``env`` (one variable), ``traceparent``
(the ``traceparent`` of the request's ``_meta``), ``wait``
(sleeps asynchronously: honours cancellation), ``grow`` (adds a tool,
removes ``huge`` and sends ``tools/list_changed``), ``stuck`` (blocks the whole
server: cannot honour it), ``huge`` (a long text), ``exit`` (the process
exits at once).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from mcp.server.fastmcp import Context, FastMCP, Image

server = FastMCP("tests")


@server.tool()
def echo(text: str) -> str:
    """Answer with the text."""
    return f"echo: {text}"


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
    meta = ctx.request_context.meta
    extra = (meta.model_extra or {}) if meta is not None else {}
    return str(extra.get("traceparent", "<none>"))


@server.tool()
async def wait(seconds: float, marker: str = "") -> str:
    """Sleep asynchronously; write ``marker`` (a path) when done."""
    await asyncio.sleep(seconds)
    if marker:
        Path(marker).write_text("finished")  # noqa: ASYNC240
    return "waited"


@server.tool()
def stuck(seconds: float) -> str:
    """Block the whole server for ``seconds``."""
    time.sleep(seconds)
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
    await ctx.session.send_tool_list_changed()
    return f"grew {name}"


@server.tool()
def exit() -> str:
    """The process ends at once."""
    os._exit(7)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        server.run("stdio")
    else:
        server.settings.host = "127.0.0.1"
        server.settings.port = int(sys.argv[2])
        server.run("streamable-http" if mode == "http" else "sse")
