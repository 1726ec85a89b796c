"""``tether drain HOST``: hand a host's live sessions to other hosts, from any host.

The request goes through the database (a ``NOTIFY`` on the control channel,
:meth:`~tether.persist.cluster.Cluster.drain`): every ``tether worker`` whose
host id is ``HOST`` (or the one process ``HOST:PID``) drains: it takes no new
run, lets the turns under way end within ``--grace`` seconds, stops the
others with cause ``handoff``, writes each one's hand-off record, releases
its lease and queues the run again, so another worker goes on with it at
once; then it exits (see :mod:`tether.cli.worker`). The command then
follows the host's live sessions in the database until none is left, for at
most the grace period and :data:`SETTLE` seconds more (``--no-wait``:
return once the request is sent).

Exit status: 0 the host holds no live session (any more), 1 it still does
when the wait ends, or no lease or run ever named it, or the database cannot
be used; 2 a bad argument.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import TYPE_CHECKING

from tether.cli.boot import UsageError, start

if TYPE_CHECKING:
    from tether.persist.cluster import Cluster

EXIT_OK = 0
EXIT_NOT_DRAINED = 1

SETTLE = 30.0
"""How long past the grace period the command waits for the host to let its sessions go."""

LOOK_AGAIN = 0.2
"""How often the command reads how many sessions the host still has live, in seconds."""


async def drain(args: argparse.Namespace) -> int:
    """``tether drain HOST [--grace S] [--no-wait]``."""
    from tether.cli.worker import cluster_of

    host = args.host.strip()
    if not host or any(ch.isspace() for ch in host):
        raise UsageError(f"drain: not a host id: {args.host!r}")
    tether = await start(args, with_model=False)
    try:
        cluster = cluster_of(tether)
        held = await asyncio.to_thread(cluster.held_by, host)
        if held is None:
            print(f"tether: no lease or run ever named host {host}", file=sys.stderr)
            return EXIT_NOT_DRAINED
        await cluster.drain(host, args.grace)
        print(f"host {host}: asked to drain ({held} live session(s))", file=sys.stderr)
        if args.no_wait:
            return EXIT_OK
        return await _follow(cluster, host, deadline=time.monotonic() + args.grace + SETTLE)
    finally:
        await tether.stop()


async def _follow(cluster: Cluster, host: str, *, deadline: float) -> int:
    """Wait until ``host`` has no live session, or ``deadline`` passes; say which."""
    while True:
        held = await asyncio.to_thread(cluster.held_by, host) or 0
        if held == 0:
            print(f"host {host}: drained, no live session left", file=sys.stderr)
            return EXIT_OK
        if time.monotonic() >= deadline:
            print(
                f"tether: host {host} still has {held} live session(s); is a worker "
                "listening there? (only `tether worker` drains)",
                file=sys.stderr,
            )
            return EXIT_NOT_DRAINED
        await asyncio.sleep(LOOK_AGAIN)
