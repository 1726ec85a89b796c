"""The context: the handle through which a plugin acts on the runtime.

Everything registered through a context — effects, listeners, services, child
plugins — is owned by the context's fiber and unwinds when that fiber unloads.

Events and services are named by typed keys (:mod:`tether.runtime.keys`):
``ctx.on(KEY, listener)``, ``ctx.listen(KEY, listener)``, ``ctx.emit(KEY, ...)``,
``ctx.service(KEY)`` and ``ctx.get(KEY)`` are checked against the key's
signature by mypy. ``ctx.on`` makes the listener an effect of its own;
``ctx.listen`` returns its remover for the body of a composite effect to
yield, so the listener unwinds in that effect's LIFO order::

    def lifecycle() -> Iterator[Disposer]:
        yield ctx.listen(SESSION_EVENT, on_event)
        yield close          # runs first: the listener still stands

    await ctx.effect(lifecycle)

``ctx.service(KEY)`` (or, untyped, ``ctx.<name>``) reads a service the plugin
injects. A service object that defines ``for_caller(ctx)`` is handed out as
the view that method returns, so whatever the service registers on the
caller's behalf is owned by the caller's fiber, not by the provider's (see
:class:`CallerBound`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, TypeVar, TypeVarTuple, cast, overload

from tether.runtime.effects import Disposer, Effect, EffectBody
from tether.runtime.errors import ServiceError
from tether.runtime.keys import (
    EventKey,
    Gather,
    Next,
    Notice,
    Parallel,
    Serial,
    ServiceKey,
    Waterfall,
)

if TYPE_CHECKING:
    from tether.runtime.app import Runtime
    from tether.runtime.fiber import Fiber

T = TypeVar("T")
R = TypeVar("R")
S = TypeVar("S")
S_co = TypeVar("S_co", covariant=True)
Args = TypeVarTuple("Args")


class CallerBound(Protocol[S_co]):
    """A service that gives each caller its own view, bound to the caller's context."""

    def for_caller(self, ctx: Context) -> S_co: ...


class Context:
    """The capabilities of one fiber; passed to a plugin's ``apply``."""

    __slots__ = ("_fiber",)

    def __init__(self, fiber: Fiber) -> None:
        self._fiber = fiber

    @property
    def fiber(self) -> Fiber:
        return self._fiber

    @property
    def runtime(self) -> Runtime:
        return self._fiber.runtime

    def __repr__(self) -> str:
        return f"<Context of {self._fiber!r}>"

    # -- plugins ---------------------------------------------------------------

    def plugin(self, plugin: object, config: object = None, *, label: str | None = None) -> Fiber:
        """Mount ``plugin`` as a child of this fiber and start loading it.

        Await the returned fiber to wait for its load to settle.

        Raises:
            PluginDefinitionError: ``plugin`` has no plugin shape.
            PluginConfigError: ``config`` does not validate against its ``Config``.
            FiberInactiveError: this fiber is not loading or active.
        """
        return self.runtime.mount(self._fiber, plugin, config, label=label)

    # -- effects ---------------------------------------------------------------

    async def effect(self, body: EffectBody, *, label: str | None = None) -> Effect:
        """Run ``body`` as one effect owned by this fiber and return it.

        The disposers it produced run in LIFO order, sequentially, when the
        effect is disposed or the fiber unloads. If ``body`` raises part way,
        what it already registered is rolled back and the error propagates.

        Raises:
            FiberInactiveError: the fiber is unloading, disposed or failed (also
                when it stopped accepting effects while ``body`` was running; the
                effect is rolled back first).
        """
        name = label or str(getattr(body, "__qualname__", repr(body)))
        self._fiber.check_accepts_effects(f"effect {name!r}")
        effect = await Effect.establish(body, name)
        if not self._fiber.accepts_effects:
            await effect.dispose()
            self._fiber.check_accepts_effects(f"effect {name!r}")
        self._fiber.adopt(effect)
        return effect

    def defer(self, disposer: Disposer, *, label: str | None = None) -> Effect:
        """Register ``disposer`` (sync or async) to run when this fiber unloads.

        The synchronous form of a one-disposer effect, for code that cannot
        await (an ``emit`` listener, say).

        Raises:
            FiberInactiveError: the fiber is unloading, disposed or failed.
        """
        name = label or str(getattr(disposer, "__qualname__", repr(disposer)))
        self._fiber.check_accepts_effects(f"effect {name!r}")
        effect = Effect(name)
        effect.push(disposer)
        self._fiber.adopt(effect)
        return effect

    @overload
    def on(
        self,
        key: Notice[*Args],
        listener: Callable[[*Args], None],
        *,
        prepend: bool = False,
    ) -> Callable[[], None]: ...

    @overload
    def on(
        self,
        key: Serial[R, *Args],
        listener: Callable[[*Args], R | Awaitable[R | None] | None],
        *,
        prepend: bool = False,
    ) -> Callable[[], None]: ...

    @overload
    def on(
        self,
        key: Parallel[*Args],
        listener: Callable[[*Args], Awaitable[None] | None],
        *,
        prepend: bool = False,
    ) -> Callable[[], None]: ...

    @overload
    def on(
        self,
        key: Gather[R, *Args],
        listener: Callable[[*Args], R | Awaitable[R | None] | None],
        *,
        prepend: bool = False,
    ) -> Callable[[], None]: ...

    @overload
    def on(
        self,
        key: Waterfall[T, *Args],
        listener: Callable[[T, Next[T], *Args], T | Awaitable[T]],
        *,
        prepend: bool = False,
    ) -> Callable[[], None]: ...

    def on(
        self, key: EventKey, listener: Callable[..., object], *, prepend: bool = False
    ) -> Callable[[], None]:
        """Listen to the event ``key`` for as long as this fiber lives; returns a remover.

        Raises:
            TypeError: ``key`` is not an event key, or ``listener`` is not callable.
            FiberInactiveError: the fiber is unloading, disposed or failed.
        """
        name = _event_name(key)
        return self._sync_effect(f"on:{name}", self._listen(name, listener, prepend))

    @overload
    def listen(
        self,
        key: Notice[*Args],
        listener: Callable[[*Args], None],
        *,
        prepend: bool = False,
    ) -> Callable[[], None]: ...

    @overload
    def listen(
        self,
        key: Serial[R, *Args],
        listener: Callable[[*Args], R | Awaitable[R | None] | None],
        *,
        prepend: bool = False,
    ) -> Callable[[], None]: ...

    @overload
    def listen(
        self,
        key: Parallel[*Args],
        listener: Callable[[*Args], Awaitable[None] | None],
        *,
        prepend: bool = False,
    ) -> Callable[[], None]: ...

    @overload
    def listen(
        self,
        key: Gather[R, *Args],
        listener: Callable[[*Args], R | Awaitable[R | None] | None],
        *,
        prepend: bool = False,
    ) -> Callable[[], None]: ...

    @overload
    def listen(
        self,
        key: Waterfall[T, *Args],
        listener: Callable[[T, Next[T], *Args], T | Awaitable[T]],
        *,
        prepend: bool = False,
    ) -> Callable[[], None]: ...

    def listen(
        self, key: EventKey, listener: Callable[..., object], *, prepend: bool = False
    ) -> Callable[[], None]:
        """Listen to the event ``key`` until the returned remover runs.

        The form of :meth:`on` for the body of a composite effect: yield the
        remover from the body, and the listener is removed in that effect's
        LIFO order (before what the body yielded earlier, after what it
        yielded later). Nothing owns the listener until the remover is
        yielded or kept; :meth:`on` is the form that owns it at once.

        Raises:
            TypeError: ``key`` is not an event key, or ``listener`` is not callable.
            FiberInactiveError: the fiber is unloading, disposed or failed.
        """
        return self._listen(_event_name(key), listener, prepend)

    def _listen(
        self, name: str, listener: Callable[..., object], prepend: bool
    ) -> Callable[[], None]:
        self._fiber.check_accepts_effects(f"listener for {name!r}")
        return self.runtime.events.add(
            name, listener, prepend=prepend, accepts=self._fiber.event_filter
        )

    def provide(
        self, key: ServiceKey[S], service: S | CallerBound[S]
    ) -> Callable[[], Awaitable[None]]:
        """Provide ``service`` as ``key`` for as long as this fiber lives.

        ``service`` is what readers get, or a :class:`CallerBound` object whose
        ``for_caller`` view they get.

        Withdrawal (on unload, or by awaiting the returned function) first
        unloads every fiber that injects ``name``; they load again when a
        provider returns.

        Raises:
            ServiceConflictError: another live fiber provides ``name``.
            ValueError: ``name`` is not a valid service name.
        """
        name = key.name
        self._fiber.check_accepts_effects(f"service {name!r}")
        withdraw = self.runtime.services.provide(name, service, self._fiber)
        effect = Effect(f"provide:{name}")
        effect.push(withdraw)
        self._fiber.adopt(effect, service=True)
        return effect.dispose

    def _sync_effect(self, label: str, disposer: Callable[[], None]) -> Callable[[], None]:
        effect = Effect(label)
        effect.push(disposer)
        self._fiber.adopt(effect)
        return effect.dispose_sync

    # -- services --------------------------------------------------------------

    def get(self, key: ServiceKey[S]) -> S | None:
        """The service ``key`` bound to this caller, or ``None`` when nobody provides it."""
        return cast("S | None", self.runtime.services.lookup(key.name, self))

    def service(self, key: ServiceKey[S]) -> S:
        """Read the injected service ``key``.

        Raises:
            ServiceError: the plugin does not inject it, or nobody provides it.
        """
        return cast("S", self._read_injected(key.name))

    def __getattr__(self, name: str) -> object:
        """``ctx.<name>``: the untyped read of an injected service (see :meth:`service`)."""
        if name.startswith("_"):
            raise AttributeError(name)
        return self._read_injected(name)

    def _read_injected(self, name: str) -> object:
        if name not in self._fiber.inject:
            raise ServiceError(
                f"plugin {self._fiber.name!r} reads service {name!r} without injecting it: "
                f"add it to the plugin's inject list, or use ctx.get(...) for an optional read"
            )
        value = self.runtime.services.lookup(name, self)
        if value is None:
            raise ServiceError(f"service {name!r} is not provided (plugin {self._fiber.name!r})")
        return value

    # -- events ----------------------------------------------------------------

    def heard(self, key: EventKey) -> bool:
        """Whether ``key`` has a listener now (for a feature offered only when someone
        can serve it: the answer may change as listeners come and go)."""
        return self.runtime.events.count(_event_name(key)) > 0

    def emit(self, key: Notice[*Args], *args: *Args) -> None:
        """Notify the listeners of ``key`` (see :meth:`EventBus.emit`)."""
        self.runtime.events.emit(_event_name(key), *args)

    async def serial(self, key: Serial[R, *Args], *args: *Args) -> R | None:
        """The first non-``None`` answer of ``key``'s listeners (see :meth:`EventBus.serial`)."""
        return cast("R | None", await self.runtime.events.serial(_event_name(key), *args))

    async def parallel(self, key: Parallel[*Args], *args: *Args) -> None:
        """Await all listeners of ``key`` together (see :meth:`EventBus.parallel`)."""
        await self.runtime.events.parallel(_event_name(key), *args)

    async def gather(self, key: Gather[R, *Args], *args: *Args) -> tuple[R, ...]:
        """Await all listeners of ``key`` together; their non-``None`` answers
        (see :meth:`EventBus.gather`)."""
        return cast("tuple[R, ...]", await self.runtime.events.gather(_event_name(key), *args))

    async def waterfall(self, key: Waterfall[T, *Args], value: T, *args: *Args) -> T:
        """Pass ``value`` through ``key``'s middleware (see :meth:`EventBus.waterfall`)."""
        return await self.runtime.events.waterfall(_event_name(key), value, *args)


def _event_name(key: object) -> str:
    if not isinstance(key, EventKey):
        raise TypeError(
            f"events are named by keys (tether.runtime.keys), got {type(key).__name__} {key!r}"
        )
    return key.name
