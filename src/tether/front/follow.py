"""The session view: a session's events after a seq, then live, with no gap and no duplicate.

Every front end reads a session through this module (DESIGN §13): the web
app's event streams, ``tether sessions tail``, ``tether sessions cancel``
following the stop it asked for, and the ACP bridge, whose live updates and
``session/load`` replay read the log from a :class:`Cursor`.

The rule is the same everywhere: **the log, not the wake-up, carries the
events.** A reader keeps a cursor (the last seq it has); a wake-up (an
append, a doorbell, a replay finishing) only says "read again from the
cursor". So an event appended while a reader was busy — catching up, or
replaying history to an editor — is neither lost nor shown twice, and no
reader keeps a buffer of its own.

:meth:`SessionViews.follow` yields **batches** of events in seq order, each
starting right after the last one yielded and holding at most `BATCH`
events: a view catching up with a long log gets it a batch at a time, never
the log whole:

* a session **live in this process** is read from its in-memory log: the
  follower is subscribed to the session's wake-ups before the log is read,
  and every wake-up reads the log from the follower's cursor;
* a session **stored, not live in this process** (live nowhere, or in
  another process: its lease is held elsewhere, on this host or, on
  PostgreSQL, on another one) is read from storage, then followed there, so
  that a process that has it live, or opens it later, is followed from its
  writes: :meth:`Persistence.follow
  <tether.persist.service.Persistence.follow>` reads by seq from the cursor
  each time the backend's doorbell rings (or its poll comes round), and the
  stored records are decoded by the same registry a load decodes them by, so
  a view gets the same event values as from a live session. Should the
  session then go live in this process, the follower goes on from its
  in-memory log, at the same cursor; once it leaves this process again
  (``session/disposed``), from storage.

Waking is shared: the followers of a session subscribe to one
:class:`~tether.persist.follow.Doorbell` rung by ``session/event``. A view
that also shows state kept outside the log (the web app's permission
questions) is woken for it by :meth:`SessionViews.nudge`: the follower then
yields an **empty** batch, and the view reads that state again.

What the log says a session is set to (mode, model, grants, plan) is
:attr:`Session.settings <tether.session.Session.settings>`, folded once as
the log grows, like its structure: no view folds the log again to read it.

:func:`following_turn` is a :class:`~tether.agent.TurnHandle` on a turn a
session runs in another process, resolved by following that session here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import TYPE_CHECKING

from tether.agent.turns import Settling, TurnClaimed, TurnEnded, TurnOutcome
from tether.persist.follow import BATCH, Doorbell
from tether.session.registry import DEFAULT_REGISTRY
from tether.session.vocabulary import AssistantMessageEvent, TurnEnd, TurnStart

if TYPE_CHECKING:
    from tether.agent.turns import TurnHandle
    from tether.persist.service import Persistence
    from tether.session import Event, Session
    from tether.session.store import SessionStore


class Cursor:
    """A reader's place in one session's log: the seq of the last event it has.

    Each read takes the events after it (at most ``limit``) and moves past
    them, so reads woken any number of times, late or early, see each event
    once and skip none.
    """

    __slots__ = ("seq",)

    def __init__(self, after_seq: int = -1) -> None:
        self.seq = after_seq
        """The seq of the last event read (``-1``: none yet)."""

    def take(self, events: Sequence[Event], limit: int | None = None) -> Sequence[Event]:
        """The events of the log ``events`` after the cursor, at most ``limit`` of them
        (default `BATCH`; none when it is caught up); the cursor moves past them."""
        size = BATCH if limit is None else limit
        batch = events[self.seq + 1 : self.seq + 1 + size]
        if batch:
            self.seq = batch[-1].seq
        return batch

    def next(self, event: Event, events: Sequence[Event]) -> Sequence[Event]:
        """:meth:`take` when ``event`` was just appended to ``events``: only ``event``
        when it is the one after the cursor (read without slicing the log)."""
        if event.seq == self.seq + 1:
            self.seq = event.seq
            return (event,)
        return self.take(events) if event.seq > self.seq else ()


class SessionViews:
    """The followers of sessions in this process (one per open view)."""

    def __init__(self, store: SessionStore, persistence: Persistence | None) -> None:
        self._store = store
        self._persistence = persistence
        self._bell = Doorbell()
        self._nudges: dict[str, int] = {}
        """Per session followed: how many nudges it had (a follower yields on a change)."""
        self._loading: dict[str, asyncio.Future[Session]] = {}
        """The reads of stored sessions under way (see :meth:`load`)."""

    def on_session_event(self, session: Session, event: Event) -> None:
        """``session/event``: wake every follower of ``session``."""
        self._bell.ring(session.id)

    def on_session_disposed(self, session: Session) -> None:
        """``session/disposed``: wake every follower of ``session``, which now
        follows it in storage (another process may open it)."""
        self._bell.ring(session.id)

    def nudge(self, session_id: str) -> None:
        """Have every follower of ``session_id`` yield an empty batch (see the module docs)."""
        if session_id in self._nudges:
            self._nudges[session_id] += 1
            self._bell.ring(session_id)

    def followers(self, session_id: str) -> int:
        """How many followers ``session_id`` has now."""
        return self._bell.subscribers(session_id)

    async def follow(
        self,
        session_id: str,
        after_seq: int = -1,
        *,
        batch_window: float = 0.0,
        whole: bool = True,
    ) -> AsyncGenerator[Sequence[Event], None]:
        """The events of ``session_id`` with seq > ``after_seq``, in batches, then live.

        A session not live here is read whole first (:meth:`load`: shared with
        the other views reading it, a last turn that never closed shown closed
        as a load shows it); with ``whole`` false it is read from storage from
        the start, as stored, a batch at a time.

        With ``batch_window``, a live batch gathers what is appended within that
        many seconds of its first event (a streamed answer's chunks come one by
        one: each follower then wakes and writes once per window, not per chunk).

        The iteration runs until the consumer stops it (closes the generator or
        is cancelled), which removes the follower at once (and stops its read
        of another process's session).

        Raises:
            SessionNotFoundError: the session is neither live here nor stored.
            InvalidSessionIdError: ``session_id`` is not a session id.
            CorruptLogError, SessionError: the stored log cannot be read.
        """
        self._nudges.setdefault(session_id, 0)
        stored: list[Event] = []
        reader: asyncio.Task[None] | None = None
        with self._bell.subscribe(session_id) as wake:
            nudges = self._nudges[session_id]
            try:
                cursor = Cursor(after_seq)
                batch: Sequence[Event]
                if whole and self._store.get(session_id) is None:
                    loaded: Session | None = await self.load(session_id)
                    # Live here meanwhile: read from there on, at the same cursor.
                    while loaded is not None and self._store.get(session_id) is None:
                        if not (batch := cursor.take(loaded.events)):
                            break
                        yield batch
                    loaded = None  # read: not held while followed
                while True:
                    wake.clear()
                    if nudges != self._nudges[session_id]:
                        nudges = self._nudges[session_id]
                        yield ()
                    session = self._store.get(session_id)
                    if session is not None:
                        batch = cursor.take(session.events)
                        if reader is not None:  # live here now: storage lags behind
                            await _stop(reader)
                            reader = None
                    else:
                        batch = [event for event in stored[:BATCH] if event.seq > cursor.seq]
                        del stored[:BATCH]
                        if batch:
                            cursor.seq = batch[-1].seq
                        if reader is not None and reader.done():
                            reader.result()  # its failure is the follower's
                        elif reader is None and self._persistence is not None and not batch:
                            # Not live here (or no longer): followed in storage from here on.
                            persistence = self._persistence
                            reader = _reader(persistence, session_id, cursor.seq, stored, wake)
                    if batch:
                        yield batch
                        continue
                    await wake.wait()
                    if batch_window and nudges == self._nudges[session_id]:
                        await asyncio.sleep(batch_window)
            finally:
                if reader is not None:
                    await _stop(reader)
                if self._bell.subscribers(session_id) == 1:  # this follower's own
                    self._nudges.pop(session_id, None)

    @property
    def persistence(self) -> Persistence | None:
        """Where sessions are stored (``None``: nowhere; only live sessions are viewed)."""
        return self._persistence

    def live(self, session_id: str) -> bool:
        """Whether ``session_id`` is live in this process."""
        return self._store.get(session_id) is not None

    async def stored_after(self, session_id: str, after_seq: int) -> AsyncIterator[list[Event]]:
        """The events of ``session_id`` stored now after ``after_seq``, as they are
        stored (never repaired), in batches of at most `BATCH`; then the iteration ends.

        Raises:
            SessionNotFoundError, CorruptLogError: from the backend.
        """
        persistence = self._stored_in(session_id)
        while stored := await persistence.events_after(session_id, after_seq, limit=BATCH):
            after_seq = stored[-1].seq
            yield DEFAULT_REGISTRY.decode_stored(stored)

    async def load(self, session_id: str) -> Session:
        """The stored session ``session_id``, read to be viewed (never changed).

        Reads of one session asked for while one is under way share it: the
        views of one page (its events, its details, its usage) hold a big
        log once, not once each. A read whose asker went away meanwhile is
        started again by the next one waiting.

        Raises:
            SessionNotFoundError, CorruptLogError, SessionError: as
                :meth:`Persistence.load <tether.persist.service.Persistence.load>`.
        """
        while (pending := self._loading.get(session_id)) is not None:
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                if not pending.cancelled():
                    raise  # this reader was cancelled, not the shared read
        persistence = self._stored_in(session_id)
        shared: asyncio.Future[Session] = asyncio.get_running_loop().create_future()
        self._loading[session_id] = shared
        try:
            session = await persistence.load(session_id)
        except asyncio.CancelledError:
            shared.cancel()
            raise
        except BaseException as exc:
            shared.set_exception(exc)
            shared.exception()  # told to whoever waits; never logged as unheard
            raise
        else:
            shared.set_result(session)
            return session
        finally:
            del self._loading[session_id]

    def _stored_in(self, session_id: str) -> Persistence:
        if self._persistence is None:
            from tether.persist.backends.errors import SessionNotFoundError

            raise SessionNotFoundError(session_id)
        return self._persistence


def _reader(
    persistence: Persistence,
    session_id: str,
    after_seq: int,
    into: list[Event],
    wake: asyncio.Event,
) -> asyncio.Task[None]:
    """A task following ``session_id`` in storage after ``after_seq`` (see
    :func:`_read_stored`), whether or not another process has it live now: one
    that opens it later is followed from its first write. A poll of an idle log
    reads nothing new (``events_after``)."""
    return asyncio.get_running_loop().create_task(
        _read_stored(persistence, session_id, after_seq, into, wake),
        name=f"follow:{session_id}",
    )


async def _stop(reader: asyncio.Task[None]) -> None:
    """Cancel ``reader`` and wait until it is gone (a failure it had is the caller's
    only if seen before)."""
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)


async def _read_stored(
    persistence: Persistence,
    session_id: str,
    after_seq: int,
    into: list[Event],
    wake: asyncio.Event,
) -> None:
    """Follow ``session_id`` in storage after ``after_seq``: each batch stored is
    decoded into ``into`` and ``wake`` is set, until cancelled."""
    try:
        async for batch in persistence.follow(session_id, after_seq):
            into.extend(DEFAULT_REGISTRY.decode_stored(batch))
            wake.set()
    finally:
        wake.set()  # a failure (or the end) is seen by the follower


class FollowedTurn:
    """A turn another process runs, followed in its session's log here.

    :attr:`handle` is its :class:`~tether.agent.TurnHandle`: claimed from the
    start (the turn was open when following began), ended once the turn's
    ``turn/end`` is read. What it reads is stored (the session is not live in
    this process), so ``durable()`` returns as ``ended()`` does. The handle
    follows a turn, not a message of this process: its ``message`` is ``None``.
    """

    __slots__ = ("_answer", "_claim", "_settling", "_tasks", "handle", "seq")

    def __init__(self, claim: TurnClaimed, answer: str, seq: int) -> None:
        self._claim = claim
        self._answer = answer
        self._settling = Settling(None, _already_stored)
        self._settling.claim(claim)
        self._tasks: tuple[asyncio.Task[None], ...] = ()
        self.handle: TurnHandle = self._settling.handle
        self.seq = seq
        """The seq of the last event read."""

    async def settled(self) -> TurnOutcome | None:
        """How the turn ended, once its ``turn/end`` is read; ``None`` once the
        session's holder let it go and what it stored holds no end of the turn.

        Raises:
            SessionNotFoundError, CorruptLogError: the log was deleted or damaged
                while followed.
        """
        ended = asyncio.ensure_future(self.handle.ended())
        try:
            await asyncio.wait((ended, *self._tasks), return_when="FIRST_COMPLETED")
        finally:
            ended.cancel()
        for task in self._tasks:
            if task.done() and not task.cancelled() and (error := task.exception()) is not None:
                raise error
        return self.handle.outcome

    def see(self, events: Sequence[Event]) -> bool:
        """Read ``events`` (the next ones of the log, in order); whether the turn has
        ended (its handle is then settled)."""
        for event in events:
            if event.seq <= self.seq:
                continue
            self.seq = event.seq
            if event.type == AssistantMessageEvent.type:
                payload = event.payload
                if isinstance(payload, AssistantMessageEvent):
                    self._answer = payload.text
            elif event.type == TurnEnd.type:
                end = event.payload
                if isinstance(end, TurnEnd) and end.turn == self._claim.turn:
                    claim = self._claim
                    self._settling.settle(
                        TurnEnded(claim.turn, claim.seq, event.seq, end.reason, self._answer)
                    )
                    return True
        return self.handle.outcome is not None


@contextlib.asynccontextmanager
async def following_turn(
    views: SessionViews, session: Session, *, holder_check: float
) -> AsyncIterator[FollowedTurn]:
    """Follow the open turn of ``session`` — a copy read as stored of a session
    another process has live — in the session's log after the copy's last event,
    until the block ends; yields it, its handle ended once its ``turn/end`` is read.

    Every ``holder_check`` seconds the follower asks whether a process still has
    the session live; once none has, it reads what is stored (a holder stores
    everything before it lets the lease go): finding no end of the turn there,
    :meth:`~FollowedTurn.settled` returns ``None``.

    Raises:
        ValueError: ``session`` has no open turn, or it is live in this process
            (its agent's own handles say how its turns end).
    """
    turn = session.open_turn
    persistence = views.persistence
    if turn is None or persistence is None or views.live(session.id):
        raise ValueError(f"session {session.id}: no turn of another process to follow")
    followed = _open_turn(session, turn)

    async def watch() -> None:
        async for batch in views.follow(session.id, followed.seq, whole=False):
            if followed.see(batch):
                return

    async def holder_gone() -> None:
        while True:
            if await persistence.holder(session.id) is None:
                break
            await asyncio.sleep(holder_check)
        async for batch in views.stored_after(session.id, followed.seq):
            if followed.see(batch):
                return

    loop = asyncio.get_running_loop()
    followed._tasks = tasks = (
        loop.create_task(watch(), name=f"turn:{session.id}"),
        loop.create_task(holder_gone(), name=f"turn-holder:{session.id}"),
    )
    try:
        yield followed
    finally:
        for task in tasks:
            await _stop(task)


def _open_turn(session: Session, turn: int) -> FollowedTurn:
    """The open turn ``turn`` of ``session`` as read so far: where it starts, its last answer."""
    answer: str | None = None
    for event in reversed(session.events):
        payload = event.payload
        if answer is None and isinstance(payload, AssistantMessageEvent):
            answer = payload.text
        if isinstance(payload, TurnStart) and payload.turn == turn:
            claim = TurnClaimed(turn=turn, seq=event.seq)
            return FollowedTurn(claim, answer or "", len(session.events) - 1)
    raise ValueError(f"session {session.id}: turn {turn} has no turn/start")


async def _already_stored(what: str) -> None:
    """A followed turn is read from storage: it is stored already."""
