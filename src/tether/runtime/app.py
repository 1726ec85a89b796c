"""The runtime: the root fiber, the event bus, the service registry."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TYPE_CHECKING

from tether.runtime.effects import Effect
from tether.runtime.events import EventBus
from tether.runtime.fiber import EventFilter, Fiber, FiberState
from tether.runtime.plugin import plugin_spec
from tether.runtime.services import ServiceRegistry

if TYPE_CHECKING:
    from tether.runtime.context import Context


class Runtime:
    """A tree of plugin fibers under one root.

    Use it as an async context manager, or call :meth:`dispose` when done::

        async with Runtime() as runtime:
            await runtime.ctx.plugin(my_plugin, {"option": 1})
    """

    def __init__(self) -> None:
        self.events = EventBus()
        self.services = ServiceRegistry(self)
        self._fibers: dict[Fiber, None] = {}
        self.root = Fiber(self, None, None, None, label="root")
        self.root.state = FiberState.ACTIVE

    @property
    def ctx(self) -> Context:
        """The root context; plugins mounted through it are top-level."""
        return self.root.ctx

    @property
    def fibers(self) -> list[Fiber]:
        """Every fiber that is not disposed, in mount order (the root excluded)."""
        return list(self._fibers)

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.dispose()

    async def dispose(self) -> None:
        """Unload every plugin; returns after all of their async cleanup."""
        await self.root.dispose()

    def mount(self, parent: Fiber, plugin: object, config: object, *, label: str | None) -> Fiber:
        """Create a child fiber of ``parent`` and start it (see ``Context.plugin``)."""
        spec = plugin_spec(plugin)
        validated = spec.validate_config(config)
        parent.check_accepts_effects(f"plugin {spec.name!r}")
        fiber = Fiber(self, parent, spec, validated, raw_config=config, label=label)
        anchor = Effect(f"plugin:{spec.name}")
        anchor.push(fiber.dispose)
        parent.adopt(anchor)
        fiber._anchor = anchor
        self._fibers[fiber] = None
        fiber.start()
        return fiber

    def scope(
        self,
        parent: Fiber,
        label: str,
        *,
        reads: tuple[str, ...] = (),
        event_filter: EventFilter | None = None,
    ) -> Fiber:
        """Create an active fiber with no plugin, owned by the caller, not by ``parent``.

        A scope groups registrations made on behalf of one thing (an agent) so
        they unwind together when the caller disposes it; ``parent`` is only its
        place in the tree. It may read the services named in ``reads`` and does
        not react to them going away (its owner does). With ``event_filter``,
        listeners registered through the scope hear only the dispatches the
        filter accepts.
        """
        fiber = Fiber(self, parent, None, None, label=label, reads=reads, event_filter=event_filter)
        fiber.state = FiberState.ACTIVE
        self._fibers[fiber] = None
        return fiber

    def forget(self, fiber: Fiber) -> None:
        self._fibers.pop(fiber, None)

    def fibers_waiting_for(self, name: str) -> list[Fiber]:
        """Pending fibers that inject ``name`` or wait for it as ``optional``."""
        return [
            f
            for f in self._fibers
            if f.spec is not None
            and f.state is FiberState.PENDING
            and (name in f.inject or name in f.spec.optional)
        ]

    def promised(self, name: str, *, besides: Fiber) -> bool:
        """True when a fiber other than ``besides`` declares it provides ``name``
        and may still load (pending or loading)."""
        return any(
            f is not besides and f.spec is not None and name in f.spec.provides and f.unsettled
            for f in self._fibers
        )

    def fibers_injecting(self, name: str) -> list[Fiber]:
        return [
            f
            for f in self._fibers
            if f.spec is not None
            and name in f.inject
            and f.state in (FiberState.LOADING, FiberState.ACTIVE)
        ]

    async def idle(self) -> None:
        """Wait until no fiber has a load in flight (loads may start more loads)."""
        while True:
            loading = [f for f in self._fibers if f._load_task is not None]
            if not loading:
                return
            await asyncio.gather(*(f.settled() for f in loading), return_exceptions=True)
