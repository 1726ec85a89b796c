"""Cancellation as a value: a signal that work observes and a reason it carries.

A :class:`CancelSignal` is handed to work that must stop cooperatively (a
model stream, a tool, a shell command). Whoever owns the work calls
:meth:`CancelSignal.cancel` with a reason; the work checks
:attr:`CancelSignal.cancelled` at its boundaries, awaits :meth:`wait` beside
its own I/O, or registers a callback. Cancelling is idempotent: the first
reason wins.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


def cancelling_current_task() -> bool:
    """Whether the running task has been asked to cancel.

    It tells a real cancellation from a stray ``asyncio.CancelledError``: a
    tool, hook or listener that raises one of its own (``.result()`` of a
    cancelled future, a re-raised error of another task) while nobody
    cancelled the task running it.
    """
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class Cancelled(Exception):
    """Raised by :meth:`CancelSignal.raise_if_cancelled`; carries the signal's reason."""

    def __init__(self, reason: object) -> None:
        super().__init__(f"cancelled: {reason}")
        self.reason = reason


class CancelSignal:
    """A one-shot cancellation flag with a reason, awaitable and observable."""

    __slots__ = ("_callbacks", "_event", "_reason")

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._reason: object = None
        self._callbacks: list[Callable[[object], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    @property
    def reason(self) -> object:
        """The reason given to the first :meth:`cancel`, or ``None`` while not cancelled."""
        return self._reason

    def cancel(self, reason: object) -> bool:
        """Cancel with ``reason``; returns False if it was already cancelled.

        Callbacks run synchronously, in registration order; one that raises is
        logged and the others still run.
        """
        if self._event.is_set():
            return False
        self._reason = reason
        self._event.set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback(reason)
            except Exception:
                log.exception("cancel callback %r raised", callback)
        return True

    def on_cancel(self, callback: Callable[[object], None]) -> Callable[[], None]:
        """Call ``callback(reason)`` on cancel (at once if already cancelled); returns a remover."""
        if self._event.is_set():
            callback(self._reason)
            return lambda: None
        self._callbacks.append(callback)

        def remove() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return remove

    async def wait(self) -> object:
        """Wait until cancelled; return the reason."""
        await self._event.wait()
        return self._reason

    def raise_if_cancelled(self) -> None:
        """Raise :class:`Cancelled` if the signal is cancelled."""
        if self._event.is_set():
            raise Cancelled(self._reason)
