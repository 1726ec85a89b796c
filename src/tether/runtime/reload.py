"""Reload (hot module replacement) of plugin code, and the dev watcher on top.

``reload_row`` re-imports the module a row's plugin lives in, disposes every
live fiber whose plugin comes from that module, and mounts the new code under
the same parents with the same (raw) config. If the new module fails to import,
nothing is touched. If it imports but a fiber fails to start, the new fibers
are disposed, the old module is put back, and the old plugins are remounted.

Ownership never moves in a reload: state that must survive it lives in another
fiber's service or on disk, never in the reloaded module.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import msgspec

from tether.runtime.errors import ReloadError, RuntimeFault
from tether.runtime.fiber import Fiber, FiberState

if TYPE_CHECKING:
    from tether.runtime.compose import Composer

log = logging.getLogger(__name__)


def reimport(module_name: str) -> ModuleType:
    """Execute the current source of ``module_name`` into a fresh module object.

    ``sys.modules`` is not changed. The source is compiled directly, so a stale
    bytecode cache can never hand back the old code.

    Raises:
        ReloadError: the module has no source file, or its code raised.
    """
    current = sys.modules.get(module_name)
    spec = current.__spec__ if current is not None else importlib.util.find_spec(module_name)
    if spec is None or spec.origin is None or spec.loader is None:
        raise ReloadError(f"cannot reload {module_name!r}: it has no source file")
    try:
        source = Path(spec.origin).read_text(encoding="utf-8")
        module = importlib.util.module_from_spec(spec)
        code = compile(source, spec.origin, "exec")
        exec(code, module.__dict__)
    except Exception as exc:
        raise ReloadError(f"cannot reload {module_name!r}: {type(exc).__name__}: {exc}") from exc
    return module


class _Mount(msgspec.Struct, frozen=True):
    """How a fiber was mounted, to mount its plugin again from reloaded code."""

    parent: Fiber
    attr: str | None
    raw_config: object
    label: str | None


def _mounts_of(fibers: list[Fiber]) -> list[_Mount]:
    chosen = set(fibers)
    mounts = []
    for fiber in fibers:
        ancestor = fiber.parent
        while ancestor is not None and ancestor not in chosen:
            ancestor = ancestor.parent
        if ancestor is not None:
            continue  # remounted by its reloaded ancestor
        assert fiber.parent is not None and fiber.spec is not None
        mounts.append(_Mount(fiber.parent, fiber.spec.attr, fiber.raw_config, fiber.label))
    return mounts


def _mount_all(module: ModuleType, mounts: list[_Mount]) -> list[Fiber]:
    from tether.runtime.compose import lookup_attr

    fibers = []
    for mount in mounts:
        plugin = module if mount.attr is None else lookup_attr(module, mount.attr)
        fibers.append(mount.parent.ctx.plugin(plugin, mount.raw_config, label=mount.label))
    return fibers


async def reload_row(composer: Composer, row_id: str) -> None:
    """Reload the module behind ``row_id``; see the module docstring for the contract.

    Raises:
        ReloadError: the row is unknown or disabled, or the new code failed (the
            old code was restored).
    """
    from tether.runtime.compose import resolve_plugin

    try:
        state = composer.row(row_id)
    except RuntimeFault as exc:
        raise ReloadError(str(exc)) from None
    if state.row.disabled:
        raise ReloadError(f"row {row_id!r} is disabled; nothing to reload")
    try:
        resolved = resolve_plugin(state.row.plugin)
    except RuntimeFault as exc:
        raise ReloadError(f"row {row_id!r}: {exc}") from None
    old_module = resolved.module
    module_name = old_module.__name__
    new_module = reimport(module_name)

    runtime = composer.ctx.runtime
    old = [
        f
        for f in runtime.fibers
        if f.spec is not None
        and f.spec.module == module_name
        and f.state is not FiberState.DISPOSED
    ]
    mounts = _mounts_of(old)
    if state.fiber is None or state.fiber not in old:
        # The row's previous mount failed and left no fiber: mount it fresh.
        mounts.append(_Mount(composer.ctx.fiber, resolved.attr, state.row.config, row_id))
    await asyncio.gather(*(f.dispose() for f in old))

    sys.modules[module_name] = new_module
    new: list[Fiber] = []
    try:
        new = _mount_all(new_module, mounts)
        await asyncio.gather(*(f.settled() for f in new))
    except Exception as exc:
        await asyncio.gather(*(f.dispose() for f in new))
        sys.modules[module_name] = old_module
        restored = _mount_all(old_module, mounts)
        await asyncio.gather(*(f.settled() for f in restored), return_exceptions=True)
        _record_rows(composer, restored)
        raise ReloadError(
            f"reload of row {row_id!r} failed: {exc}; the previous code was restored"
        ) from exc
    _record_rows(composer, new)
    log.info("reloaded %s (%d fiber(s))", module_name, len(new))


def _canonical(paths: Iterable[str]) -> set[Path]:
    return {Path(os.path.realpath(path)) for path in paths}


def _record_rows(composer: Composer, fibers: list[Fiber]) -> None:
    for fiber in fibers:
        if fiber.parent is composer.ctx.fiber and fiber.label is not None:
            composer.adopt_fiber(fiber.label, fiber)


class DevWatcher:
    """Reloads rows when the source file of their plugin module changes (off by default)."""

    def __init__(self, composer: Composer, *, debounce_ms: int = 200) -> None:
        self._composer = composer
        self._debounce_ms = debounce_ms

    def _files(self) -> dict[Path, list[str]]:
        from tether.runtime.compose import resolve_plugin

        files: dict[Path, list[str]] = {}
        for state in self._composer.rows():
            if state.row.disabled:
                continue
            try:
                module = resolve_plugin(state.row.plugin).module
            except RuntimeFault:
                continue
            origin = getattr(module, "__file__", None)
            if origin:
                files.setdefault(Path(os.path.realpath(origin)), []).append(state.row.id)
        return files

    async def run(self, stop: asyncio.Event, ready: asyncio.Event | None = None) -> None:
        """Watch until ``stop`` is set; each change reloads the rows it concerns."""
        from watchfiles import awatch

        files = self._files()
        directories = sorted({str(path.parent) for path in files})
        if not directories:
            if ready is not None:
                ready.set()
            await stop.wait()
            return
        if ready is not None:
            ready.set()
        async for changes in awatch(
            *directories, stop_event=stop, debounce=self._debounce_ms, recursive=False
        ):
            touched = _canonical(path for _change, path in changes)
            for path in sorted(touched & files.keys()):
                for row_id in files[path]:
                    try:
                        await self._composer.reload(row_id)
                    except ReloadError as exc:
                        log.error("%s", exc)
            files = self._files()


async def watch(composer: Composer) -> None:
    """Start a :class:`DevWatcher` as an effect of the composer's fiber.

    The watch task is owned by that effect: unloading the fiber stops and
    awaits it.
    """

    async def body():  # type: ignore[no-untyped-def]
        stop = asyncio.Event()
        ready = asyncio.Event()
        task = asyncio.get_running_loop().create_task(
            DevWatcher(composer).run(stop, ready), name="dev-watcher"
        )

        async def halt() -> None:
            stop.set()
            await task

        yield halt
        await ready.wait()

    await composer.ctx.effect(body, label="dev-watcher")
