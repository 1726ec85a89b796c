"""``AgentDriver``: the loop's side of an agent — its inbox, its driver task, its stop.

One driver task per agent runs turns one after another. Input arrives through
:meth:`AgentDriver.send`, or :meth:`AgentDriver.submit` when the sender is
told it was accepted (it runs only once stored); :meth:`AgentDriver.cancel` is what the public
``cancel()`` reaches. The turn itself is run by :mod:`tether.loop.turn`.

Every delivery returns a :class:`~tether.agent.turns.TurnHandle`, and the
driver is the one place that resolves them: a message is *claimed* when a
turn takes it from the inbox (:meth:`AgentDriver.open_turn` names the turn,
:meth:`AgentDriver.claim_turn`,
:meth:`AgentDriver.claim_steering`), *ended* when that turn closes
(:meth:`AgentDriver.end_turn`), and *never ran* when a cancel clears it or
the driver stops first; *durable* is the session's flush
(:meth:`AgentDriver.store`).

Nobody outside the agent loop holds a driver: the registry, events, hooks and
tools see its :class:`~tether.loop.agent.LoopAgent` (``driver.agent``), which
offers the :class:`~tether.agent.Agent` protocol and nothing else. Stopping,
starting and the turn bookkeeping below are the loop's own verbs.

Events (``emit``; the first argument is always the public agent):

* ``agent/status (agent, status)`` — on every change of ``status``;
* ``agent/cancel-requested (agent, cause)`` — once per *effective* cancel,
  before the inbox is cleared and the turn aborted;
* ``agent/error (agent, error)`` — a turn ended with an error;
* ``agent/inbox/inserted|claimed|discarded (agent, messages, queue)``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from tether.agent.errors import AgentDisposedError, NotStoredError
from tether.agent.events import AGENT_STATUS, AGENT_STOPPING, CANCEL_REQUESTED, InboxNotice
from tether.agent.inbox import Inbox
from tether.agent.turns import NeverRan, Settling, TurnClaimed, TurnEnded, TurnHandle, TurnOutcome
from tether.agent.types import AgentOptions, AgentStatus, CancelCause, Target, UserMessage
from tether.loop.agent import LoopAgent
from tether.loop.history import History
from tether.loop.receipt import write_receipt
from tether.persist.backends.lease import taken_over
from tether.runtime.signal import CancelSignal, cancelling_current_task
from tether.session import AssistantMessageEvent, TurnEndReason
from tether.session.model import ModelChoice

if TYPE_CHECKING:
    from tether.loop.turn import TurnRunner
    from tether.runtime import Context, Fiber
    from tether.session.log import Session

log = logging.getLogger(__name__)


class AgentDriver:
    """The state and the driver task of one agent of the agent loop."""

    def __init__(
        self,
        session: Session,
        scope: Fiber,
        options: AgentOptions,
        *,
        events: Context,
        flush: Callable[[Session], Awaitable[None]],
    ) -> None:
        self._session = session
        self._scope = scope
        self.options = options
        self._events = events
        self._flush = flush
        self._status = AgentStatus.IDLE
        self.agent = LoopAgent(self)
        """The public face of this agent: what the registry, events, hooks and tools get."""
        self._inbox = Inbox(session, self._notify_inbox)
        self.history = History(session, ModelChoice(options.model, options.base_url))
        self._wake = asyncio.Event()
        self._settled = asyncio.Event()
        """Set each time a submission's verdict is in (released or withdrawn)."""
        self._steer_wake = False
        self._turn_signal: CancelSignal | None = None
        self._cancelling = False
        self._quiescent = asyncio.Event()
        self._quiescent.set()
        self._driver: asyncio.Task[None] | None = None
        self._closed = False
        self._stopping = False
        self.stop_error: Exception | None = None
        """Why the closing flush failed, if it did (the teardown reports it)."""
        self._waiting: dict[str, Settling] = {}
        """The handles of messages in the inbox that no turn took yet, by message id."""
        self._open: _OpenTurn | None = None
        """The running turn, and the handles of the messages it took."""
        self._closing_flush: tuple[BaseException | None] | None = None
        """Set once the teardown's flush ran: what it raised (``None``: nothing)."""

    # -- what the public agent reads ---------------------------------------------

    @property
    def id(self) -> str:
        return self._session.id

    @property
    def session(self) -> Session:
        return self._session

    @property
    def status(self) -> AgentStatus:
        return self._status

    @property
    def ctx(self) -> Context:
        return self._scope.ctx

    @property
    def closed(self) -> bool:
        """Whether the agent refuses input: it is being or has been disposed."""
        return self._closed

    @property
    def inbox(self) -> Inbox:
        return self._inbox

    def __repr__(self) -> str:
        return f"<AgentDriver {self.id} {self._status}>"

    # -- delivery ---------------------------------------------------------------

    def send(self, message: UserMessage, target: Target, wakeup: bool) -> TurnHandle:
        """Deliver ``message`` to ``target`` (logged first); wake the driver if ``wakeup``.
        Returns the message's turn handle.

        Raises:
            AgentDisposedError: the agent is being or has been disposed.
        """
        if self._closed:
            raise AgentDisposedError(f"agent {self.id!r} is disposed")
        self._inbox.insert(message, target)
        handle = self._track(message)
        if wakeup:
            self._wake_for(target)
        return handle

    async def submit(self, message: UserMessage, target: Target) -> TurnHandle:
        """Deliver ``message`` to ``target`` durably: return once its insert is on
        disk, and let the driver claim it only from then on (then wake it).

        In order: the insert is logged (before the first suspension, so a
        cancel called after this call started clears it); the message waits,
        unclaimable, while the session is flushed (input queued behind it waits
        too: the order is kept); then it becomes claimable and the driver wakes.
        When the flush fails (or this call is cancelled meanwhile) the message
        is withdrawn (a ``discard`` splice, so a resume agrees): it never runs
        and no turn is opened for it. A message cleared by a cancel meanwhile
        stays cleared: it never runs either.

        Returns the message's turn handle.

        Raises:
            AgentDisposedError: the agent is being or has been disposed.
            NotStoredError: the insert could not be stored (one line saying why);
                the message was withdrawn.
        """
        if self._closed:
            raise AgentDisposedError(f"agent {self.id!r} is disposed")
        self._inbox.insert(message, target, held=True)
        handle = self._track(message)
        self._quiescent.clear()
        try:
            await self._flush(self._session)
        except BaseException as exc:
            # Nobody holds the handle: the call raises.
            self._waiting.pop(message.id, None)
            self._inbox.withdraw(message.id)
            self._settled.set()
            # What queued behind it may be claimable now; or the agent is idle.
            self._wake.set()
            if not isinstance(exc, Exception):
                raise
            raise NotStoredError.of(self.id, "the prompt", exc) from exc
        self._settled.set()
        if self._inbox.release(message.id):
            self._wake_for(target)
        else:
            self._wake.set()
        return handle

    def _track(self, message: UserMessage) -> TurnHandle:
        settling = self._waiting[message.id] = Settling(message, self.store)
        return settling.handle

    async def store(self, what: str) -> None:
        """The durability barrier of this agent's turn handles: return once everything
        its session logged so far is stored (after the teardown: what its closing
        flush stored). ``what`` names what is stored in the error.

        Raises:
            NotStoredError: storing failed (its ``cause`` is the storage error).
        """
        if self._closing_flush is not None:
            (error,) = self._closing_flush
            if error is not None:
                raise NotStoredError.of(self.id, what, error) from error
            return
        try:
            await self._flush(self._session)
        except Exception as exc:
            raise NotStoredError.of(self.id, what, exc) from exc

    async def steering_settled(self) -> None:
        """Return once no steering message at the head of its FIFO is still being
        stored (:meth:`submit`): a steer submitted before a turn's last step
        boundary belongs to that turn, so the turn waits for its verdict rather
        than ending without it. The wait is bounded by the session's flush."""
        while self._inbox.holds_head(Target.STEERING):
            self._settled.clear()
            await self._settled.wait()

    def _wake_for(self, target: Target) -> None:
        """Wake the driver for input now claimable in ``target``."""
        if target is Target.STEERING:
            self._steer_wake = True
        self._quiescent.clear()
        self._wake.set()

    # -- stopping ---------------------------------------------------------------

    def cancel(self, cause: CancelCause) -> None:
        """Stop everything this agent has accepted so far.

        An effective call (a turn is running, or input is pending) emits
        ``agent/cancel-requested``, then clears both FIFOs (durably, as
        cancelled splices), then aborts the running turn. Cancelling an idle
        agent with an empty inbox does nothing. A cancel requested while one
        is being carried out (a listener of ``agent/cancel-requested`` that
        cancels again) is absorbed into it: one event per effective cancel.
        Input sent after the call is independent of it: the cancelled turn
        never claims it.
        """
        if self._cancelling:
            return
        signal = self._turn_signal
        running = signal is not None and not signal.cancelled
        if not running and not self._inbox:
            return
        self._cancelling = True
        try:
            self._events.emit(CANCEL_REQUESTED, self.agent, cause)
            self._steer_wake = False
            self._never_ran(self._inbox.cancel_all(), cause)
        finally:
            # Whatever clearing the inbox raised, the running turn is stopped.
            if running:
                assert signal is not None
                signal.cancel(cause)
            self._cancelling = False

    async def when_idle(self) -> None:
        """Resolve at true quiescence: no turn running and nothing queued that will start.

        A turn that starts while this waits is waited for too.
        """
        await self._quiescent.wait()

    # -- the driver (used by the factory and the turn runner) ---------------------

    def start(self, runner: TurnRunner) -> None:
        """Start the driver task; the factory's teardown awaits it in :meth:`stop`.

        Prompts a resumed inbox still holds were accepted before: they run.
        """
        if self._inbox.has(Target.QUEUED):
            self._quiescent.clear()
            self._wake.set()
        self._driver = asyncio.get_running_loop().create_task(
            self._drive(runner), name=f"agent:{self.id}"
        )

    async def stop(self) -> None:
        """Teardown's first step: cancel (cause ``disposed``), await the driver, flush.

        When it returns, no turn runs and the closing ``turn/end`` is durable
        (unless another host took the session over: that host closes the turn).
        """
        self._closed = True
        self._stopping = True
        try:
            self.cancel(CancelCause.DISPOSED)
        finally:
            # Whatever the cancel raised, the driver is woken to see it must stop.
            self._wake.set()
        try:
            parts = await self._events.gather(AGENT_STOPPING, self.agent)
        except Exception:
            log.exception("agent %s: an agent/stopping listener failed", self.id)
        else:
            # Only the work of an idle agent is answered here: no turn runs
            # to carry its receipt, so it stands between turns.
            write_receipt(self._session, self._session.last_turn, CancelCause.DISPOSED.value, parts)
        if self._driver is not None:
            await asyncio.wait({self._driver})
            if not self._driver.cancelled() and self._driver.exception() is not None:
                log.error("agent %s: driver failed", self.id, exc_info=self._driver.exception())
        try:
            await self._flush(self._session)
            self._closing_flush = (None,)
        except asyncio.CancelledError as exc:
            self._closing_flush = (RuntimeError("the closing flush was cancelled"),)
            if cancelling_current_task():
                raise
            self.stop_error = RuntimeError("the closing flush raised CancelledError")
            raise self.stop_error from exc
        except Exception as exc:
            self._closing_flush = (exc,)
            if taken_over(exc) is not None:
                # The session is another host's now: its closing events are
                # that host's to write (its repair closes the turn), and the
                # takeover was reported when it was found.
                log.debug("agent %s: closing events left to the new owner: %s", self.id, exc)
                return
            self.stop_error = exc
            raise
        finally:
            self._quiescent.set()

    def begin_turn(self) -> CancelSignal:
        """Mark a turn running; returns the signal that cancels it."""
        self._turn_signal = CancelSignal()
        self._set_status(AgentStatus.RUNNING)
        return self._turn_signal

    def open_turn(self, turn: int, seq: int) -> None:
        """Turn ``turn`` opened (its ``turn/start`` is at ``seq``): what it claims from
        now on, its handles name it."""
        self._open = _OpenTurn(TurnClaimed(turn=turn, seq=seq))

    def claim_turn(self) -> tuple[UserMessage, ...]:
        """Take the input of the opened turn: one queued prompt, then all pending
        steering."""
        return self._claimed(self._inbox.claim_turn())

    def claim_steering(self) -> tuple[UserMessage, ...]:
        """Take all pending steering into the running turn (at a step boundary)."""
        return self._claimed(self._inbox.claim_steering())

    def end_turn(self, reason: TurnEndReason) -> None:
        """The running turn closed with ``reason`` (its ``turn/end`` logged, unless
        logging it failed): the handles of what it took are ended."""
        self._turn_signal = None
        opened, self._open = self._open, None
        try:
            if opened is not None and opened.taken:
                ended = _ended(self._session, opened.claim, reason)
                for settling in opened.taken:
                    settling.settle(ended)
        finally:
            self._set_status(AgentStatus.IDLE)

    def _claimed(self, messages: tuple[UserMessage, ...]) -> tuple[UserMessage, ...]:
        opened = self._open
        assert opened is not None, "input is claimed only by an open turn"
        for message in messages:
            settling = self._waiting.pop(message.id, None)
            if settling is not None:
                settling.claim(opened.claim)
                opened.taken.append(settling)
        return messages

    def _never_ran(self, messages: tuple[UserMessage, ...], cause: CancelCause) -> None:
        """Settle the handles of ``messages``, dropped before any turn took them."""
        for message in messages:
            settling = self._waiting.pop(message.id, None)
            if settling is not None:
                settling.settle(NeverRan(cause=cause))

    def take_steer_wake(self) -> bool:
        woken, self._steer_wake = self._steer_wake, False
        return woken

    def _startable(self) -> bool:
        return self._inbox.has(Target.QUEUED) or (
            self._steer_wake and self._inbox.has(Target.STEERING)
        )

    async def _drive(self, runner: TurnRunner) -> None:
        try:
            while not self._stopping:
                if not self._startable():
                    self._steer_wake = False
                    self._wake.clear()
                    if not self._inbox.holding:
                        # A message waiting to be stored may still start a turn.
                        self._quiescent.set()
                    await self._wake.wait()
                    continue
                self._quiescent.clear()
                await self._run_turn(runner)
        finally:
            # Whatever ends the driver, no turn can run any more: input is
            # refused from now on, and nobody waits forever on a turn that
            # cannot come.
            self._closed = True
            waiting, self._waiting = self._waiting, {}
            for settling in waiting.values():
                settling.settle(NeverRan(cause=CancelCause.DISPOSED))
            self._quiescent.set()

    async def _run_turn(self, runner: TurnRunner) -> None:
        """Run one turn in a task of its own, which the driver task owns and awaits.

        A cancellation of the driver task from outside (a task group or a host
        tearing down, a program cancelling it, the event loop shutting down)
        reaches the turn as every stop does: :meth:`cancel` with cause
        ``task-cancelled``. The turn then stops its tools and closes with its
        stop receipt and its ``turn/end``; once they are stored the
        cancellation goes on and the driver ends. A second cancellation while
        the turn closes cancels the turn's task itself: the turn closes at
        once, without waiting for its tools. A cancellation of the turn's task
        itself ends the driver too, once the turn's closing events are stored.

        Raises:
            asyncio.CancelledError: the driver task was cancelled.
        """
        turn = asyncio.get_running_loop().create_task(
            runner.run_turn(self), name=f"agent:{self.id}:turn"
        )
        cancelled: asyncio.CancelledError | None = None
        while not turn.done():
            try:
                await asyncio.wait({turn})
            except asyncio.CancelledError as exc:
                if cancelled is not None:
                    turn.cancel()
                    continue
                cancelled = exc
                try:
                    self.cancel(CancelCause.TASK_CANCELLED)
                except Exception:
                    log.exception("agent %s: stopping the cancelled turn failed", self.id)
                    turn.cancel()
                except BaseException:
                    turn.cancel()
                    raise
        if cancelled is None and not turn.cancelled():
            turn.result()
            return
        if not turn.cancelled() and (error := turn.exception()) is not None:
            log.error("agent %s: the cancelled turn failed", self.id, exc_info=error)
        try:
            await self._flush(self._session)
        except Exception:
            log.exception("agent %s: the cancelled turn's closing events were not stored", self.id)
        if cancelled is not None:
            raise cancelled
        turn.result()  # its own cancellation: the driver ends with it

    def _set_status(self, status: AgentStatus) -> None:
        if status is not self._status:
            self._status = status
            self._events.emit(AGENT_STATUS, self.agent, status)

    def _notify_inbox(
        self, event: InboxNotice, messages: tuple[UserMessage, ...], queue: Target
    ) -> None:
        self._events.emit(event, self.agent, messages, queue)


class _OpenTurn:
    """The running turn: where it starts, and the handles of the messages it took."""

    __slots__ = ("claim", "taken")

    def __init__(self, claim: TurnClaimed) -> None:
        self.claim = claim
        self.taken: list[Settling] = []


def _ended(session: Session, claim: TurnClaimed, reason: TurnEndReason) -> TurnOutcome:
    """How the turn of ``claim`` ended: ``reason``, where its ``turn/end`` is, and the
    text of its last answer (read back from the end of the turn's events)."""
    end_seq = len(session.events) - 1
    answer = ""
    for event in reversed(session.events):
        if event.seq <= claim.seq:
            break
        if event.type == AssistantMessageEvent.type:
            payload = event.payload
            if isinstance(payload, AssistantMessageEvent):
                answer = payload.text
                break
    return TurnEnded(
        turn=claim.turn, start_seq=claim.seq, end_seq=end_seq, reason=reason, answer=answer
    )
