"""``tether acp``: serve one editor over the Agent Client Protocol on stdio.

The process's stdio becomes the protocol (stdout carries frames only; logs go
to stderr). ``initialize`` is answered straight away; tether — the default
composition plus the ACP bridge plugin — boots right after, and session
methods wait for it. tether never serves unpersisted: when sessions cannot
be stored (see :func:`tether.cli.boot.check_persistence`) the reason goes to
stderr and the process exits 1. The server runs until stdin reaches end of
file (or a signal, or the bridge plugin is torn down), then:

1. the bridge's teardown disposes every session it opened — agents cancelled,
   their logs flushed, nothing left registered — including sessions still
   being created;
2. requests being answered get their answers (a prompt: ``cancelled``);
3. tether stops (every plugin unloads, persistence drains to disk);
4. the connection closes and the process exits — 0, or 1 if tether could not
   start — at once, without the interpreter's teardown (see :func:`exit_now`).

SIGTERM and SIGHUP are handled like Ctrl-C in a terminal: every session's
work is cancelled first (cause ``user``, so turns close ``aborted {user}``),
then the teardown above runs and the process exits 143 or 129. SIGINT is a
disconnect.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from tether.acp.auth import ModelAuth, model_auth
from tether.acp.handshake import early_initialize
from tether.acp.source import LaunchedBridge
from tether.acp.stdio import claim_stdio
from tether.acp.transport import FrameTransport
from tether.acp.v2.handshake import speaks_v2
from tether.cli.ending import TERMINATING
from tether.cli.process import exit_now
from tether.fence import environ

if TYPE_CHECKING:
    from tether.acp.bridge import Bridge
    from tether.acp.rpc import AgentConnection
    from tether.acp.server import AcpServer
    from tether.host import Tether

log = logging.getLogger(__name__)

ANSWER_GRACE = 1.0
"""Seconds the shutdown waits for requests in progress to be answered."""


class Boot(LaunchedBridge["Tether"]):
    """Boots tether and mounts the bridge, once, on first demand (a :class:`BridgeSource`)."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__("tether-boot")
        self._args = args
        self._switching = asyncio.Lock()

    async def signed_in(self) -> None:
        """A key was signed in: once tether is up, it uses the key, and new sessions the
        model it makes usable (see :mod:`tether.cli.acp_model`); a boot that failed
        is left as it is (session requests say why).

        Raises:
            ModelSwitchError: that model could not be set up.
        """
        task = self._task
        if task is None:
            return
        await asyncio.wait({task})
        if self.ready() is None:
            return  # Session requests say why tether did not start.
        from tether.cli.acp_model import use_signed_in_model

        tether, bridge = task.result()
        async with self._switching:
            model = await use_signed_in_model(tether, bridge, self._args)
        if model is not None:
            log.info("signed in: new sessions use %s", model)

    async def refused(self) -> None:
        """Return if the boot refused to start (sessions could not be stored); else never."""
        from tether.cli.failures import StartRefusedError

        await self._started.wait()
        assert self._task is not None
        await asyncio.wait({self._task})
        if self._task.cancelled() or not isinstance(self._task.exception(), StartRefusedError):
            await asyncio.get_running_loop().create_future()

    async def _stop(self, owner: Tether) -> None:
        await owner.stop()

    async def _launch(self) -> tuple[Tether, Bridge]:
        from tether.acp import bridge as bridge_plugin
        from tether.cli.boot import start

        args = self._args
        from tether.cli.failures import StartRefusedError

        try:
            # stderr is the editor's log: the offline fallback is said to the
            # editor (its auth methods), not there.
            tether = await start(args, model=args.model, persistent=True, notice=False)
        except StartRefusedError as exc:
            print(f"tether: {exc}", file=sys.stderr, flush=True)
            raise
        except Exception as exc:
            log.error("tether failed to start: %s", exc)
            raise
        try:
            config = {
                "mode": args.mode,
                "title_model": args.title_model,
                "permission_timeout": args.permission_timeout,
                "terminal": getattr(args, "terminal", "local"),
            }
            fiber = tether.runtime.ctx.plugin(bridge_plugin, config, label="acp")
            await fiber
            bridge = tether.runtime.ctx.get(bridge_plugin.ACP)
            if bridge is None:
                raise RuntimeError("the ACP bridge plugin did not start (see the log above)")
        except BaseException:
            await tether.stop()
            raise
        return tether, bridge


async def _answer_initialize(
    first: dict[str, Any], transport: FrameTransport, boot: Boot, auth: ModelAuth, *, images: bool
) -> object:
    """Answer ``first`` at once if it is a well-formed ``initialize``, and start the boot
    (unless the model's key is missing); else give it back for the connection to answer.

    Returns the client's capabilities from that ``initialize`` (``None`` without one).
    """
    params = first.get("params")
    capabilities = params.get("clientCapabilities") if isinstance(params, dict) else None
    methods = auth.advertise(capabilities) if first.get("method") == "initialize" else ()
    answer = early_initialize(first, images=images, auth_methods=methods)
    if answer is None:
        transport.unread(first)
        return None
    transport.write(answer)
    # Out before the imports that follow block the loop for most of a second.
    await transport.drain()
    if auth.missing is None:
        boot.start()
    return capabilities


async def _connect(
    first: dict[str, Any], transport: FrameTransport, boot: Boot, auth: ModelAuth, *, images: bool
) -> tuple[AcpServer, AgentConnection]:
    """Answer ``first`` if it is an ``initialize`` (see :func:`_answer_initialize`), and
    the server and connection of the protocol version it negotiates: version 2 when it
    asks for exactly that (:mod:`tether.acp.v2`), else version 1."""
    if speaks_v2(first):
        from tether.acp.v2 import handshake

        transport.write(handshake.early_initialize(first, images=images))
        await transport.drain()
        if auth.missing is None:
            boot.start()
        from tether.acp.protocols import connect

        return connect(boot, transport, version=2, images=images, auth=auth)
    capabilities = await _answer_initialize(first, transport, boot, auth, images=images)
    from tether.acp.protocols import connect

    return connect(
        boot, transport, version=1, images=images, auth=auth, client_capabilities=capabilities
    )


def run_acp(args: argparse.Namespace) -> NoReturn:
    """``tether acp``: :func:`serve`, then :func:`exit_now` with its status."""
    exit_now(asyncio.run(serve(args)))


async def serve(args: argparse.Namespace) -> int:
    """Serve the client on stdio until it goes away; returns the exit status."""
    streams = await claim_stdio()
    transport = FrameTransport(streams.reader, streams.writer)
    boot = Boot(args)
    # Without the model's key tether does not boot; the editor is told what to set.
    auth = model_auth(args.model, environ())
    first = await transport.receive()
    if first is None:
        return 0
    server, connection = await _connect(first, transport, boot, auth, images=args.images)
    loop = asyncio.get_running_loop()
    listening = loop.create_task(connection.listen(), name="acp-receive")
    bridge_closed = loop.create_task(boot.bridge_closed(), name="acp-bridge-closed")
    refused = loop.create_task(boot.refused(), name="acp-boot-refused")
    terminated: list[int] = []

    def terminate(signum: int) -> None:
        terminated.append(signum)
        bridge = boot.ready()
        if bridge is not None:
            bridge.cancel_all()
        listening.cancel()

    loop.add_signal_handler(signal.SIGINT, listening.cancel)
    for signum in TERMINATING:
        loop.add_signal_handler(signum, terminate, signum)
    watched = (listening, bridge_closed, refused)
    try:
        await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for signum in (signal.SIGINT, *TERMINATING):
            loop.remove_signal_handler(signum)
        try:
            await boot.shutdown()
            await server.settle(ANSWER_GRACE)
        finally:
            for task in watched:
                task.cancel()
            await asyncio.gather(*watched, return_exceptions=True)
            await connection.close()
    if terminated:
        return 128 + terminated[0]
    return 1 if boot.failed else 0
