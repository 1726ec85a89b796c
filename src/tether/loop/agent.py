"""``LoopAgent``: what everyone but the agent loop holds of an agent.

The registry (``ctx.agents.get``/``list``), every event, hook and tool, and an
:class:`~tether.agent.AgentHandle` carry this object. It offers the
:class:`~tether.agent.Agent` protocol and nothing else: input, ``cancel()``,
``when_idle()``, and reads. Tearing the agent down takes the handle's
``dispose()``; the loop's own verbs (starting and stopping the driver, turn
bookkeeping) live on :class:`~tether.loop.driver.AgentDriver`, which no
observer can reach through a public name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.agent.types import AgentStatus, CancelCause, Target, UserMessage, public_cancel_cause

if TYPE_CHECKING:
    from tether.agent.turns import TurnHandle
    from tether.loop.driver import AgentDriver
    from tether.runtime import Context
    from tether.session.log import Session


class LoopAgent:
    """An agent driven by the agent loop (implements :class:`tether.agent.Agent`)."""

    __slots__ = ("_driver",)

    def __init__(self, driver: AgentDriver) -> None:
        self._driver = driver

    @property
    def id(self) -> str:
        """The agent's id, which is its session's id."""
        return self._driver.id

    @property
    def session(self) -> Session:
        """The agent's session log (read it; the agent appends to it)."""
        return self._driver.session

    @property
    def status(self) -> AgentStatus:
        """``idle`` or ``running``; every change emits ``agent/status``."""
        return self._driver.status

    @property
    def ctx(self) -> Context:
        """The agent-scoped context: registrations unwind with the agent."""
        return self._driver.ctx

    def send(self, message: UserMessage, target: Target, wakeup: bool) -> TurnHandle:
        """Deliver ``message`` to ``target`` (logged first); wake the driver if ``wakeup``.
        Returns its turn handle.

        Raises:
            AgentDisposedError: the agent is being or has been disposed.
        """
        return self._driver.send(message, target, wakeup)

    async def submit(self, message: UserMessage, target: Target = Target.QUEUED) -> TurnHandle:
        """Deliver ``message`` to ``target`` and wake the driver, durably: return its turn
        handle once it is stored; it runs only then, and never when storing it fails.

        See :meth:`tether.agent.Agent.submit`.

        Raises:
            AgentDisposedError: the agent is being or has been disposed.
            NotStoredError: it could not be stored; it was withdrawn and never runs.
        """
        return await self._driver.submit(message, target)

    def followup(self, message: UserMessage) -> TurnHandle:
        """Queue ``message`` as its own next turn and wake the driver (without waiting for
        it to be stored: see :meth:`submit`); returns its turn handle."""
        return self._driver.send(message, Target.QUEUED, True)

    def steer(self, message: UserMessage) -> TurnHandle:
        """Deliver at the next step boundary of the running turn (or start a turn);
        returns its turn handle (claimed by the turn it joins)."""
        return self._driver.send(message, Target.STEERING, True)

    def inject(self, message: UserMessage) -> TurnHandle:
        """Add model-facing context for the next request, without waking anything;
        returns its turn handle."""
        return self._driver.send(message, Target.STEERING, False)

    def cancel(self, cause: CancelCause | None = None) -> None:
        """The single public stop: end everything accepted so far.

        ``cause`` is :attr:`CancelCause.USER` (the default),
        :attr:`CancelCause.PARENT` or :attr:`CancelCause.HANDOFF` (a draining
        host hands the session to another). An effective call emits
        ``agent/cancel-requested``, clears both FIFOs durably and aborts the
        running turn, which closes ``aborted {cause}``. Input accepted after
        the call runs normally, as its own turn.

        Raises:
            TypeError: ``cause`` is not a :class:`CancelCause`.
            ValueError: ``cause`` is ``disposed`` (the teardown's own cause).
        """
        self._driver.cancel(public_cancel_cause(cause))

    async def when_idle(self) -> None:
        """Resolve at true quiescence: no turn running, nothing queued that will start."""
        await self._driver.when_idle()

    def __repr__(self) -> str:
        return f"<LoopAgent {self.id} {self.status}>"


def driver_of(agent: object) -> AgentDriver | None:
    """The loop's driver behind ``agent``, for the loop's own services; ``None``
    for an agent some other factory made. Never hand the result out."""
    return agent._driver if isinstance(agent, LoopAgent) else None
