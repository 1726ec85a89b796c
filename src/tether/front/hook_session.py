"""User hooks on a session's events: ``Stop``, ``SubagentStop``, ``SessionStart``,
``SessionEnd``, ``PreCompact`` and ``Notification`` (see :mod:`tether.front.hooks`).

* ``Stop`` (``SubagentStop`` for a delegated child) — an ``agent/turn-completing``
  listener: asked when a turn would end ``completed``. A hook that blocks
  (``decision: "block"`` with a ``reason``, or exit code 2 with its stderr) keeps
  **the same turn** going: the reason is the next step's input, a user message
  of source ``hook``. ``stop_hook_active`` tells a hook the turn already went on
  because of a stop hook; past ``stop_continuations`` times in one turn, a block
  is logged and the turn ends.
* ``SessionStart`` — an ``agent/setup`` listener for ``startup`` and ``resume``
  (not for delegated children); ``clear`` and ``compact`` when a step starts
  after a ``history/cleared`` or ``context/compacted``. What the hooks print
  (plain text, or ``additionalContext``) opens the agent's next step.
* ``SessionEnd`` — an ``agent/stopping`` listener, with the reason the front end
  gave as it closed the session (``session/ending``, :mod:`tether.front.session_end`;
  ``other`` when none did); and with reason ``clear`` when a step starts after a
  ``history/cleared``, before ``SessionStart`` ``clear``. Output ignored; it runs
  while the agent's turn (if any) closes, and never longer than ``end_timeout``
  seconds, so it cannot hold a stop.
* ``PreCompact`` — an ``agent/pre-compact`` listener (trigger ``manual`` or
  ``auto``): output ignored (a block's reason is logged); the compaction waits
  for it.
* ``Notification`` — a ``permission/request`` listener that answers nothing: it
  runs before a permission question is put to a person (not for a call the
  session's grants already cover), and the question waits for it.

Hooks a cancel stopped are answered to ``agent/turn-aborting`` (or, for an idle
agent, ``agent/stopping``) as ``kind: "hook"`` entries of the stop receipt.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tether.agent.registry import AGENTS
from tether.agent.types import Agent, AgentStatus, UserMessage
from tether.front.asking import kept_rule_allows, lineage, preview_of
from tether.front.hook_output import shown_name
from tether.session import StopParts

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from tether.front.hooks import Hooks
    from tether.front.session_end import SessionEndReason
    from tether.runtime import Context
    from tether.runtime.signal import CancelSignal
    from tether.session import CompactionTrigger
    from tether.tools.execute import ToolInvocation

__all__ = ["SessionHooks"]

log = logging.getLogger(__name__)

RESTARTS = frozenset({"history/cleared", "context/compacted"})
"""The events after which a session starts again for ``SessionStart`` (``clear``, ``compact``)."""


@dataclass(slots=True)
class _State:
    """What the session hooks keep of one agent."""

    seen: int = -1
    """The seq of the last :data:`RESTARTS` event ``SessionStart`` ran for (or saw at start)."""
    pending: list[str] = field(default_factory=list)
    """``SessionStart`` context not yet given to the model."""
    turn: int = 0
    continued: int = 0
    """How many times stop hooks kept :attr:`turn` going."""


def _child(agent: Agent) -> bool:
    return agent.session.header.delegator is not None


def _cwd(agent: Agent) -> str:
    return agent.session.header.cwd or os.getcwd()


class SessionHooks:
    """Runs the session events' hooks of one runtime (see the module docs)."""

    def __init__(self, ctx: Context, hooks: Hooks) -> None:
        self._ctx = ctx
        self._hooks = hooks
        self._states: dict[str, _State] = {}
        self._ending: dict[str, SessionEndReason] = {}
        """The reason each agent's front end gave for closing it (``session/ending``)."""

    def _state(self, agent: Agent) -> _State:
        state = self._states.get(agent.id)
        if state is None:
            state = self._states[agent.id] = _State()
        return state

    def forget(self, agent: Agent) -> None:
        """``agent/disposed``: drop what is kept for ``agent``."""
        self._states.pop(agent.id, None)
        self._ending.pop(agent.id, None)
        self._hooks.runner.forget(agent)

    # -- Stop ----------------------------------------------------------------------------

    async def turn_completing(
        self, agent: Agent, turn: int, step: int
    ) -> tuple[UserMessage, ...] | None:
        """``Stop`` / ``SubagentStop``: the message that keeps the turn going, if a hook
        blocks and the turn may still go on; else ``None``."""
        event = "SubagentStop" if _child(agent) else "Stop"
        if not self._hooks.configured(event):
            return None
        state = self._state(agent)
        if state.turn != turn:
            state.turn, state.continued = turn, 0
        cwd = _cwd(agent)
        payload = self._hooks.payload(agent, event, cwd, stop_hook_active=state.continued > 0)
        said = await self._hooks.verdicts(event, payload=payload, agent=agent, cwd=cwd)
        reasons = [v.block for v in said if v.block is not None]
        if not reasons:
            return None
        limit = self._hooks.settings.stop_continuations
        if state.continued >= limit:
            log.warning(
                "a %s hook asked agent %s to go on after %d continuation(s) of turn %d; "
                "the turn ends (stop_continuations is %d)",
                event,
                agent.id,
                state.continued,
                turn,
                limit,
            )
            return None
        state.continued += 1
        log.info("agent %s: a %s hook keeps turn %d going: %s", agent.id, event, turn, reasons[0])
        return (UserMessage.text(reasons[0], source="hook"),)

    # -- SessionStart --------------------------------------------------------------------

    async def on_setup(self, agent: Agent) -> None:
        """``SessionStart`` with ``startup`` or ``resume``, as the agent is created."""
        if _child(agent):
            return
        state = self._state(agent)
        for event in agent.session.events.of_types(RESTARTS):
            state.seen = event.seq
        source = "resume" if agent.session.last_turn > 0 else "startup"
        await self._session_start(agent, state, source)

    async def before_step(
        self,
        step_input: tuple[UserMessage, ...],
        next_: Callable[[tuple[UserMessage, ...]], Awaitable[tuple[UserMessage, ...]]],
        agent: Agent,
        step: int,
    ) -> tuple[UserMessage, ...]:
        """``SessionStart`` with ``clear`` or ``compact`` when the history restarted since
        the last step; what ``SessionStart`` hooks said opens this step."""
        state = self._states.get(agent.id)
        if state is None or _child(agent):
            return await next_(step_input)
        source = self._restarted(agent, state)
        if source == "clear":
            await self._session_end(agent, "clear")
        if source is not None:
            await self._session_start(agent, state, source)
        if state.pending:
            added = UserMessage.text("\n".join(state.pending), source="hook")
            state.pending.clear()
            step_input = (added, *step_input)
        return await next_(step_input)

    def _restarted(self, agent: Agent, state: _State) -> str | None:
        """``clear`` or ``compact`` when such an event was logged after :attr:`_State.seen`."""
        latest = None
        for event in agent.session.events.of_types(RESTARTS, start=state.seen + 1):
            latest = event
        if latest is None:
            return None
        state.seen = latest.seq
        return "clear" if latest.type == "history/cleared" else "compact"

    async def _session_start(self, agent: Agent, state: _State, source: str) -> None:
        if not self._hooks.configured("SessionStart", source):
            return
        cwd = _cwd(agent)
        payload = self._hooks.payload(agent, "SessionStart", cwd, source=source)
        said = await self._hooks.verdicts(
            "SessionStart", payload=payload, agent=agent, cwd=cwd, subject=source
        )
        state.pending.extend(v.context for v in said if v.context)

    # -- SessionEnd and the stop receipt -------------------------------------------------

    def on_ending(self, agent: Agent, reason: SessionEndReason) -> None:
        """``session/ending``: the reason the coming ``SessionEnd`` of ``agent`` gives."""
        self._ending[agent.id] = reason

    async def on_stopping(self, agent: Agent) -> StopParts | None:
        """``SessionEnd`` with the reason its front end gave (``other`` when none did);
        for an idle agent, the hooks a cancel stopped since its last turn."""
        running = agent.status is AgentStatus.RUNNING
        await self._session_end(agent, self._ending.pop(agent.id, "other"))
        if running:
            return None  # its turn's receipt carries them
        return self._parts(agent)

    async def _session_end(self, agent: Agent, reason: SessionEndReason) -> None:
        """Run ``SessionEnd`` hooks with ``reason``, bounded by ``end_timeout``."""
        hooks = self._hooks
        if _child(agent) or not hooks.configured("SessionEnd"):
            return
        cwd = _cwd(agent)
        payload = hooks.payload(agent, "SessionEnd", cwd, reason=reason)
        await hooks.verdicts(
            "SessionEnd",
            payload=payload,
            agent=agent,
            cwd=cwd,
            limit=hooks.settings.end_timeout,
        )

    def on_turn_aborting(self, agent: Agent, turn: int) -> StopParts | None:
        """``agent/turn-aborting``: the hooks the cancel of ``turn`` stopped."""
        return self._parts(agent)

    def _parts(self, agent: Agent) -> StopParts | None:
        stopped = self._hooks.runner.stopped(agent)
        return StopParts(stopped=stopped) if stopped else None

    # -- PreCompact and Notification -----------------------------------------------------

    async def pre_compact(
        self, agent: Agent, trigger: CompactionTrigger, signal: CancelSignal
    ) -> None:
        """``PreCompact``: run before the compaction asks for its summary."""
        named = "manual" if trigger == "manual" else "auto"
        if not self._hooks.configured("PreCompact", named):
            return
        cwd = _cwd(agent)
        payload = self._hooks.payload(
            agent, "PreCompact", cwd, trigger=named, custom_instructions=""
        )
        said = await self._hooks.verdicts(
            "PreCompact", payload=payload, agent=agent, cwd=cwd, subject=named, signal=signal
        )
        for verdict in said:
            if verdict.block is not None:
                log.warning("a PreCompact hook says: %s", verdict.block)

    async def notification(self, agent: Agent, invocation: ToolInvocation) -> None:
        """``Notification`` before a permission question is put to a person; answers
        nothing, so the front end that governs ``agent`` asks next."""
        kind = "permission_prompt"
        if not self._hooks.configured("Notification", kind):
            return
        governing = list(lineage(agent, self._ctx.get(AGENTS)))[-1]
        preview = await preview_of(invocation)
        if kept_rule_allows(governing, invocation, preview):
            return
        cwd = _cwd(agent)
        message = f"tether needs your permission to use {shown_name(invocation.tool_name)}"
        payload = self._hooks.payload(
            agent, "Notification", cwd, message=message, notification_type=kind
        )
        await self._hooks.verdicts(
            "Notification",
            payload=payload,
            agent=agent,
            cwd=cwd,
            subject=kind,
            signal=invocation.exec.signal,
        )
