"""The service registry: who provides which name, and who waits for it.

A service is withdrawn only after every fiber that injects it has unloaded, so
dependents can still use it during their own teardown. A fiber pending on
missing services starts loading as soon as the last one is provided.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec

from tether.runtime.errors import ServiceConflictError

if TYPE_CHECKING:
    from tether.runtime.app import Runtime
    from tether.runtime.context import Context
    from tether.runtime.fiber import Fiber

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_RESERVED = (
    frozenset(name for name in dir(object) if not name.startswith("__"))
    | {"fiber", "runtime", "plugin", "effect", "on", "listen", "provide", "get", "service"}
    | {
        "emit",
        "serial",
        "parallel",
        "gather",
        "waterfall",
    }
)


class _Entry(msgspec.Struct, eq=False):
    """A provided service: the object, the fiber that provides it, and whether it is going."""

    service: object
    provider: Fiber
    withdrawing: bool = False


class ServiceRegistry:
    """Services by name; the runtime has exactly one."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._entries: dict[str, _Entry] = {}

    def has(self, name: str) -> bool:
        """True when ``name`` is provided and not being withdrawn (a fiber may load on it)."""
        entry = self._entries.get(name)
        return entry is not None and not entry.withdrawing

    def names(self) -> list[str]:
        return sorted(self._entries)

    def provider_of(self, name: str) -> Fiber | None:
        entry = self._entries.get(name)
        return entry.provider if entry is not None else None

    def lookup(self, name: str, caller: Context) -> object:
        """The service ``name`` as seen by ``caller`` (its caller-bound view), or ``None``."""
        entry = self._entries.get(name)
        if entry is None:
            return None
        service = entry.service
        for_caller = getattr(service, "for_caller", None)
        if for_caller is not None:
            return for_caller(caller)
        return service

    def provide(self, name: str, service: object, provider: Fiber) -> Callable[[], Awaitable[None]]:
        """Register ``service``; return the coroutine function that withdraws it.

        Raises:
            ValueError: ``name`` is not lower_snake_case or is a context attribute.
            ServiceConflictError: ``name`` is already provided.
        """
        if not _NAME.match(name) or name in _RESERVED:
            raise ValueError(
                f"invalid service name {name!r}: use lower_snake_case that is not a "
                "context attribute"
            )
        current = self._entries.get(name)
        if current is not None:
            raise ServiceConflictError(
                f"service {name!r} is already provided by plugin {current.provider.name!r}"
            )
        entry = _Entry(service, provider)
        self._entries[name] = entry
        for fiber in self._runtime.fibers_waiting_for(name):
            fiber.start()

        async def withdraw() -> None:
            entry.withdrawing = True
            dependents = self._runtime.fibers_injecting(name)
            await asyncio.gather(*(fiber.suspend() for fiber in dependents))
            if self._entries.get(name) is entry:
                del self._entries[name]

        return withdraw
