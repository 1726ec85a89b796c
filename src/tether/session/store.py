"""The session store (``ctx.sessions``): which sessions are live, and how one is published.

Publishing a session is a three-step transaction:

1. :meth:`SessionStore.prepare` builds a session privately. Nothing is
   published and nothing is written; a live id is rejected early.
2. :meth:`SessionStore.enter` publishes it: from now on its appends are
   published as ``session/event`` (which persistence listens to). ``enter``
   **rejects a duplicate live id**: of two transactions that prepared one id,
   exactly one enters.
3. :meth:`SessionStore.announce` emits ``session/created`` once.

A transaction that fails before ``enter`` rolls back by dropping its private
session: nothing was published or written, so nothing is left behind.

Events declared here (all ``emit``: notifications, listeners are contained):

* ``session/event (session, event)`` — after every append to an entered session.
* ``session/created (session)`` — once, on announce.
* ``session/disposed (session)`` — on detach, only for an announced session.

``session/flush (session)`` is a ``parallel`` event: every durability listener
writes everything appended to ``session`` before the call, then returns.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from tether.runtime.keys import Notice, Parallel, ServiceKey
from tether.session.errors import SessionError
from tether.session.events import Event
from tether.session.log import Lineage, Session, SessionHeader

if TYPE_CHECKING:
    from tether.runtime import Context


SESSION_CREATED = Notice[Session]("session/created")
"""``(session)``: a session was announced (after ``enter``)."""

SESSION_DISPOSED = Notice[Session]("session/disposed")
"""``(session)``: an announced session detached."""

SESSION_EVENT = Notice[Session, Event]("session/event")
"""``(session, event)``: an event was appended (persistence listens)."""

SESSION_FLUSH = Parallel[Session]("session/flush")
"""``(session)``: the durability barrier; listeners return once it is on disk."""

SESSIONS = ServiceKey["SessionStore"]("sessions")
"""``ctx.sessions``: the :class:`SessionStore`."""


class SessionConflictError(SessionError):
    """A session with this id is already live."""


class SessionStateError(SessionError):
    """A session was used in a step of the transaction it is not ready for."""


def new_session_id(clock: Callable[[], float] = time.time) -> str:
    """A fresh session id: sortable by creation time, unique by a random suffix."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(clock()))
    return f"{stamp}-{os.urandom(4).hex()}"


class SessionStore:
    """Live sessions by id; a service provided by the ``tether.session.store`` plugin."""

    def __init__(self, ctx: Context, *, clock: Callable[[], float] = time.time) -> None:
        self._ctx = ctx
        self._clock = clock
        self._live: dict[str, Session] = {}
        self._unobserve: dict[Session, Callable[[], None]] = {}
        self._announced: set[Session] = set()
        self._announcing: set[Session] = set()
        self._deferred_detach: set[Session] = set()

    # -- the transaction -------------------------------------------------------

    def prepare(
        self,
        session_id: str | None = None,
        *,
        cwd: str | None = None,
        seed: Session | None = None,
        meta: Mapping[str, str] | None = None,
        lineage: Lineage | None = None,
    ) -> Session:
        """Build a new session privately (nothing is published or written).

        ``seed`` forks another session: its events are copied and the header
        records the lineage (parent id, number of seeded events). Without a
        seed, ``lineage`` is the header's (a delegated child's).

        Raises:
            SessionConflictError: ``session_id`` is live.
            ValueError: both ``seed`` and ``lineage`` are given.
        """
        if seed is not None and lineage is not None:
            raise ValueError("a fork's lineage comes from its seed: give seed or lineage")
        session_id = session_id or new_session_id(self._clock)
        self._check_not_live(session_id)
        if seed is not None:
            lineage = Lineage(seed.id, len(seed.events))
        header = SessionHeader(
            id=session_id,
            created_at=self._clock(),
            cwd=cwd if cwd is not None else os.getcwd(),
            lineage=lineage,
            meta=dict(meta or {}),
        )
        if seed is None:
            return Session(header, clock=self._clock)
        return Session.restore(header, seed.events, registry=seed.registry, clock=self._clock)

    def prepare_restored(self, header: SessionHeader, events: Sequence[Event]) -> Session:
        """Build a session privately from stored events (used by resume).

        Raises:
            SessionConflictError: the header's id is live.
            SessionInvariantError: the events do not form a valid log.
        """
        self._check_not_live(header.id)
        return Session.restore(header, events, clock=self._clock)

    def enter(self, session: Session) -> None:
        """Publish ``session``: it becomes live and its appends are published.

        Raises:
            SessionConflictError: another session with this id is live (the
                caller's transaction must roll back; this one stays private).
            SessionStateError: this very session is already entered.
        """
        current = self._live.get(session.id)
        if current is session:
            raise SessionStateError(f"session {session.id!r} is already entered")
        if current is not None:
            raise SessionConflictError(f"session {session.id!r} is already live")
        self._live[session.id] = session
        emit = self._ctx.emit
        self._unobserve[session] = session.observe(lambda s, event: emit(SESSION_EVENT, s, event))

    def announce(self, session: Session) -> None:
        """Emit ``session/created`` for an entered session; later calls do nothing.

        A detach requested by a ``session/created`` listener is deferred until
        the dispatch has unwound, so every listener sees a live session.

        Raises:
            SessionStateError: the session is not live.
        """
        if self._live.get(session.id) is not session:
            raise SessionStateError(f"session {session.id!r} is not live; enter it first")
        if session in self._announced:
            return
        self._announced.add(session)
        self._announcing.add(session)
        try:
            self._ctx.emit(SESSION_CREATED, session)
        finally:
            self._announcing.discard(session)
            if session in self._deferred_detach:
                self._deferred_detach.discard(session)
                self.detach(session)

    def detach(self, session: Session) -> None:
        """Unpublish ``session``; emits ``session/disposed`` if it was announced.

        A stale detach — of a session that is no longer the live one under its
        id — never removes the newer session. Detaching does not flush: call
        :meth:`flush` first when the appended events must be durable.
        """
        if session in self._announcing:
            self._deferred_detach.add(session)
            return
        unobserve = self._unobserve.pop(session, None)
        if unobserve is not None:
            unobserve()
        if self._live.get(session.id) is session:
            del self._live[session.id]
        if session in self._announced:
            self._announced.discard(session)
            self._ctx.emit(SESSION_DISPOSED, session)

    # -- reads -----------------------------------------------------------------

    def get(self, session_id: str) -> Session | None:
        """The live session with this id, or ``None``."""
        return self._live.get(session_id)

    def list(self) -> list[Session]:
        """The live sessions, in the order they were entered."""
        return list(self._live.values())

    def is_live(self, session: Session) -> bool:
        return self._live.get(session.id) is session

    async def flush(self, session: Session) -> None:
        """The durability barrier: returns once everything appended before the call is written.

        With no persistence plugin mounted, sessions live in memory only and
        this returns at once.

        Raises:
            ExceptionGroup: a durability listener failed to write.
        """
        await self._ctx.parallel(SESSION_FLUSH, session)

    def _check_not_live(self, session_id: str) -> None:
        if session_id in self._live:
            raise SessionConflictError(f"session {session_id!r} is already live")


name = "sessions"


async def apply(ctx: Context, config: None) -> None:
    """Provide ``ctx.sessions``; sessions still live when it unloads are detached."""
    store = SessionStore(ctx)

    def detach_all() -> None:
        for session in store.list():
            store.detach(session)

    await ctx.effect(lambda: detach_all, label="detach live sessions")
    ctx.provide(SESSIONS, store)
