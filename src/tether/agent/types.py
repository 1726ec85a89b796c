"""The Agent contract: what every agent offers, whoever implements it.

The agent loop (``tether.loop``) implements it; plugins, the ACP bridge and
programs only ever see these types.
"""

from __future__ import annotations

import enum
import itertools
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import msgspec

from tether.content import ImageRef, TextBlock
from tether.session.budget import Budget
from tether.session.model import FALLBACK_MODEL

if TYPE_CHECKING:
    from tether.agent.turns import TurnHandle
    from tether.rewind.worktree import Worktree
    from tether.runtime import Context
    from tether.session.log import Session


class CancelCause(enum.StrEnum):
    """Why work was cancelled; recorded in ``turn/end {aborted, cause}``."""

    USER = "user"
    """A person asked (Ctrl-C, ACP ``session/cancel``); the default."""
    PARENT = "parent"
    """The agent that spawned this one cancelled it."""
    DISPOSED = "disposed"
    """The agent is being torn down (only the teardown path uses it)."""
    HANDOFF = "handoff"
    """Its host is draining and hands the session to another host (``tether drain``):
    the turn stops there, and the host that takes the session over goes on."""
    TASK_CANCELLED = "task-cancelled"
    """The asyncio task driving the agent was cancelled by its program, not through
    ``cancel()``: a task group or a host tearing down, the event loop shutting down.
    The turn closes as any cancelled turn does; the agent runs no further turn."""


PUBLIC_CANCEL_CAUSES = frozenset({CancelCause.USER, CancelCause.PARENT, CancelCause.HANDOFF})
"""The causes a caller of ``Agent.cancel`` may give; ``disposed`` is the teardown's own,
``task-cancelled`` the driver's when its task is cancelled from outside."""


def public_cancel_cause(cause: object) -> CancelCause:
    """Check the cause given to a public ``cancel(cause)``; ``None`` means ``user``.

    Raises:
        TypeError: ``cause`` is not a :class:`CancelCause`.
        ValueError: ``cause`` is ``disposed`` or ``task-cancelled``, which only the
            agent loop gives.
    """
    if cause is None:
        return CancelCause.USER
    if not isinstance(cause, CancelCause):
        raise TypeError(
            "cancel() takes CancelCause.USER, PARENT or HANDOFF, got "
            f"{type(cause).__name__} {cause!r}"
        )
    if cause not in PUBLIC_CANCEL_CAUSES:
        raise ValueError(
            "cancel() takes CancelCause.USER, PARENT or HANDOFF; "
            f"{cause.value!r} is reserved to the agent loop"
        )
    return cause


class AgentStatus(enum.StrEnum):
    IDLE = "idle"
    RUNNING = "running"


class Target(enum.StrEnum):
    """Where a delivered message goes."""

    QUEUED = "queued"
    """Its own next turn."""
    STEERING = "steering"
    """The next step boundary of the running turn (or a new turn when idle)."""


_ID_PREFIX = os.urandom(6).hex()
_id_counter = itertools.count(1)


def new_message_id() -> str:
    """A message id unique in this process (a counter) and across processes (a random prefix).

    Cheaper than a uuid4 per message, which reads the system's entropy each time.
    """
    return f"m{_ID_PREFIX}{next(_id_counter):x}"


class UserMessage(msgspec.Struct, frozen=True):
    """Input delivered to an agent: a prompt, a steer, a notice.

    ``source`` says who sent it (``user``, ``plugin``, ``notice``, …); ``id``
    is unique and is how the inbox log refers to it.
    """

    content: tuple[TextBlock | ImageRef, ...]
    source: str = "user"
    id: str = msgspec.field(default_factory=new_message_id)

    def __post_init__(self) -> None:
        if not self.content:
            raise ValueError("a user message needs at least one content block")

    @classmethod
    def text(cls, text: str, *, source: str = "user") -> UserMessage:
        return cls((TextBlock(text),), source=source)

    @property
    def plain_text(self) -> str:
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))


class Agent(Protocol):
    """A live agent. ``id`` is its session id: one identity everywhere.

    Observers (``ctx.agents.get``, ``list``, events) receive this bare object;
    tearing an agent down needs its :class:`AgentHandle`.
    """

    @property
    def id(self) -> str: ...

    @property
    def session(self) -> Session: ...

    @property
    def status(self) -> AgentStatus: ...

    @property
    def ctx(self) -> Context:
        """The agent-scoped context: registrations unwind with the agent."""
        ...

    def send(self, message: UserMessage, target: Target, wakeup: bool) -> TurnHandle:
        """Deliver ``message`` to ``target``; wake the driver if ``wakeup``. Returns the
        message's :class:`~tether.agent.turns.TurnHandle` (claimed → ended → durable)."""
        ...

    async def submit(self, message: UserMessage, target: Target = Target.QUEUED) -> TurnHandle:
        """Deliver ``message`` to ``target`` and wake the driver — durably: the send to
        acknowledge to someone. Returns the message's
        :class:`~tether.agent.turns.TurnHandle` once the delivery is on disk; the driver claims
        the message only from then on (input sent behind it waits: the order is kept).
        When storing it fails, the message is withdrawn (logged as discarded): it never
        runs, and no turn is opened for it. A cancel meanwhile clears it as any other.

        Raises:
            AgentDisposedError: the agent is being or has been disposed.
            NotStoredError: it could not be stored (one line saying why).
        """
        ...

    def followup(self, message: UserMessage) -> TurnHandle:
        """Queue ``message`` as its own next turn and wake the driver, without waiting for
        it to be stored (see :meth:`submit`); returns its turn handle."""
        ...

    def steer(self, message: UserMessage) -> TurnHandle:
        """Deliver at the next step boundary of the running turn (or start a turn);
        returns its turn handle, claimed by the turn it joins."""
        ...

    def inject(self, message: UserMessage) -> TurnHandle:
        """Add model-facing context for the next request, without waking anything;
        returns its turn handle."""
        ...

    def cancel(self, cause: CancelCause | None = None) -> None:
        """The single public stop primitive (cause ``user`` when omitted).

        Raises:
            TypeError, ValueError: ``cause`` is not ``USER``, ``PARENT`` or ``HANDOFF``
                (see :func:`public_cancel_cause`).
        """
        ...

    async def when_idle(self) -> None:
        """Resolve at true quiescence: no turn running, nothing queued that will start."""
        ...


class AgentHandle(msgspec.Struct, frozen=True):
    """An agent plus the capability to tear it down.

    ``dispose()`` runs the agent's one memoized teardown; when it returns, the
    closing ``turn/end`` is durable and the agent and its session are gone.
    """

    agent: Agent
    dispose: Callable[[], Awaitable[None]]
    worktree: Worktree | None = None
    """The git worktree the agent owns, when it was created with ``isolation="worktree"``
    (see :mod:`tether.agent.worktree`)."""


class AgentOptions(msgspec.Struct, frozen=True):
    """What an agent is created with (beyond its session)."""

    model: str = FALLBACK_MODEL
    base_url: str | None = None
    """The endpoint ``model`` is reached at, when it was chosen apart from the
    provider's configuration; recorded in a new session's header (see
    :mod:`tether.session.model`). ``None``: the provider's configured one."""
    system: str | None = None
    """Replaces the default system prompt's base (see ``docs/agents.md``)."""
    system_append: str | None = None
    """Added at the end of the system prompt."""
    tools: Sequence[str] | None = None
    """Tool names the model may call; ``None`` means every registered tool."""
    max_steps: int = 50
    budget: Budget | None = None
    """What the agent's model requests may spend (see ``docs/budget.md``); ``None``:
    no limit. A child agent draws on its root's budget instead of its own."""
