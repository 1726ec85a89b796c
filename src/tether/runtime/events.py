"""The event bus and its four dispatch modes.

An event's mode is part of its contract and is documented where the event is
declared. Every mode snapshots the listener list when dispatch starts, so a
listener added or removed during dispatch takes effect from the next dispatch.

* :meth:`EventBus.emit` — notification. Listeners are synchronous and isolated:
  one that raises (any ``Exception``, or a ``CancelledError`` a synchronous
  listener can only raise by mistake, e.g. ``.result()`` of a cancelled
  future) is logged and the others still run. Nothing is returned.
* :meth:`EventBus.serial` — decision. Listeners are awaited one after another;
  the first result that is not ``None`` wins and stops the dispatch. Errors
  propagate to the caller.
* :meth:`EventBus.parallel` — fan-out work (for example durability flushes).
  Listeners are awaited together; all of them run to completion, then the
  failures, if any, are raised together as an :class:`ExceptionGroup`.
* :meth:`EventBus.gather` — fan-out work whose listeners answer: like
  ``parallel``, and the caller gets the answers that are not ``None``, in
  registration order (the parts of a turn's stop receipt, say).
* :meth:`EventBus.waterfall` — middleware. Each listener receives the value and
  ``next``; it may pass a replaced value to ``next``, rewrite what ``next``
  returned, short-circuit by returning without calling ``next``, or veto by
  raising :class:`~tether.runtime.errors.Veto`, which reaches the caller.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import TypeVar, cast

log = logging.getLogger(__name__)

T = TypeVar("T")

Listener = Callable[..., object]


Accepts = Callable[[str, tuple[object, ...]], bool]
"""A registration's filter: does it hear this dispatch of ``name`` with these arguments?

For a waterfall the arguments are those after the value."""


class _Registration:
    __slots__ = ("accepts", "fn", "name")

    def __init__(self, name: str, fn: Listener, accepts: Accepts | None) -> None:
        self.name = name
        self.fn = fn
        self.accepts = accepts


class EventBus:
    """Named events with listeners; registration is normally done through ``ctx.on``."""

    def __init__(self) -> None:
        self._listeners: dict[str, list[_Registration]] = {}
        # The listeners of names none of whose registrations filter, as
        # dispatch snapshots them: an emit per appended event reads it here.
        self._unfiltered: dict[str, tuple[Listener, ...]] = {}

    def add(
        self, name: str, fn: Listener, *, prepend: bool = False, accepts: Accepts | None = None
    ) -> Callable[[], None]:
        """Register ``fn`` for ``name``; returns an idempotent remover.

        With ``accepts``, ``fn`` only hears the dispatches it accepts (used by
        scopes, whose listeners hear only their own subject's events).

        Raises:
            TypeError: ``fn`` is not callable.
        """
        if not callable(fn):
            raise TypeError(f"listener for {name!r} must be callable, got {fn!r}")
        registration = _Registration(name, fn, accepts)
        self._unfiltered.pop(name, None)
        listeners = self._listeners.setdefault(name, [])
        if prepend:
            listeners.insert(0, registration)
        else:
            listeners.append(registration)

        def remove() -> None:
            current = self._listeners.get(name)
            if current is not None and registration in current:
                self._unfiltered.pop(name, None)
                current.remove(registration)
                if not current:
                    del self._listeners[name]

        return remove

    def count(self, name: str) -> int:
        """How many listeners ``name`` has now."""
        return len(self._listeners.get(name, ()))

    def _snapshot(self, name: str, args: tuple[object, ...]) -> tuple[Listener, ...]:
        listeners = self._unfiltered.get(name)
        if listeners is not None:
            return listeners
        registrations = self._listeners.get(name, ())
        if all(r.accepts is None for r in registrations):
            listeners = self._unfiltered[name] = tuple(r.fn for r in registrations)
            return listeners
        return tuple(r.fn for r in registrations if r.accepts is None or r.accepts(name, args))

    def emit(self, name: str, *args: object) -> None:
        """Notify every listener; a raising or asynchronous listener is logged and skipped."""
        for fn in self._snapshot(name, args):
            try:
                result = fn(*args)
            except (Exception, asyncio.CancelledError):
                log.exception("listener %r of %r raised; the other listeners still run", fn, name)
                continue
            if result is not None and inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                log.error(
                    "listener %r of %r is asynchronous; %r is an emit (notification) event "
                    "and its listeners must be synchronous",
                    fn,
                    name,
                    name,
                )

    async def serial(self, name: str, *args: object) -> object:
        """Await listeners in order; return the first non-``None`` result, else ``None``."""
        for fn in self._snapshot(name, args):
            result = fn(*args)
            if inspect.isawaitable(result):
                result = await result
            if result is not None:
                return result
        return None

    async def parallel(self, name: str, *args: object) -> None:
        """Await all listeners together; raise their failures together once all have ended."""
        await self.gather(name, *args)

    async def gather(self, name: str, *args: object) -> tuple[object, ...]:
        """Await all listeners together; return their non-``None`` answers in registration
        order, or raise their failures together once all have ended."""
        listeners = self._snapshot(name, args)
        if not listeners:
            return ()

        async def call(fn: Listener) -> object:
            result = fn(*args)
            if inspect.isawaitable(result):
                result = await result
            return result

        outcomes: list[object]
        if len(listeners) == 1:
            # Awaited in this task: a lone listener has no one to run beside,
            # and a durability flush (an acknowledgement waits for it) saves
            # a task and the loop turns that gathering it costs.
            try:
                outcomes = [await call(listeners[0])]
            except BaseException as exc:
                outcomes = [exc]
        else:
            outcomes = await asyncio.gather(*(call(fn) for fn in listeners), return_exceptions=True)
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        errors = [f for f in failures if isinstance(f, Exception)]
        if len(errors) != len(failures):
            raise next(f for f in failures if not isinstance(f, Exception))
        if errors:
            raise ExceptionGroup(f"{len(errors)} listener(s) of {name!r} failed", errors)
        return tuple(o for o in outcomes if o is not None)

    async def waterfall(self, name: str, value: T, *args: object) -> T:
        """Pass ``value`` through the listeners as middleware and return the final value."""
        listeners = self._snapshot(name, args)

        async def step(index: int, current: T) -> T:
            if index == len(listeners):
                return current

            async def next_(replacement: T) -> T:
                return await step(index + 1, replacement)

            result = listeners[index](current, next_, *args)
            if inspect.isawaitable(result):
                result = await result
            return cast(T, result)

        return await step(0, value)
