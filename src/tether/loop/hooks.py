"""The agent loop's extension points, as typed keys (see the table in :mod:`tether.loop.turn`).

Listeners run in registration order; each key's docstring gives its mode and
arguments. The first argument after the value is always the public
:class:`~tether.agent.Agent`.
"""

from __future__ import annotations

import msgspec

from tether.agent.types import Agent, UserMessage
from tether.llm.request import ModelRequest
from tether.runtime.keys import Gather, Notice, Parallel, Serial, Waterfall
from tether.runtime.signal import CancelSignal
from tether.session import CompactionTrigger, StopParts, TurnEndReason


class RequestError(msgspec.Struct, frozen=True):
    """A failed model request, passed through ``agent/request-error``."""

    error: str
    code: str | None
    attempt: int
    """1 for the first request of the step, 2 for the first retry, …"""
    retry: bool = False
    delay: float = 0.0
    retry_after: float | None = None
    """The provider's hint, in seconds, of when a retry may succeed (``Finish.retry_after``)."""
    max_attempts: int | None = None
    """How many requests of the step the deciding policy allows, if it says."""


PRE_STEP = Waterfall[tuple[UserMessage, ...], Agent, int]("agent/pre-step")
"""Waterfall over a step's input; args ``(agent, step)``. Rewrite the input, or
raise :class:`~tether.runtime.Veto` to reject it (the turn ends ``blocked``)."""

REQUEST = Waterfall[ModelRequest, Agent]("agent/request")
"""Waterfall over one :class:`ModelRequest`; args ``(agent,)``."""

REQUEST_ERROR = Waterfall[RequestError, Agent]("agent/request-error")
"""Waterfall over a :class:`RequestError` (``retry=False``); args ``(agent,)``.
Return it with ``retry=True`` to retry ``delay`` seconds later (cancellable)."""

TURN_STOP = Serial[TurnEndReason, Agent, int, int]("agent/turn-stop")
"""Serial; args ``(agent, turn, step)``, asked after every step that would
continue. The first listener that returns a reason ends the turn with it."""

TURN_COMPLETING = Serial[tuple[UserMessage, ...], Agent, int, int]("agent/turn-completing")
"""Serial; args ``(agent, turn, step)``, asked once a turn would end ``completed``
(its last step called no tool and no steering waits). The first listener that
answers messages keeps the turn going: they open its next step, ahead of any
steering claimed then (logged as that step's ``user/message`` events). The step limit
still bounds the turn; a cancel while a listener runs ends it ``aborted``."""

PRE_COMPACT = Parallel[Agent, CompactionTrigger, CancelSignal]("agent/pre-compact")
"""Parallel; args ``(agent, trigger, signal)``, awaited when a compaction has
found something to summarize, before ``agent/compacting`` and its summary
request. ``signal`` is the compaction's. A failure is logged; the compaction
goes on regardless."""

TURN_ABORTING = Gather[StopParts, Agent, int]("agent/turn-aborting")
"""Gather; args ``(agent, turn)``, awaited once when a cancelled turn is about
to close, after its tool calls returned and before its open step is closed:
the moment to stop work the turn owns elsewhere and wait until it has (the
subagent tools wait for the children they cancelled). A listener answers
what its stop reached as :class:`~tether.session.StopParts` (or ``None``);
the loop writes the answers as the turn's one ``tool/stopped``
(:mod:`tether.loop.receipt`). A failure is logged; the turn closes
regardless, without a receipt. Not awaited when the driver task itself is
cancelled (the turn then closes at once)."""

TURN_CLOSING = Notice[Agent, int, TurnEndReason]("agent/turn-closing")
"""Emit; args ``(agent, turn, reason)``, once per turn, after its last step
closed and before its stop receipt and ``turn/end``: the last moment for a
plugin to log into the turn."""

COMPACTING = Notice[Agent, CompactionTrigger]("agent/compacting")
"""Emit; args ``(agent, trigger)``, when a compaction of the agent's conversation
starts its summary request (``auto``, ``overflow`` or ``manual``). Its end is the
``context/compacted`` event in the session; a cancelled or failed one leaves none."""
