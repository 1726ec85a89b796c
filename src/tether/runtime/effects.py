"""Effects: reversible registrations and the order in which they unwind.

An :class:`Effect` holds the disposers produced by one registration. Its
contract, on which the agent teardown order depends:

* Disposers of one effect run in LIFO order, **sequentially**, each awaited
  before the next starts.
* Each disposer runs at most once; disposing an effect twice (or from two
  owners at once) runs the chain once and every caller returns after it.
* A disposer that raises is logged and the chain goes on: teardown never stops
  half way. That holds for every exception, ``BaseException`` included: a
  stray ``asyncio.CancelledError`` (a disposer that called ``.result()`` on a
  cancelled future) is logged like any failure. A real cancellation of the
  chain's own task, ``KeyboardInterrupt`` or ``SystemExit`` still let the rest
  of the chain run, and are raised again once it has.
* The chain runs in a task the effect owns, so an awaiting caller that is
  cancelled does not abandon the teardown midway; a later awaiter gets the
  same outcome.

Sibling effects of one fiber are disposed concurrently by the fiber; that is
the fiber's business (see :mod:`tether.runtime.fiber`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from tether.runtime.signal import cancelling_current_task

log = logging.getLogger(__name__)

Disposer = Callable[[], Awaitable[None] | None]
"""A callable that undoes one registration; it may be sync or async."""

EffectBody = Callable[[], Any]
"""A callable that performs a registration. It may return a disposer (or
``None``), return an awaitable of one, or be a sync or async generator that
yields disposers as it registers things."""


class Effect:
    """The disposers of one registration, unwound as one LIFO chain."""

    __slots__ = ("_detach", "_disposers", "_started", "_task", "label")

    def __init__(self, label: str) -> None:
        self.label = label
        self._disposers: list[Disposer] = []
        self._started = False
        self._task: asyncio.Task[None] | None = None
        self._detach: Callable[[Effect], None] | None = None

    @classmethod
    async def establish(cls, body: EffectBody, label: str) -> Effect:
        """Run ``body`` and collect the disposers it produces into a new effect.

        If ``body`` raises part way, the disposers it already produced run
        (LIFO) and the error propagates.
        """
        effect = cls(label)
        try:
            await _collect(effect, body())
        except BaseException:
            await effect.dispose()
            raise
        return effect

    @property
    def disposed(self) -> bool:
        """True once disposal has started; no disposer can be added afterwards."""
        return self._started

    def push(self, disposer: Disposer) -> None:
        """Add a disposer on top of the chain (it will run first).

        Raises:
            TypeError: ``disposer`` is not callable.
            RuntimeError: the effect is already being disposed.
        """
        if not callable(disposer):
            raise TypeError(f"effect {self.label!r}: a disposer must be callable, got {disposer!r}")
        if self._started:
            raise RuntimeError(f"effect {self.label!r} is already disposed")
        self._disposers.append(disposer)

    def dispose(self) -> Awaitable[None]:
        """Run the chain once; every call returns an awaitable of that one run."""
        if not self._started:
            self._begin()
            self._task = asyncio.get_running_loop().create_task(
                self._unwind(), name=f"dispose:{self.label}"
            )
        if self._task is None:
            return _completed()
        return asyncio.shield(self._task)

    def dispose_sync(self) -> None:
        """Run a chain of synchronous disposers now (used by listener and service removal).

        Raises:
            TypeError: a disposer returned an awaitable; such effects need :meth:`dispose`.
        """
        if self._started:
            return
        self._begin()
        while self._disposers:
            disposer = self._disposers.pop()
            try:
                result = disposer()
            except (Exception, asyncio.CancelledError):
                log.exception("effect %r: a disposer raised; teardown continues", self.label)
                continue
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                raise TypeError(f"effect {self.label!r}: dispose_sync met an async disposer")

    def discard(self) -> None:
        """Forget the chain without running it: what it would undo is already gone."""
        if not self._started:
            self._begin()
            self._disposers.clear()

    def _begin(self) -> None:
        self._started = True
        if self._detach is not None:
            self._detach(self)

    async def _unwind(self) -> None:
        deferred: BaseException | None = None
        while self._disposers:
            disposer = self._disposers.pop()
            try:
                result = disposer()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("effect %r: a disposer raised; teardown continues", self.label)
            except asyncio.CancelledError as exc:
                if cancelling_current_task():
                    deferred = deferred or exc
                    log.warning(
                        "effect %r: cancelled; the rest of the chain still runs", self.label
                    )
                else:
                    log.exception(
                        "effect %r: a disposer raised CancelledError without being cancelled; "
                        "teardown continues",
                        self.label,
                    )
            except BaseException as exc:
                deferred = deferred or exc
                log.exception(
                    "effect %r: a disposer raised; the rest of the chain runs first", self.label
                )
        if deferred is not None:
            raise deferred


def _completed() -> asyncio.Future[None]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


async def _collect(effect: Effect, produced: object) -> None:
    if inspect.isasyncgen(produced):
        async for disposer in produced:
            _push_produced(effect, disposer)
    elif inspect.isgenerator(produced):
        for disposer in produced:
            _push_produced(effect, disposer)
    else:
        if inspect.isawaitable(produced):
            produced = await produced
        _push_produced(effect, produced)


def _push_produced(effect: Effect, disposer: object) -> None:
    if disposer is None:
        return
    if not callable(disposer):
        raise TypeError(f"an effect body must produce callables (disposers), got {disposer!r}")
    effect.push(disposer)
