"""A `tether web` server inside the test's event loop, and a reader of its event stream."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import uvicorn

from tether.acp.endpoint import AcpEndpoint
from tether.acp.remote import RemoteConnections
from tether.host import Overlay, Tether
from tether.web import hub as web_plugin
from tether.web.app import build_app
from tether.web.hub import WebHub

TOKEN = "test-token-0123456789"


@dataclass
class Served:
    tether: Tether
    hub: WebHub
    base: str
    client: httpx.AsyncClient
    """Sends the token as a Bearer header."""
    connections: RemoteConnections | None = None
    """The ACP clients of ``/acp``, when it is served."""


@asynccontextmanager
async def served(
    data_dir: Path,
    *,
    mode: str = "auto",
    permission_timeout: float = 600.0,
    overlays: Sequence[Overlay] = (),
    acp_grace: float | None = None,
) -> AsyncIterator[Served]:
    """Tether (with ``overlays``) and the web plugin, its app served by uvicorn on a
    loopback port; with ``acp_grace``, ``/acp`` too (as ``tether web`` serves it)."""
    tether = await Tether(data_dir=data_dir, overlays=overlays).start()
    listener = socket.create_server(("127.0.0.1", 0))
    server: uvicorn.Server | None = None
    task: asyncio.Task[None] | None = None
    connections: RemoteConnections | None = None
    try:
        ctx = tether.runtime.ctx
        await ctx.plugin(
            web_plugin, {"mode": mode, "permission_timeout": permission_timeout}, label="web"
        )
        hub = ctx.get(web_plugin.WEB)
        assert hub is not None
        if acp_grace is not None:
            connections = RemoteConnections(
                ctx, mode=mode, permission_timeout=permission_timeout, grace=acp_grace
            )
        routes = [] if connections is None else AcpEndpoint(connections).routes()
        app = build_app(ctx, hub, TOKEN, default_model="offline", more_routes=routes)
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1
        )
        server = uvicorn.Server(config)
        task = asyncio.get_running_loop().create_task(server.serve(sockets=[listener]))
        while not server.started:  # uvicorn offers no event to await
            assert not task.done(), "the server did not start"
            await asyncio.sleep(0.005)
        port = listener.getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=20) as client:
            yield Served(tether, hub, base, client, connections)
    finally:
        if connections is not None:
            await connections.close()  # ends their streams, which the server would wait for
        if server is not None and task is not None:
            server.should_exit = True
            await task
        listener.close()
        await tether.stop()


@dataclass
class Stream:
    """What one connection to an event stream received."""

    records: list[dict[str, object]] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    states: list[dict[str, object]] = field(default_factory=list)


async def read_stream(
    client: httpx.AsyncClient,
    session_id: str,
    *,
    until: str | None = "turn/end",
    headers: dict[str, str] | None = None,
    after: int | None = None,
    stop_at_seq: int | None = None,
    until_state: bool = False,
) -> Stream:
    """Read session ``session_id``'s stream until a record of type ``until`` (or a seq
    ``stop_at_seq``, or the first state with a question) arrives, then disconnect."""
    got = Stream()
    params = {} if after is None else {"after": str(after)}
    url = f"/api/sessions/{session_id}/events"
    async with client.stream("GET", url, headers=headers, params=params) as response:
        assert response.status_code == 200, await response.aread()
        event = None
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[len("event: ") :]
            elif line.startswith("id: "):
                got.ids.append(int(line[4:]))
            elif line.startswith("data: "):
                data = json.loads(line[len("data: ") :])
                if event == "events":
                    got.records.extend(data)
                    if until is not None and any(r["type"] == until for r in data):
                        return got
                    if stop_at_seq is not None and data[-1]["seq"] >= stop_at_seq:
                        return got
                elif event == "state":
                    got.states.append(data)
                    if until_state and data["questions"]:
                        return got
    return got
