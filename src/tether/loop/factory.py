"""Creating and resuming agents, and the one teardown each agent has.

An agent's whole life is **one composite effect**. Its body, in order:

1. open the agent's scope (a fiber for its scoped registrations);
2. build the agent, run the ``setup`` callback (scoped tools, listeners), then
   the ``agent/setup`` listeners (plugins composing every agent's scope);
3. check that every owner is still alive — otherwise publish nothing;
4. publish: enter the session, enter the agent, announce the session,
   emit ``agent/created`` and ``agent/session-start``, start the driver.

Its disposers run as one LIFO chain, so teardown is exactly the reverse:
stop the driver (cancel with cause ``disposed``, await the driver's exit and
the session flush) → detach the agent (``agent/disposed``) → detach the
session (``session/disposed``) → unwind the scope. If the body fails part way,
what it did is undone in the same order and nothing stays published.

Three owners reach that one chain: the handle's ``dispose()``, the caller's
fiber, and the agent loop's fiber (the factory provider). Effects are
single-shot, so concurrent or repeated disposal runs it once, and every
awaiter returns after it completes.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec.structs

from tether.agent.errors import AgentConflictError, AgentCreateError, AgentError
from tether.agent.events import AGENT_CREATED, AGENT_SESSION_START, AGENT_SETUP
from tether.agent.registry import AGENTS, AgentRegistry, Setup
from tether.agent.types import AgentHandle, AgentOptions
from tether.loop.driver import AgentDriver
from tether.persist.backends.lease import SessionLeasedError
from tether.persist.service import PERSISTENCE
from tether.runtime import Effect, FiberInactiveError
from tether.session.lineage import Lineage
from tether.session.log import Session
from tether.session.model import ModelChoice, header_labels, session_model
from tether.session.store import SESSIONS, SessionConflictError, SessionStore

if TYPE_CHECKING:
    from tether.loop.turn import TurnRunner
    from tether.runtime import Context, Fiber

log = logging.getLogger(__name__)

SCOPE_READS = ("agents", "sessions", "llm", "tools")
"""Services an agent's scope may read as ``agent.ctx.<name>``."""


def header_meta(
    options: AgentOptions, extra: Mapping[str, str] | None, *, delegated: bool = False
) -> dict[str, str]:
    """The labels a new session's header records: its model (and base URL, see
    :mod:`tether.session.model`), the tools it is restricted to (a JSON list,
    when it is and no delegation records them, see
    :mod:`tether.session.lineage`), and ``extra``."""
    labels = {**(extra or {}), **header_labels(ModelChoice(options.model, options.base_url))}
    if options.tools is not None and not delegated:
        labels["tools"] = json.dumps(list(options.tools))
    return labels


class LoopFactory:
    """The :class:`~tether.agent.registry.AgentFactory` of the agent loop."""

    def __init__(self, ctx: Context, runner: TurnRunner, defaults: AgentOptions) -> None:
        self._ctx = ctx
        self._runner = runner
        self._defaults = defaults

    @property
    def _store(self) -> SessionStore:
        return self._ctx.service(SESSIONS)

    @property
    def _registry(self) -> AgentRegistry:
        return self._ctx.service(AGENTS).registry

    async def create(
        self,
        caller: Context,
        *,
        session_id: str | None,
        cwd: str | None,
        options: AgentOptions | None,
        setup: Setup | None,
        meta: Mapping[str, str] | None = None,
        lineage: Lineage | None = None,
        model: str | None = None,
    ) -> AgentHandle:
        options = options or self._defaults
        if model is not None:
            # A model chosen for this session drops the base URL of the one it replaces.
            options = msgspec.structs.replace(options, model=model, base_url=None)
        delegated = lineage is not None and lineage.delegation is not None
        try:
            session = self._store.prepare(
                session_id,
                cwd=cwd,
                meta=header_meta(options, meta, delegated=delegated),
                lineage=lineage,
            )
        except SessionConflictError as exc:
            raise AgentConflictError(str(exc)) from None
        persistence = self._ctx.get(PERSISTENCE)
        if persistence is None:
            return await self._publish(caller, session, options, setup)
        if session_id is not None:
            # A chosen id may be chosen by another process too: the lease
            # decides, and under it the id must not be stored yet.
            try:
                await persistence.claim(session)
            except (SessionConflictError, SessionLeasedError) as exc:
                raise AgentConflictError(str(exc)) from None
        try:
            return await self._publish(caller, session, options, setup)
        except BaseException:
            persistence.abandon(session)
            raise

    async def resume(
        self,
        caller: Context,
        session_id: str,
        *,
        options: AgentOptions | None,
        setup: Setup | None,
    ) -> AgentHandle:
        persistence = self._ctx.get(PERSISTENCE)
        if persistence is None:
            raise AgentError("resuming a session needs a persistence plugin (tether.persist.jsonl)")
        if self._registry.get(session_id) is not None:
            raise AgentConflictError(f"agent {session_id!r} is already live")
        try:
            session = await persistence.prepare_resume(session_id)
        except SessionConflictError as exc:
            raise AgentConflictError(str(exc)) from None
        if options is None:
            start = session_model(session, configured=self._defaults.model, at=0)
            options = msgspec.structs.replace(
                self._defaults, model=start.model, base_url=start.base_url
            )
        try:
            return await self._publish(caller, session, options, setup)
        except BaseException:
            persistence.abandon(session)
            raise

    async def _publish(
        self, caller: Context, session: Session, options: AgentOptions, setup: Setup | None
    ) -> AgentHandle:
        store, registry, loop_fiber = self._store, self._registry, self._ctx.fiber
        owners = _distinct(caller.fiber, loop_fiber)
        built: list[AgentDriver] = []

        async def lifecycle() -> AsyncIterator[Callable[[], Any]]:
            scope = self._ctx.runtime.scope(
                caller.fiber,
                f"agent:{session.id}",
                reads=SCOPE_READS,
                event_filter=_only_about(session),
            )
            yield scope.dispose
            driver = AgentDriver(session, scope, options, events=self._ctx, flush=store.flush)
            built.append(driver)
            # Its budget (or its root's) is known from the start: a title drawn before
            # its first turn draws on it too.
            self._runner.budgets.ledger(driver)
            agent = driver.agent
            if setup is not None:
                result = setup(agent)
                if inspect.isawaitable(result):
                    await result
            await self._ctx.parallel(AGENT_SETUP, agent)
            for owner in owners:
                owner.check_accepts_effects(f"agent {session.id!r}")
            store.enter(session)
            yield lambda: store.detach(session)
            registry.enter(agent)
            yield lambda: registry.detach(agent)
            store.announce(session)
            self._ctx.emit(AGENT_CREATED, agent)
            self._ctx.emit(AGENT_SESSION_START, agent)
            driver.start(self._runner)
            yield driver.stop

        try:
            effect = await Effect.establish(lifecycle, f"agent:{session.id}")
        except (SessionConflictError, AgentConflictError) as exc:
            raise AgentConflictError(str(exc)) from None
        except FiberInactiveError as exc:
            raise AgentCreateError(
                f"agent {session.id!r} was not created: its owner is unloading ({exc})"
            ) from None
        except Exception as exc:
            raise AgentCreateError(f"agent {session.id!r} was not created: {exc}") from exc
        # No await between the owner check inside the body and this adoption:
        # no owner can start unloading in between.
        teardown = _Teardown(effect, built[0])
        for owner in owners:
            teardown.add_owner(owner)
        return AgentHandle(built[0].agent, teardown.dispose)


class _Teardown:
    """The one teardown of an agent, reachable from each of its owners.

    It runs once, in a task of its own: every caller of :meth:`dispose` (the
    handle, a second or third call, an owner fiber unloading) awaits that one
    run and returns only after the whole chain has finished. A caller that is
    itself cancelled while waiting leaves the teardown running to its end.
    """

    def __init__(self, effect: Effect, driver: AgentDriver) -> None:
        self._effect = effect
        self._driver = driver
        self._anchors: list[Effect] = []
        self._run: asyncio.Task[None] | None = None

    def add_owner(self, owner: Fiber) -> None:
        anchor = Effect(f"owns {self._effect.label}")
        anchor.push(self.dispose)
        owner.adopt(anchor)
        self._anchors.append(anchor)

    async def dispose(self) -> None:
        """Run the agent's teardown chain (once, however many owners ask).

        Raises:
            AgentError: the closing events could not be written (the rest of
                the teardown still ran: the agent and its session are gone).
        """
        if self._run is None:
            self._run = asyncio.get_running_loop().create_task(
                self._unwind(), name=f"teardown:{self._driver.id}"
            )
        await asyncio.shield(self._run)
        error = self._driver.stop_error
        if error is not None:
            raise AgentError(
                f"agent {self._driver.id!r}: its closing events could not be written: {error}"
            ) from error

    async def _unwind(self) -> None:
        try:
            await self._effect.dispose()
        finally:
            # The owners no longer need to dispose it; their anchors go.
            for anchor in self._anchors:
                anchor.discard()


def _distinct(*fibers: Fiber) -> tuple[Fiber, ...]:
    return tuple(dict.fromkeys(fibers))


def _only_about(session: Session) -> Callable[[str, tuple[object, ...]], bool]:
    """The scope's event filter: events about another agent or session are not heard."""

    def accepts(_name: str, args: tuple[object, ...]) -> bool:
        if not args:
            return True
        subject = args[0]
        if isinstance(subject, Session):
            return subject is session
        # An agent, by its session; an attribute read, as a protocol isinstance
        # check on every dispatch would cost far more.
        subject_session = getattr(subject, "session", None)
        if isinstance(subject_session, Session):
            return subject_session is session
        return True

    return accepts
