"""Plugin: session logs in one SQLite database (WAL, ``synchronous=FULL``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.location import data_dir
from tether.persist.backends.sqlite import SqliteBackend
from tether.persist.service import PersistenceConfig, mount_persistence

if TYPE_CHECKING:
    from tether.runtime import Context

name = "persist_sqlite"
inject = ("sessions",)
provides = ("persistence",)
Config = PersistenceConfig


async def apply(ctx: Context, config: PersistenceConfig) -> None:
    backend = SqliteBackend(data_dir(config.data_dir))
    await mount_persistence(ctx, backend, window=config.batch_window_ms / 1000)
