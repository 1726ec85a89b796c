"""Fibers: the live instances of plugins, and their state machine.

States::

    pending ──(all injected services present)──▶ loading ──▶ active
       ▲                                           │           │
       └──────(an injected service went away)──────┴── unloading ◀┘
    loading ──(apply raised: its registrations rolled back)──▶ failed
    any ──(dispose)──▶ unloading ──▶ disposed

Transitions of one fiber are serialized. Unloading withdraws the services the
fiber provides first — every fiber that injects one of them unloads, awaited —
and then disposes the fiber's other effects (its child fibers among them)
concurrently. ``await fiber.dispose()`` returns after all of that cleanup.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from tether.runtime.effects import Effect
from tether.runtime.errors import FiberInactiveError, PluginStartError

if TYPE_CHECKING:
    from tether.runtime.app import Runtime
    from tether.runtime.context import Context
    from tether.runtime.plugin import PluginSpec

log = logging.getLogger(__name__)

EventFilter = Callable[[str, tuple[object, ...]], bool]
"""Decides whether a scope's listener hears one dispatch of an event (name, args)."""


class FiberState(enum.StrEnum):
    PENDING = "pending"
    LOADING = "loading"
    ACTIVE = "active"
    UNLOADING = "unloading"
    DISPOSED = "disposed"
    FAILED = "failed"


class Fiber:
    """One instance of a plugin, owned by its parent fiber (the root has none).

    Await a fiber to wait until its current load settles: it returns the fiber
    when it is active or pending, and raises :class:`PluginStartError` when the
    plugin's ``apply`` failed.
    """

    def __init__(
        self,
        runtime: Runtime,
        parent: Fiber | None,
        spec: PluginSpec | None,
        config: Any,
        *,
        raw_config: object = None,
        label: str | None = None,
        reads: tuple[str, ...] = (),
        event_filter: EventFilter | None = None,
    ) -> None:
        from tether.runtime.context import Context

        self.runtime = runtime
        self.parent = parent
        self.spec = spec
        self.config = config
        self.raw_config = raw_config
        """The config as given at mount, before validation: what a reload remounts with."""
        self.label = label
        self.event_filter = event_filter
        """For a scope: which dispatches its listeners hear (see ``Runtime.scope``)."""
        self._reads = reads
        self.state = FiberState.PENDING
        self.error: BaseException | None = None
        self.ctx: Context = Context(self)
        self._effects: dict[Effect, bool] = {}
        """Live effects in registration order; the flag marks service provisions."""
        self._lock = asyncio.Lock()
        self._load_task: asyncio.Task[None] | None = None
        self._dispose_task: asyncio.Task[None] | None = None
        self._anchor: Effect | None = None

    @property
    def name(self) -> str:
        return self.spec.name if self.spec is not None else "root"

    @property
    def inject(self) -> tuple[str, ...]:
        """The services this fiber may read as ``ctx.<name>``.

        For a plugin fiber these are its dependencies; a scope (no plugin) only
        reads them, its owner having made sure they exist.
        """
        return self.spec.inject if self.spec is not None else self._reads

    def __repr__(self) -> str:
        label = f" {self.label!r}" if self.label else ""
        return f"<Fiber {self.name}{label} {self.state}>"

    # -- effects ---------------------------------------------------------------

    @property
    def accepts_effects(self) -> bool:
        """True while registrations may be added: loading or active."""
        return self.state in (FiberState.LOADING, FiberState.ACTIVE)

    def check_accepts_effects(self, what: str) -> None:
        """Raise :class:`FiberInactiveError` unless the fiber is loading or active."""
        if not self.accepts_effects:
            raise FiberInactiveError(
                f"cannot register {what} on plugin {self.name!r}: its fiber is {self.state}"
            )

    def adopt(self, effect: Effect, *, service: bool = False) -> None:
        """Make ``effect`` owned by this fiber; it is disposed when the fiber unloads."""
        self.check_accepts_effects(f"effect {effect.label!r}")
        self._effects[effect] = service
        effect._detach = self._forget

    def _forget(self, effect: Effect) -> None:
        self._effects.pop(effect, None)

    async def _dispose_effects(self) -> None:
        services = [e for e, is_service in self._effects.items() if is_service]
        await asyncio.gather(*(e.dispose() for e in services))
        others = list(self._effects)
        await asyncio.gather(*(e.dispose() for e in others))
        # Effects adopted while the others were unwinding cannot exist: adoption
        # requires loading/active, and the state is already past both.
        assert not self._effects, self._effects

    # -- loading ---------------------------------------------------------------

    def missing_services(self) -> list[str]:
        """The services this fiber waits for: each injected one not provided,
        and each ``optional`` one not provided that another fiber declares it
        provides and is still pending or loading."""
        services = self.runtime.services
        missing = [name for name in self.inject if not services.has(name)]
        if self.spec is not None:
            missing += [
                name
                for name in self.spec.optional
                if not services.has(name) and self.runtime.promised(name, besides=self)
            ]
        return missing

    @property
    def unsettled(self) -> bool:
        """True while the fiber may still load: pending, or loading."""
        return self.state in (FiberState.PENDING, FiberState.LOADING)

    def start(self) -> None:
        """Begin loading if every injected service is present (else stay pending)."""
        if self.state is not FiberState.PENDING or self._load_task is not None:
            return
        self._load_task = asyncio.get_running_loop().create_task(
            self._load(), name=f"load:{self.name}"
        )

    async def _load(self) -> None:
        try:
            async with self._lock:
                if self.state is not FiberState.PENDING or self.missing_services():
                    return
                assert self.spec is not None
                self.state = FiberState.LOADING
                self.error = None
                try:
                    await self.spec.apply(self.ctx, self.config)
                except BaseException as exc:
                    self.state = FiberState.UNLOADING
                    await self._dispose_effects()
                    if isinstance(exc, asyncio.CancelledError):
                        self.state = FiberState.PENDING
                        raise
                    self.state = FiberState.FAILED
                    self.error = exc
                    log.error("plugin %r failed to start: %s", self.name, exc)
                    self._release_waiters()
                    if not isinstance(exc, Exception):
                        raise
                    return
                self.state = FiberState.ACTIVE
                self._release_waiters()
        finally:
            self._load_task = None

    def _release_waiters(self) -> None:
        """The fiber settled or went: those waiting for what it promised re-check."""
        if self.spec is not None:
            for name in self.spec.provides:
                for fiber in self.runtime.fibers_waiting_for(name):
                    fiber.start()

    async def settled(self) -> Fiber:
        """Wait until no load is in flight; return ``self`` or raise if apply failed.

        Raises:
            PluginStartError: the plugin's ``apply`` raised (chained to its error).
        """
        task = self._load_task
        if task is not None:
            await asyncio.wait({task})
        if self.state is FiberState.FAILED:
            raise PluginStartError(f"plugin {self.name!r} failed to start: {self.error}") from (
                self.error
            )
        return self

    def __await__(self) -> Generator[Any, None, Fiber]:
        return self.settled().__await__()

    async def _stop_loading(self) -> None:
        task = self._load_task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.wait({task})

    # -- unloading -------------------------------------------------------------

    async def suspend(self) -> None:
        """Unload because an injected service went away; the fiber becomes pending."""
        await self._stop_loading()
        async with self._lock:
            if self.state is not FiberState.ACTIVE:
                return
            self.state = FiberState.UNLOADING
            await self._dispose_effects()
            self.state = FiberState.PENDING

    def dispose(self) -> asyncio.Future[None]:
        """Unload for good; memoized: every call awaits the same single teardown."""
        if self._dispose_task is None:
            self._dispose_task = asyncio.get_running_loop().create_task(
                self._dispose(), name=f"dispose-fiber:{self.name}"
            )
        return asyncio.shield(self._dispose_task)

    async def _dispose(self) -> None:
        await self._stop_loading()
        async with self._lock:
            self.state = FiberState.UNLOADING
            await self._dispose_effects()
            self.state = FiberState.DISPOSED
        self.runtime.forget(self)
        self._release_waiters()
        if self._anchor is not None:
            # The parent no longer needs to dispose this child.
            self._anchor.discard()
