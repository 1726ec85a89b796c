"""Plugin: what other hosts ask of the agents live on this one.

With the PostgreSQL backend, a cancel requested on any host
(``tether sessions cancel S``, :meth:`Cluster.cancel
<tether.persist.cluster.Cluster.cancel>`) reaches every host; the one where
the session's agent is live cancels it with cause ``user``. A session this
host lost to another host (its lease was taken over after it was paused or
cut off past its TTL) has its agent stopped: its appends can no longer be
stored, and the new owner closes the open turn. With another backend nothing
emits these notices and this plugin does nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tether.agent import CancelCause
from tether.agent.registry import AGENTS
from tether.persist.cluster import CANCEL_REQUESTED, TAKEN_OVER

if TYPE_CHECKING:
    from tether.runtime import Context

log = logging.getLogger(__name__)

name = "cluster"
inject = ("agents",)


async def apply(ctx: Context, config: None) -> None:
    agents = ctx.service(AGENTS)

    def cancel(session_id: str) -> None:
        agent = agents.get(session_id)
        if agent is not None:
            agent.cancel(CancelCause.USER)

    def taken_over(session_id: str, message: str) -> None:
        agent = agents.get(session_id)
        if agent is not None:
            log.warning("%s; its agent stops here", message)
            agent.cancel(CancelCause.USER)

    ctx.on(CANCEL_REQUESTED, cancel)
    ctx.on(TAKEN_OVER, taken_over)
