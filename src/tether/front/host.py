"""The session host: the sessions a front end owns, how their calls are asked, one teardown.

The ACP bridge and the web hub each keep one :class:`SessionHost`; what it
does is the same for both, so it is written once here and the front end
only answers its :class:`Presenter` (how to refuse, how to show a call, how
to put a question to a person).

**Owned work.** :meth:`SessionHost.spawn` starts a task the host owns (its
teardown awaits it); creates and loads run there, never in the request
handler, so a handler that is cancelled abandons nothing. Spawning on a
closing host raises the front end's closed error and starts nothing.

**Publish or dispose.** :meth:`SessionHost.publish` keeps a session the front
end opened (by agent id) — unless the host began closing meanwhile: then the
session is disposed and the open fails with the closed error, so nothing
opened during a teardown stays registered.

**One close.** :meth:`SessionHost.close` is memoized: from the first call the
host refuses new work; then :meth:`Presenter.on_closing` runs, and — in
parallel — every published session is disposed (its agent's teardown: cancel
with cause ``disposed``, quiescence, the durable flush) and every owned task
is awaited. Failures other than the front end's expected ones are logged as
one group; then :meth:`Presenter.on_closed` runs. Every call awaits the one run.

**Forget.** ``agent/disposed`` of a published session's agent (another owner
disposed it) drops the session (:meth:`SessionHost.forget`); during the
teardown nothing is dropped (the teardown disposes it anyway).

**The governing session.** A call of a child agent (one another agent
delegated to) is ruled by its root: the host walks the delegators up through
the agents registry to the top live ancestor, so a child never runs with
more permission than the session that started it, and its questions are asked
there (:meth:`SessionHost.governing`). The host governs that root if the
front end says so (:meth:`Presenter.governs`).

**Before a call runs** (``tool/before-execute``, :meth:`SessionHost.before_execute`):
the call's preview is computed once and handed to the front end
(:meth:`Presenter.previewed`); the governing session's mode decides whether
it is asked (:func:`~tether.front.asking.approve`); an allowed call is
reported started (:meth:`Presenter.started`) and goes on marked ``approved``.
A question (``permission/request``, :meth:`SessionHost.ask`) reads that same
preview (an invocation computes its preview once, for every listener that
asks: the permission rules, the host) and goes to the question asker
(:func:`~tether.front.asking.ask`), which the front end presents.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from tether.agent.events import AGENT_DISPOSED
from tether.agent.registry import AGENTS
from tether.front.asking import (
    PERMISSION_REQUEST,
    PermissionDecision,
    Question,
    approve,
    ask,
    lineage,
    preview_of,
)
from tether.persist.service import store_created
from tether.session.store import SESSIONS
from tether.tools.execute import BEFORE_EXECUTE

if TYPE_CHECKING:
    from tether.agent.types import Agent
    from tether.front.asking import Answer
    from tether.runtime import Context
    from tether.runtime.effects import Disposer
    from tether.tools.execute import ToolInvocation
    from tether.tools.permission import Mode
    from tether.tools.preview import ToolPreview

log = logging.getLogger(__name__)

T = TypeVar("T")


class Hosted(Protocol):
    """A session as a front end keeps it: its agent, and the handle's teardown."""

    @property
    def agent(self) -> Agent: ...

    @property
    def dispose(self) -> Callable[[], Awaitable[None]]:
        """Runs the agent's one teardown (see :class:`~tether.agent.AgentHandle`)."""
        ...


S = TypeVar("S", bound=Hosted)


class Presenter(Protocol):
    """What a front end answers its host: refusals, and how calls are shown and asked."""

    expected: tuple[type[Exception], ...]
    """Failures of owned work the teardown does not log (their callers report them)."""

    def refusal(self, opening: str | None) -> Exception:
        """The error of a closing host (for the session ``opening``, disposed unpublished)."""
        ...

    def governs(self, agent: Agent) -> bool:
        """Whether the front end rules the calls of ``agent`` and its children (a root)."""
        ...

    def mode(self, governing: Agent) -> Mode:
        """The permission mode of ``governing``'s session."""
        ...

    def previewed(self, governing: Agent, agent: Agent, call_id: str, preview: ToolPreview) -> None:
        """``agent``'s call ``call_id`` will do ``preview`` (before it is asked or runs)."""
        ...

    def started(self, governing: Agent, agent: Agent, call_id: str) -> None:
        """``agent``'s call ``call_id`` was allowed and runs now."""
        ...

    async def present(self, question: Question) -> Answer:
        """Put ``question`` to a person (see :data:`~tether.front.asking.Present`)."""
        ...

    def on_forgotten(self, agent: Agent) -> None:
        """The session of ``agent``, disposed by another owner, was dropped."""
        ...

    def on_closing(self) -> None:
        """The teardown begins: settle what is the front end's own (before any dispose)."""
        ...

    def on_closed(self, disposed: int) -> None:
        """The teardown has completed (``disposed`` sessions)."""
        ...


_PUBLISHED: dict[str, tuple[Agent, SessionHost[Any]]] = {}
"""The host that published each live session, by agent id, across the process: a
front end that governs every agent (the web app) leaves out those another front end
governs (the sessions of an ACP client of ``/acp``), so a call is asked in one place."""


class SessionHost(Generic[S]):
    """The sessions one front end owns (see the module docs)."""

    def __init__(self, ctx: Context, front: Presenter, *, answer_within: float, name: str) -> None:
        self._ctx = ctx
        self._front = front
        self._name = name
        self.answer_within = answer_within
        """Seconds a question may stay unanswered; then it is a rejection."""
        self._sessions: dict[str, S] = {}
        self._work: set[asyncio.Task[Any]] = set()
        """The preview of each call being approved, by agent and call id: what its
        question shows, computed once (a preview may read a large file)."""
        self._closing = False
        self._teardown: asyncio.Task[None] | None = None

    # -- the sessions ------------------------------------------------------------------

    @property
    def sessions(self) -> list[S]:
        """The published sessions, in the order they were published."""
        return list(self._sessions.values())

    def get(self, session_id: str) -> S | None:
        """The published session ``session_id``, if any."""
        return self._sessions.get(session_id)

    def session_of(self, agent: Agent | None) -> S | None:
        """The published session of ``agent`` (that very agent), if any."""
        if agent is None:
            return None
        session = self._sessions.get(agent.id)
        return session if session is not None and session.agent is agent else None

    async def publish(self, session: S) -> S:
        """Keep ``session`` — unless the host began closing meanwhile: then dispose it.

        Raises:
            Exception: the front end's :meth:`~Presenter.refusal` (``session`` was disposed).
        """
        if self._closing:
            await session.dispose()
            raise self._front.refusal(session.agent.id)
        self._sessions[session.agent.id] = session
        _PUBLISHED[session.agent.id] = (session.agent, self)
        return session

    def governed_elsewhere(self, agent: Agent) -> bool:
        """Whether another host of this process published ``agent``'s session."""
        entry = _PUBLISHED.get(agent.id)
        return entry is not None and entry[0] is agent and entry[1] is not self

    def _release(self, session: S | None) -> None:
        if session is not None and _PUBLISHED.get(session.agent.id, (None, None))[1] is self:
            del _PUBLISHED[session.agent.id]

    async def store(self, session: S, *, created: bool = False) -> None:
        """Return once everything ``session`` appended so far is on disk; with ``created``,
        a session without events is stored as its header. A session no longer live was
        flushed by its teardown: nothing is left to wait for.

        A created session that could not be stored was never acknowledged, so nobody
        can use it: it is dropped and disposed before this raises.

        Raises:
            Exception: from the store (the events stay pending and are written by the
                session's next append or flush).
        """
        log_ = session.agent.session
        store = self._ctx.service(SESSIONS)
        if not store.is_live(log_):
            return
        try:
            if created:
                await store_created(self._ctx, log_)
            else:
                await store.flush(log_)
        except Exception:
            if created:
                if self.get(log_.id) is session:
                    self.drop(log_.id)
                try:
                    await session.dispose()
                except Exception:
                    log.warning("session %s: disposing the unstored session failed", log_.id)
            raise

    def drop(self, session_id: str) -> S | None:
        """Stop keeping ``session_id`` (its owner disposes it); the session, if it was kept."""
        session = self._sessions.pop(session_id, None)
        self._release(session)
        return session

    def forget(self, agent: Agent) -> None:
        """``agent/disposed``: drop the session of ``agent`` disposed by another owner
        and tell the front end (:meth:`Presenter.on_forgotten`); nothing is dropped
        while the host closes."""
        if self.session_of(agent) is None or self._closing:
            return
        self._release(self._sessions.pop(agent.id))
        self._front.on_forgotten(agent)

    # -- owned work ----------------------------------------------------------------------

    @property
    def closing(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closing

    def check_open(self) -> None:
        """Raises: the front end's :meth:`~Presenter.refusal` when the host is closing."""
        if self._closing:
            raise self._front.refusal(None)

    def spawn(self, work: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
        """Start ``work`` in a task the host owns (its teardown awaits it).

        Raises:
            Exception: the front end's :meth:`~Presenter.refusal` when the host is closing
                (``work`` is closed, never run).
        """
        if self._closing:
            work.close()
            raise self._front.refusal(None)
        return self.keep(asyncio.get_running_loop().create_task(work, name=name))

    def keep(self, task: asyncio.Task[T]) -> asyncio.Task[T]:
        """Own ``task`` (started elsewhere): the teardown awaits it."""
        self._work.add(task)
        task.add_done_callback(self._work.discard)
        return task

    async def owned(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` in a task the host owns; a cancel of the caller leaves it running.

        Raises:
            What :meth:`spawn` raises, and what ``work`` raises.
        """
        return await asyncio.shield(self.spawn(work))

    # -- teardown --------------------------------------------------------------------------

    def close(self) -> Awaitable[None]:
        """Begin the one teardown (see the module docs); an awaitable of it."""
        if self._teardown is None:
            self._closing = True
            self._teardown = asyncio.get_running_loop().create_task(
                self._close(), name=f"{self._name}-teardown"
            )
        return asyncio.shield(self._teardown)

    async def _close(self) -> None:
        self._front.on_closing()
        sessions = list(self._sessions.values())
        outcomes = await asyncio.gather(
            *(session.dispose() for session in sessions), *self._work, return_exceptions=True
        )
        for session in sessions:
            self._release(session)
        self._sessions.clear()
        expected = self._front.expected
        failures = [o for o in outcomes if isinstance(o, Exception) and not isinstance(o, expected)]
        if failures:
            log.error(
                "closing the %s sessions: %d failure(s)",
                self._name,
                len(failures),
                exc_info=ExceptionGroup(f"{self._name} teardown", failures),
            )
        log.debug("%s closed: %d session(s) disposed", self._name, len(sessions))
        self._front.on_closed(len(sessions))

    # -- tool calls -------------------------------------------------------------------------

    def governing(self, agent: Agent | None) -> Agent | None:
        """The agent whose session rules ``agent``'s calls: its top live ancestor
        (``agent`` itself for a root), if the front end governs it; else ``None``."""
        if agent is None:
            return None
        *_, found = lineage(agent, self._ctx.get(AGENTS))
        return found if self._front.governs(found) else None

    async def before_execute(
        self,
        invocation: ToolInvocation,
        next_: Callable[[ToolInvocation], Awaitable[ToolInvocation]],
    ) -> ToolInvocation:
        """``tool/before-execute``: preview once, apply the governing session's mode (a
        call whose preview needs approval is asked in any mode), report it started.

        An allowed call goes on marked ``approved``; a question withdrawn by a cancel
        ends the call cancelled.

        Raises:
            Veto: the call was not allowed.
        """
        agent = invocation.exec.agent
        governing = self.governing(agent)
        if agent is None or governing is None:
            return await next_(invocation)
        call_id = invocation.exec.call_id
        preview = await preview_of(invocation)
        if preview is not None:
            self._front.previewed(governing, agent, call_id, preview)
        approval = None if preview is None else preview.approval
        mode = self._front.mode(governing)
        approved = await approve(self._ctx, agent, invocation, mode, approval)
        if approved is None:
            return invocation
        self._front.started(governing, agent, call_id)
        return await next_(approved)

    def listening(self) -> Iterator[Disposer]:
        """Listen to ``tool/before-execute`` (:meth:`before_execute`), ``permission/request``
        (:meth:`ask`) and ``agent/disposed`` (:meth:`forget`): the removers, for the body
        of the front end's composite effect to yield before its :meth:`close`."""
        yield self._ctx.listen(BEFORE_EXECUTE, self.before_execute)
        yield self._ctx.listen(PERMISSION_REQUEST, self.ask)
        yield self._ctx.listen(AGENT_DISPOSED, self.forget)

    async def ask(self, agent: Agent, invocation: ToolInvocation) -> PermissionDecision | None:
        """``permission/request``: ask about ``agent``'s call in its governing session
        (``None`` for an agent the front end does not govern)."""
        governing = self.governing(agent)
        if governing is None:
            return None
        preview = await preview_of(invocation)  # computed once per call (see ToolInvocation)
        question = Question(agent, governing, invocation, preview)
        return await ask(question, self._front.present, within=self.answer_within)
