"""Plugin: session logs as one JSONL file per session (the embedded default).

See ``docs/sessions.md`` for the file format and the durability guarantee.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.location import data_dir
from tether.persist.backends.jsonl import JsonlBackend
from tether.persist.service import PersistenceConfig, mount_persistence

if TYPE_CHECKING:
    from tether.runtime import Context

name = "persist_jsonl"
inject = ("sessions",)
provides = ("persistence",)
Config = PersistenceConfig


async def apply(ctx: Context, config: PersistenceConfig) -> None:
    backend = JsonlBackend(data_dir(config.data_dir))
    await mount_persistence(ctx, backend, window=config.batch_window_ms / 1000)
