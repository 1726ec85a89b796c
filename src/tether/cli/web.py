"""``tether web``: serve the web app and its API on this machine (see docs/web.md).

tether boots as ``tether acp`` boots it — the same composition, plugins and
persistence, and it never serves unpersisted — with the ``web`` plugin
mounted (:mod:`tether.web.hub`), then serves the app with uvicorn on
``--host``/``--port`` (``127.0.0.1``, an OS-chosen port by default). The URL
to open, holding a fresh access token, is the one line on stdout; a host
that is not a loopback address is warned about on stderr.

Start-up (a measured target, see docs/web.md): the HTTP stack (uvicorn,
Starlette) is imported in a worker thread while tether boots, so its import
runs while the boot waits on storage; nothing it imports is tether's, so the
two never wait on each other's modules.

``/acp`` serves ACP clients on other machines (:mod:`tether.acp.endpoint`;
docs/editors.md, "ACP over the network").

Ctrl-C, SIGTERM or SIGHUP: the ACP clients' connections end (each closes the
sessions it opened and answers its requests still open, as ``tether acp`` does
when its editor goes away), then uvicorn stops taking requests and closes the
streams (within :data:`GRACE` seconds; a second Ctrl-C at once), then tether
stops — every session the web app opened is disposed, its closing events on
disk — and the process exits 128 + the number of the signal that stopped it
(130 for Ctrl-C, 143 for SIGTERM), as every command stopped by one does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import signal
import socket
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, NoReturn

from tether.cli.ending import TERMINATING
from tether.cli.process import exit_now

if TYPE_CHECKING:
    import uvicorn
    from starlette.routing import BaseRoute

    from tether.acp.remote import RemoteConnections
    from tether.runtime import Context

GRACE = 2
"""Seconds uvicorn gives open requests (event streams) at shutdown."""

SERVER_MODULES = (
    "uvicorn",
    "uvicorn.protocols.http.auto",
    "uvicorn.protocols.websockets.auto",
    "uvicorn.lifespan.off",
    "uvicorn.loops.auto",
    "starlette.applications",
    "starlette.staticfiles",
)
"""The third-party modules serving the first page needs (imported beside the boot)."""


def run_web(args: argparse.Namespace) -> NoReturn:
    """``tether web``: :func:`serve`, then :func:`exit_now` with its status."""
    exit_now(asyncio.run(serve(args)))


def _import_server_stack() -> None:
    """Import :data:`SERVER_MODULES` (in a worker thread: see the module docs)."""
    import importlib

    for name in SERVER_MODULES:
        importlib.import_module(name)


async def _serve_until_stopped(
    server: uvicorn.Server, listener: socket.socket, connections: RemoteConnections
) -> list[int]:
    """Serve until a signal (see the module docs); the signals received."""
    stopped_by: list[int] = []
    stopping: list[asyncio.Task[None]] = []

    async def end_acp_clients_then_exit() -> None:
        # Their prompts are answered while their streams still stand; then the
        # streams end, so the server need not wait for them.
        try:
            await connections.close()
        finally:
            server.should_exit = True

    def stop(signum: int) -> None:
        stopped_by.append(signum)
        if not stopping:
            stopping.append(loop.create_task(end_acp_clients_then_exit()))
            return
        # A second Ctrl-C stops waiting for open streams.
        server.force_exit = signum == signal.SIGINT
        server.should_exit = True

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, *TERMINATING):
        loop.add_signal_handler(signum, stop, signum)
    try:
        await server.serve(sockets=[listener])
    finally:
        for signum in (signal.SIGINT, *TERMINATING):
            loop.remove_signal_handler(signum)
        # The network editors' sessions end as an editor's on stdio does.
        await connections.close()
        await asyncio.gather(*stopping, return_exceptions=True)
    return stopped_by


def _acp_connections(ctx: Context, args: argparse.Namespace) -> RemoteConnections:
    """The ACP clients of ``/acp`` (docs/editors.md, "ACP over the network")."""
    from tether.acp.remote import RemoteConnections

    return RemoteConnections(
        ctx,
        mode=args.mode,
        permission_timeout=args.permission_timeout,
        grace=args.acp_grace,
        images=getattr(args, "images", False),
    )


def _acp_routes(connections: RemoteConnections) -> list[BaseRoute]:
    from tether.acp.endpoint import AcpEndpoint

    return AcpEndpoint(connections).routes()


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost`` or a loopback address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def serve(args: argparse.Namespace) -> int:
    """Boot tether, mount the web plugin and serve until a signal; the exit status."""
    try:
        listener = socket.create_server((args.host, args.port), reuse_port=False)
    except OSError as exc:
        print(
            f"tether: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    from tether.cli.boot import composed_model, start

    stack = asyncio.ensure_future(asyncio.to_thread(_import_server_stack))
    try:
        tether = await start(args, model=args.model, persistent=True)
    finally:
        await stack
    import uvicorn

    class _Server(uvicorn.Server):
        """uvicorn's server without its signal handling: its handlers re-raise the
        signal after serving, which would end the process before tether stops."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    try:
        from tether.web import hub as web_plugin
        from tether.web.app import build_app
        from tether.web.security import new_token

        ctx = tether.runtime.ctx
        config = {"mode": args.mode, "permission_timeout": args.permission_timeout}
        await ctx.plugin(web_plugin, config, label="web")
        hub = ctx.get(web_plugin.WEB)
        if hub is None:
            print("tether: the web plugin did not start (see the log above)", file=sys.stderr)
            return 1
        token = new_token()
        connections = _acp_connections(ctx, args)
        app = build_app(
            ctx,
            hub,
            token,
            default_model=composed_model(tether),
            more_routes=_acp_routes(connections),
        )
        host, port = listener.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        if not is_loopback(args.host):
            print(
                f"tether: warning: serving on {args.host}, reachable from other machines; "
                "anyone with the URL below can run commands as you",
                file=sys.stderr,
            )
        print(f"http://{shown}:{port}/?token={token}", flush=True)
        server = _Server(
            uvicorn.Config(
                app,
                log_level="warning",
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=GRACE,
            )
        )
        stopped_by = await _serve_until_stopped(server, listener, connections)
        return 128 + stopped_by[0] if stopped_by else 0
    finally:
        listener.close()
        await tether.stop()
