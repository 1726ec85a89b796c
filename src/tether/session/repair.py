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

__all__ = ["OUTCOME_UNKNOWN", "closing_payloads", "repair", "step_closing_payloads"]


OUTCOME_UNKNOWN = "its outcome is unknown"
"""The words of every repaired result whose call may or may not have taken effect."""


def _interrupted_result(pending: PendingToolCall) -> ToolResultEvent:
    """The synthetic error result for a tool call cut off by a crash (or a takeover).

    Its text tells the model which of three cases it is, from the call's
    durable started record (``tool/call``): the call never started (it had
    no effects); it started and its tool declared itself read-only or
    idempotent (running it again is safe); or it started and may have had
    effects: its **outcome is unknown**, the model is told to check before
    doing it again, and nothing runs it again on its own.
    """
    call, started = pending.call, pending.started
    if started is not None and started.rerunnable:
        text = (
            f"Tool call {call.id} ({call.name}) was interrupted: it started, but the "
            "session stopped before its result was recorded. The tool is read-only or "
            "idempotent, so running it again is safe."
        )
    elif started is not None:
        key = f" Its idempotency key was {started.idempotency_key}." * bool(started.idempotency_key)
        text = (
            f"Tool call {call.id} ({call.name}) was interrupted: it started, but the "
            f"session stopped before its result was recorded, so {OUTCOME_UNKNOWN}: it "
            "may or may not have taken effect. Check whether it did (look at what it would "
            "have changed) before running it again; it was not run again."
            f"{key}"
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
