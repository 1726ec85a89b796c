"""Trace context for the processes tether starts: ``TRACEPARENT``.

The ids are the ones the exporter derives from the log
(:func:`~tether.telemetry.spans.span_id`), so a process's own spans hang under
the ``execute_tool`` span of the call that started it, whether that span is
sent live or later by ``tether sessions trace``. Processes started outside a
tool call (an agent's MCP servers, started with the agent) get the session's
context (:func:`session_context`): a trace of its own per session, named by the
session id alone.

The context travels in :data:`tether.shell.environment.CONTEXT_ENV`, which
every owned process's environment is built with
(:func:`tether.telemetry.context.process_context` sets it for a block).
Nothing here imports the OpenTelemetry packages.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from tether.session import ToolCallEvent, TurnEnd, TurnStart
from tether.telemetry.spans import TraceParent, span_id, trace_id

if TYPE_CHECKING:
    from tether.session import Session

__all__ = ["SessionTracing", "call_context", "session_context", "traceparent", "turn_context"]

_TURN_STARTS = frozenset({TurnStart.type})
_TURN_ENDS = frozenset({TurnEnd.type})
_CALLS = frozenset({ToolCallEvent.type})

SESSION_SEQ = -1
"""The seq the ids of a session's own context are derived from (no event has it)."""


class SessionTracing:
    """The ``tracing`` service of the live exporter (:class:`tether.telemetry.context.Tracing`);
    ``parent_of`` says where a session's turns hang (the exporter's cached
    :func:`~tether.telemetry.export.trace_parent`)."""

    def __init__(self, parent_of: Callable[[Session], Awaitable[TraceParent | None]]) -> None:
        self._parent_of = parent_of

    def session_environment(self, session_id: str) -> Mapping[str, str]:
        """The variables of a process started for session ``session_id`` outside a turn."""
        return {"TRACEPARENT": traceparent(session_context(session_id))}

    async def agent_environment(self, session: Session, call_id: str | None) -> Mapping[str, str]:
        """The variables of a process started for ``session`` while it runs: in tool call
        ``call_id``'s span, else the open turn's, else the session's own context."""
        parent = await self._parent_of(session)
        context = None if call_id is None else call_context(session, call_id, parent)
        if context is None:
            context = turn_context(session, parent) or session_context(session.id)
        return {"TRACEPARENT": traceparent(context)}


def session_context(session_id: str) -> TraceParent:
    """The context of what runs for ``session_id`` outside its turns."""
    return TraceParent(trace_id(session_id, SESSION_SEQ), span_id(session_id, SESSION_SEQ))


def traceparent(context: TraceParent) -> str:
    """The W3C ``traceparent`` header of ``context``, sampled."""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-01"


def call_context(session: Session, call_id: str, parent: TraceParent | None) -> TraceParent | None:
    """The trace and span of tool call ``call_id`` of ``session``, running in its last
    turn (its ``tool/call`` logged); ``parent`` is where the session's turns hang
    (:func:`~tether.telemetry.export.trace_parent`). ``None`` when the call is not
    in the last turn's log.

    Reads only the session's ``turn/start`` and ``tool/call`` events: the
    others (streamed chunks above all) are passed over without being decoded.
    """
    events = session.events
    turn_seq = _last_turn_start(session)
    if turn_seq is None:
        return None
    call_seq: int | None = None
    for event in events.of_types(_CALLS, turn_seq):
        payload = event.payload
        if isinstance(payload, ToolCallEvent) and payload.id == call_id:
            call_seq = event.seq
    if call_seq is None:
        return None
    trace = parent.trace_id if parent is not None else trace_id(session.id, turn_seq)
    return TraceParent(trace, span_id(session.id, call_seq))


def turn_context(session: Session, parent: TraceParent | None) -> TraceParent | None:
    """The trace and ``invoke_agent`` span of ``session``'s open turn (its last
    ``turn/start`` with no ``turn/end`` after it); ``parent`` as for
    :func:`call_context`. ``None`` between turns."""
    turn_seq = _last_turn_start(session)
    if turn_seq is None:
        return None
    if next(iter(session.events.of_types(_TURN_ENDS, turn_seq)), None) is not None:
        return None
    trace = parent.trace_id if parent is not None else trace_id(session.id, turn_seq)
    return TraceParent(trace, span_id(session.id, turn_seq))


def _last_turn_start(session: Session) -> int | None:
    """The seq of ``session``'s last ``turn/start`` (``None`` before its first turn)."""
    turn_seq: int | None = None
    for event in session.events.of_types(_TURN_STARTS):
        turn_seq = event.seq
    return turn_seq
