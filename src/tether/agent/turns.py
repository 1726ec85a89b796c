"""The turn handle: what became of one message given to an agent.

Every delivery (``send``, ``submit``, ``followup``, ``steer``, ``inject``)
returns a :class:`TurnHandle`. It passes through three states, each an
awaitable value:

* **claimed** — a turn took the message: :class:`TurnClaimed` names that turn and
  the seq of its ``turn/start``. A prompt is claimed by the turn it opens; a
  steer by the running turn at its next step boundary (or by the turn it
  starts); a prompt queued behind others when its own turn begins. Messages a
  turn took together (a prompt and the steering pending with it) name the
  same turn.
* **ended** — that turn closed: :class:`TurnEnded` holds its ``turn/end`` reason
  and the text of its last answer.
* **durable** — everything through that ``turn/end`` is stored; when it could
  not be, :meth:`TurnHandle.durable` raises one
  :class:`~tether.agent.NotStoredError` (never the store's group of errors).

A message can also leave the inbox without a turn taking it: a cancel cleared
it while it waited (``agent.cancel()``, or the agent's disposal, cause
``disposed``). Then every state resolves to :class:`NeverRan` with the cause:
the message never reached the model. (A submission that could not be stored
is withdrawn before a handle exists: ``submit`` raises ``NotStoredError``.)

The agent loop resolves handles from its inbox claims, once, in
:class:`~tether.loop.driver.AgentDriver`; nobody needs to read the log to learn
how a prompt ended. A handle belongs to the agent that accepted the message:
when that agent stops before a turn took it, the handle says :class:`NeverRan`
``disposed``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import msgspec

from tether.agent.types import CancelCause, UserMessage
from tether.session.vocabulary import TurnEndReason


class TurnClaimed(msgspec.Struct, frozen=True):
    """The turn that took the message."""

    turn: int
    """The turn's number (``turn/start {turn}``)."""
    seq: int
    """The seq of that turn's ``turn/start``: its events are the ones from here."""


class TurnEnded(msgspec.Struct, frozen=True):
    """How the turn that took the message ended."""

    turn: int
    start_seq: int
    """The seq of the turn's ``turn/start``."""
    end_seq: int
    """The seq of its ``turn/end``."""
    reason: TurnEndReason
    """Why it ended (``completed``, ``aborted {cause}``, ``error {error}``, …)."""
    answer: str
    """The text of the turn's last answer (an interrupted one included); ``""`` when
    the model gave none."""

    @property
    def completed(self) -> bool:
        return self.reason.kind == "completed"


class NeverRan(msgspec.Struct, frozen=True):
    """The message left the inbox without any turn taking it: the model never saw it."""

    cause: CancelCause
    """The cancel that cleared it: ``user``, ``parent``, or ``disposed`` (the agent was
    torn down, or its driver stopped, before a turn took it)."""


TurnOutcome = TurnEnded | NeverRan
"""What became of a message once it is settled."""


class TurnHandle:
    """One delivered message, followed through claimed → ended → durable.

    Returned by the agent when it accepts the message; resolved by the agent
    loop (through the :class:`Settling` it keeps). Each state can be awaited
    any number of times, by any number of callers, before or after it is
    reached; cancelling a wait cancels the wait only.
    """

    __slots__ = ("_claimed", "_ended", "_store", "message")

    def __init__(
        self,
        message: UserMessage | None,
        claimed: asyncio.Future[TurnClaimed | NeverRan],
        ended: asyncio.Future[TurnOutcome],
        store: Callable[[str], Awaitable[None]],
    ) -> None:
        self.message = message
        """The message this handle follows; ``None`` for a turn followed in the log
        of another process (see :func:`tether.front.follow.following_turn`)."""
        self._claimed = claimed
        self._ended = ended
        self._store = store

    async def claimed(self) -> TurnClaimed | NeverRan:
        """The turn that took the message, once one has; :class:`NeverRan` if a cancel
        (or the agent's teardown) cleared it first."""
        return await asyncio.shield(self._claimed)

    async def ended(self) -> TurnOutcome:
        """How the turn that took the message ended, once it has (its ``turn/end`` is
        in the log, maybe not yet on disk); :class:`NeverRan` if no turn took it."""
        return await asyncio.shield(self._ended)

    async def durable(self) -> TurnOutcome:
        """:meth:`ended`, returned once everything the session logged through it is
        stored (for :class:`NeverRan`: the cancel that cleared it).

        Raises:
            NotStoredError: it could not be stored (one line saying why; its
                ``cause`` is the storage error).
        """
        outcome = await self.ended()
        await self._store("the turn" if isinstance(outcome, TurnEnded) else "its cancel")
        return outcome

    @property
    def outcome(self) -> TurnOutcome | None:
        """The outcome if the message is settled (ended or never ran), else ``None``."""
        return self._ended.result() if self._ended.done() else None

    def __repr__(self) -> str:
        state = "ended" if self._ended.done() else "claimed" if self._claimed.done() else "waiting"
        name = "a turn" if self.message is None else self.message.id
        return f"<TurnHandle {name} {state}>"


class Settling:
    """The agent loop's side of one :class:`TurnHandle`: the capability to resolve it.

    The loop keeps this; the caller gets only :attr:`handle`.
    """

    __slots__ = ("_claimed", "_ended", "handle")

    def __init__(
        self, message: UserMessage | None, store: Callable[[str], Awaitable[None]]
    ) -> None:
        loop = asyncio.get_running_loop()
        self._claimed: asyncio.Future[TurnClaimed | NeverRan] = loop.create_future()
        self._ended: asyncio.Future[TurnOutcome] = loop.create_future()
        self.handle = TurnHandle(message, self._claimed, self._ended, store)

    def claim(self, claimed: TurnClaimed) -> None:
        """A turn took the message."""
        if not self._claimed.done():
            self._claimed.set_result(claimed)

    def settle(self, outcome: TurnOutcome) -> None:
        """The message is settled: its turn ended, or it never ran."""
        if isinstance(outcome, NeverRan) and not self._claimed.done():
            self._claimed.set_result(outcome)
        if not self._ended.done():
            self._ended.set_result(outcome)
