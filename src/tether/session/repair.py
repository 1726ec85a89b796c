"""Crash repair: closing what a dead process left open in a session log.

A process that dies mid-turn leaves the log with an open turn, maybe an open
step, and tool calls without results. Repair appends what the process would
have written had it stopped cleanly, and keeps everything already written, so
the log is balanced again and the next model request can be derived from it.
"""

from __future__ import annotations

from collections.abc import Callable

from tether.session.events import Event
from tether.session.log import Session
from tether.session.structure import PendingToolCall
from tether.session.vocabulary import (
    EventPayload,
    Interrupted,
    StepEnd,
    ToolResultEvent,
    TurnEnd,
)

__all__ = ["closing_payloads", "repair", "step_closing_payloads"]


def _interrupted_result(pending: PendingToolCall) -> ToolResultEvent:
    """The synthetic error result for a tool call cut off by a crash.

    Its text tells the model whether the call had started (it may have had
    effects, which are unknown) or never ran (it had none).
    """
    call = pending.call
    if pending.started:
        text = (
            f"Tool call {call.id} ({call.name}) was interrupted: it started, but the "
            "session stopped before it finished, so its outcome is unknown. It may have "
            "had effects; check before running it again."
        )
    else:
        text = (
            f"Tool call {call.id} ({call.name}) was interrupted before it ran: it never "
            "started and had no effects."
        )
    return ToolResultEvent(call.id, call.name, text, is_error=True)


def closing_payloads(session: Session) -> list[EventPayload]:
    """Return the payloads that close ``session``'s open turn, in order.

    For each tool call of the open step without a result, an error
    ``tool/result`` whose text tells whether the call had started; then
    ``step/end`` if a step is open; then ``turn/end`` with reason
    `Interrupted`. Empty when no turn is open. The session is not changed.
    """
    turn = session.open_turn
    if turn is None:
        return []
    return [*step_closing_payloads(session, _interrupted_result), TurnEnd(turn, Interrupted())]


def step_closing_payloads(
    session: Session, result_for: Callable[[PendingToolCall], ToolResultEvent]
) -> list[EventPayload]:
    """The payloads that close ``session``'s open step, if one is open.

    Each requested tool call without a result gets ``result_for(pending)``
    (an error result whose text says whether the call had started), then
    ``step/end``. Used by crash repair and by the loop when a turn stops with
    a step still open. The session is not changed.
    """
    turn, step = session.open_turn, session.open_step
    if turn is None or step is None:
        return []
    closing: list[EventPayload] = [result_for(p) for p in session.pending_tool_calls]
    closing.append(StepEnd(turn, step))
    return closing


def repair(session: Session) -> list[Event]:
    """Append `closing_payloads` to ``session`` and return the new events.

    Observers see the events as with any append. Returns an empty list when no
    turn is open.
    """
    return [session.append(payload) for payload in closing_payloads(session)]
