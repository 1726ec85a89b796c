"""What ``tether run --output-format json|stream-json`` prints: output for scripts.

``json`` prints one line, the **result** of the turn, once the turn is on
disk. ``stream-json`` prints every event of the session as it is appended,
one JSON line each in the stored record form (``{"type": "assistant/chunk",
"seq": …, "time": …, "data": {…}}``; event types always hold a ``/``), then
the same result line. Both are described, field by field, in docs/cli.md;
fields are only ever added, and ``version`` changes if one changes meaning.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TextIO

from tether.agent import Agent, NeverRan, TurnOutcome
from tether.frozen import thaw
from tether.session import (
    Aborted,
    AssistantMessageEvent,
    Event,
    Session,
    ToolCallEvent,
    ToolResultEvent,
)
from tether.session.budget import BudgetExhausted

RESULT_VERSION = 1
"""The version of the result line's shape."""


class EventLines:
    """A session observer writing each appended event to ``out`` as a JSON line."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self.output_error: OSError | None = None
        """Why writing to ``out`` failed (a closed pipe, a full device); then it stops."""

    def __call__(self, session: Session, event: Event) -> None:
        self.write(event.to_record())

    def write(self, record: Mapping[str, object]) -> None:
        """Write ``record`` as one line (unless writing already failed)."""
        if self.output_error is not None:
            return
        try:
            self._out.write(json.dumps(thaw(record), ensure_ascii=False) + "\n")
            self._out.flush()
        except OSError as exc:
            self.output_error = exc


def turn_result(
    agent: Agent,
    outcome: TurnOutcome,
    *,
    exit_code: int,
    error: str | None,
    stored: bool,
) -> dict[str, object]:
    """The result line of the turn the task's handle settled with (``outcome``): how it
    ended and its answer, with its tool calls and usage read from the turn's events.

    A turn that is not ``stored`` shows how it ended but nothing of its work
    (an empty answer, no tool calls): a script that read an answer read a
    stored one. A task that never ran ended ``aborted`` with the cause of the
    cancel that cleared it.
    """
    events: Sequence[Event] = ()
    cause: str | None
    if isinstance(outcome, NeverRan):
        kind, cause, answer = Aborted.kind, outcome.cause.value, ""
    else:
        reason = outcome.reason
        kind, answer = reason.kind, outcome.answer
        cause = reason.cause if isinstance(reason, Aborted) else None
        events = agent.session.events[outcome.start_seq : outcome.end_seq + 1]
    usage, calls = _work_of(events)
    receipt = next(
        (event for event in reversed(events) if event.type == BudgetExhausted.type), None
    )
    return {
        "type": "result",
        "version": RESULT_VERSION,
        "session_id": agent.id,
        "stop_reason": kind,
        "cause": cause,
        "answer": answer if stored else "",
        "tool_calls": list(calls.values()) if stored else [],
        "usage": usage or None,
        "is_error": exit_code != 0,
        "error": error,
        "exit_code": exit_code,
        "stored": stored,
        "budget": None if receipt is None else thaw(receipt.data),
    }


def _work_of(events: Sequence[Event]) -> tuple[dict[str, int], dict[str, dict[str, object]]]:
    """The usage figures a turn's ``events`` add up to, and its tool calls by id, each
    with its arguments and its result (``None`` while it has none)."""
    usage: dict[str, int] = {}
    calls: dict[str, dict[str, object]] = {}
    for event in events:
        match event.payload:
            case AssistantMessageEvent(usage=counts):
                for name, value in (counts or {}).items():
                    usage[name] = usage.get(name, 0) + value
            case ToolCallEvent(id=call_id, name=name, arguments=arguments):
                calls[call_id] = {
                    "id": call_id,
                    "name": name,
                    "arguments": thaw(arguments),
                    "is_error": None,
                    "output": None,
                }
            case ToolResultEvent(id=call_id, name=name, content=content, is_error=failed):
                call = calls.setdefault(call_id, {"id": call_id, "name": name, "arguments": None})
                call["is_error"] = failed
                call["output"] = content
    return usage, calls


def refused_result(error: str, *, exit_code: int) -> dict[str, object]:
    """The result line of a task that never started (a bad argument, a session
    that cannot be opened, storage that refuses): the shape of
    :func:`turn_result`'s, with no session, no turn and the error."""
    return {
        "type": "result",
        "version": RESULT_VERSION,
        "session_id": None,
        "stop_reason": None,
        "cause": None,
        "answer": "",
        "tool_calls": [],
        "usage": None,
        "is_error": True,
        "error": error,
        "exit_code": exit_code,
        "stored": False,
        "budget": None,
    }


def init_line(agent: Agent, *, model: str, tools: Sequence[str]) -> dict[str, object]:
    """The first line of ``stream-json``: the session, its model, directory and tools."""
    return {
        "type": "init",
        "version": RESULT_VERSION,
        "session_id": agent.id,
        "model": model,
        "cwd": agent.session.header.cwd,
        "tools": sorted(tools),
    }
