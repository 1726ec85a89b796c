"""Plugin: session logs in PostgreSQL, shared by many tether hosts.

Selected in the composition (``plugin: tether.persist.postgres``) or, for the
bundled composition, by setting ``TETHER_DATABASE_URL``. See
``docs/deploy.md`` for running several hosts on one database, and
:mod:`tether.persist.backends.postgres` for the fenced lease.

Besides the persistence service it provides ``ctx.cluster``
(:class:`~tether.persist.cluster.Cluster`): cancel a session live on any host,
and the doorbell that lets followers hear other hosts' appends. The listening
task, the doorbell task (it rings other hosts after each written batch,
outside the write's transaction) and the lease heartbeat belong to this
plugin's fiber: all stop when it unloads (the heartbeat with the backend,
after the writer drained).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Annotated

from msgspec import Meta

from tether.fence import environ
from tether.persist.follow import Doorbell
from tether.persist.service import PersistenceConfig, mount_persistence

if TYPE_CHECKING:
    from tether.runtime import Context

name = "persist_postgres"
inject = ("sessions",)
provides = ("persistence", "cluster")

POLL = 5.0
"""How often a follower reads again without a doorbell (a safety net: NOTIFY rings it)."""


class PostgresConfig(PersistenceConfig, frozen=True):
    """Where the database is, who this host is, and how long a lease lasts.

    Each unset value comes from the environment: ``url`` from
    ``TETHER_DATABASE_URL``, ``db_schema`` from ``TETHER_DATABASE_SCHEMA``
    (default ``tether``), ``host_id`` from ``TETHER_HOST_ID`` (default: the
    host name), ``lease_ttl_s`` from ``TETHER_LEASE_TTL`` (default 15).
    """

    url: str | None = None
    """A libpq connection URL (``postgresql://user@host:5432/db``) or ``key=value`` string."""
    db_schema: str | None = None
    """The schema holding tether's tables; hosts that share sessions name the same one."""
    host_id: str | None = None
    """This host's name in leases and in ``sessions list``; unique among the hosts."""
    lease_ttl_s: Annotated[float, Meta(gt=0, le=3600)] | None = None
    """How long a lease outlives its last renewal (renewed every third of it)."""
    pool_size: Annotated[int, Meta(ge=1, le=64)] = 4
    """Connections for writes and reads (the listener has one more)."""


Config = PostgresConfig


class MissingDatabaseError(ValueError):
    """No database URL was configured, or a setting from the environment is invalid."""


class DatabaseError(ConnectionError):
    """The database cannot be reached or set up; the message is one line."""


def _settings(config: PostgresConfig) -> tuple[str, str, str | None, float]:
    url = config.url or environ().get("TETHER_DATABASE_URL")
    if not url:
        raise MissingDatabaseError(
            "the PostgreSQL backend needs a database: set TETHER_DATABASE_URL (or its url option)"
        )
    schema = config.db_schema or environ().get("TETHER_DATABASE_SCHEMA") or "tether"
    host = config.host_id or environ().get("TETHER_HOST_ID") or None
    ttl = config.lease_ttl_s
    if ttl is None:
        raw = environ().get("TETHER_LEASE_TTL", "15")
        try:
            ttl = float(raw)
        except ValueError:
            raise MissingDatabaseError(f"TETHER_LEASE_TTL must be a number, got {raw!r}") from None
        if ttl <= 0:
            raise MissingDatabaseError(f"TETHER_LEASE_TTL must be positive, got {raw!r}")
    return url, schema, host, ttl


async def apply(ctx: Context, config: PostgresConfig) -> None:
    from tether.persist.backends.postgres import PostgresBackend
    from tether.persist.cluster import CLUSTER, Cluster

    url, schema, host, ttl = _settings(config)
    loop = asyncio.get_running_loop()
    doorbell = Doorbell()
    cluster: list[Cluster] = []

    def lost(session_id: str, new_host: str | None) -> None:
        # Called from the heartbeat or a writer thread.
        if cluster:
            loop.call_soon_threadsafe(cluster[0].taken_over, session_id, new_host)

    import psycopg

    try:
        backend = await asyncio.to_thread(
            PostgresBackend,
            url,
            schema=schema,
            host_id=host,
            lease_ttl=ttl,
            pool_size=config.pool_size,
            on_lease_lost=lost,
        )
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DatabaseError(f"the session database cannot be used: {first}") from None
    try:
        cluster.append(Cluster(ctx, backend, url, doorbell))
        await mount_persistence(
            ctx, backend, window=config.batch_window_ms / 1000, doorbell=doorbell, poll=POLL
        )
    except BaseException:
        await asyncio.to_thread(backend.close)
        raise

    from tether.persist.service import SESSION_WRITTEN

    async def listen():  # type: ignore[no-untyped-def]
        bell = cluster[0].bell
        tasks = [
            loop.create_task(cluster[0].run(), name="cluster-listen"),
            loop.create_task(bell.run(), name="cluster-bell"),
        ]

        async def stop() -> None:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

        yield stop
        # Each written batch rings the other hosts' doorbells, after its commit.
        yield ctx.listen(
            SESSION_WRITTEN, lambda session, durable: bell.committed(session.id, durable - 1)
        )
        ctx.provide(CLUSTER, cluster[0])

    await ctx.effect(listen, label="cluster")
