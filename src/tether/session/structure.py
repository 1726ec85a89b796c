"""The structural invariants of a session log, as a state machine.

`Structure` holds what the log's structure says about the present (which turn
and step are open, which tool calls the open step still owes) and advances
over one event at a time. `Session.append` and `Session.restore` both go
through it, so a log can only be restored if it could have been appended.

The invariants:

- Turns are numbered 1, 2, … and never nest. ``turn/end`` closes the open turn,
  names it, and comes only when no step is open.
- ``step/start`` and ``step/end`` come only inside an open turn and name it.
  Steps are numbered 1, 2, … per turn and never nest; ``step/end`` names the
  open step.
- ``user/message``, ``assistant/chunk``, ``assistant/message``, ``tool/call``
  and ``tool/result`` come only inside an open step.
- Tool-call ids requested by the ``assistant/message`` events of a step are
  unique within it. ``tool/call`` and ``tool/result`` name such an id and the
  requested tool; each id has at most one of each, and no ``tool/call`` comes
  after the id's result.
- ``agent/inbox/spliced`` and plugin event types may come anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import msgspec

from tether.content import ToolCallBlock
from tether.session.errors import SessionInvariantError
from tether.session.events import Event
from tether.session.vocabulary import (
    AssistantChunk,
    AssistantMessageEvent,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)

__all__ = ["IN_STEP_ONLY", "PendingToolCall", "Structure"]


class PendingToolCall(msgspec.Struct, frozen=True):
    """A tool call requested in the open step that has no result yet.

    ``started`` is the ``tool/call`` that marked it as executing, ``None`` if
    none did: a started call may have had effects (unless its record says
    the tool is :attr:`~tether.session.vocabulary.ToolCallEvent.rerunnable`),
    one that never started had none.
    """

    call: ToolCallBlock
    started: ToolCallEvent | None


class Structure:
    """The structural state of a log, advanced one event at a time."""

    __slots__ = (
        "_last_step",
        "_requested",
        "_resulted",
        "_started",
        "last_turn",
        "open_step",
        "open_turn",
    )

    def __init__(self) -> None:
        self.open_turn: int | None = None
        self.open_step: int | None = None
        self.last_turn = 0
        self._last_step = 0
        # Tool calls of the open step, in request order.
        self._requested: dict[str, ToolCallBlock] = {}
        self._started: dict[str, ToolCallEvent] = {}
        self._resulted: set[str] = set()

    def copy(self) -> Structure:
        """A structure in the same state, advanced independently of this one."""
        copy = Structure()
        copy.open_turn, copy.open_step, copy.last_turn = (
            self.open_turn,
            self.open_step,
            self.last_turn,
        )
        copy._last_step = self._last_step
        copy._requested = dict(self._requested)
        copy._started = dict(self._started)
        copy._resulted = set(self._resulted)
        return copy

    def _forget_calls(self) -> None:
        # Tool calls belong to their step; between steps there are none.
        self._requested = {}
        self._started = {}
        self._resulted = set()

    def advance(self, event: Event) -> None:
        """Account for ``event`` appended next.

        Event types without structural meaning (the inbox, plugin types,
        opaque events) are accepted anywhere and change nothing. Only the
        rules that need its fields read the event's payload.

        Raises:
            SessionInvariantError: ``event`` would break an invariant; the
                state is then unchanged.
        """
        rule = _RULES.get(event.type)
        if rule is not None:
            rule(self, event)

    def pending_tool_calls(self) -> tuple[PendingToolCall, ...]:
        """Tool calls requested in the open step without a result, in request
        order."""
        return tuple(
            PendingToolCall(call, self._started.get(call_id))
            for call_id, call in self._requested.items()
            if call_id not in self._resulted
        )

    # Each rule checks everything before it changes anything, which is what
    # lets a rejected append leave the session untouched.

    def _turn_start(self, event: Event) -> None:
        payload = cast(TurnStart, event.payload)
        if self.open_turn is not None:
            raise SessionInvariantError(
                f"turn/start {payload.turn}: turn {self.open_turn} is still open; turns never nest"
            )
        if payload.turn != self.last_turn + 1:
            raise SessionInvariantError(
                f"turn/start {payload.turn}: the next turn is {self.last_turn + 1}"
            )
        self.open_turn = self.last_turn = payload.turn
        self._last_step = 0

    def _turn_end(self, event: Event) -> None:
        payload = cast(TurnEnd, event.payload)
        if self.open_turn is None:
            raise SessionInvariantError(f"turn/end {payload.turn}: no turn is open")
        if payload.turn != self.open_turn:
            raise SessionInvariantError(
                f"turn/end {payload.turn}: the open turn is {self.open_turn}"
            )
        if self.open_step is not None:
            raise SessionInvariantError(
                f"turn/end {payload.turn}: step {self.open_step} is still open"
            )
        self.open_turn = None

    def _step_start(self, event: Event) -> None:
        payload = cast(StepStart, event.payload)
        where = f"step/start {payload.turn}.{payload.step}"
        if self.open_turn is None:
            raise SessionInvariantError(f"{where}: no turn is open")
        if payload.turn != self.open_turn:
            raise SessionInvariantError(f"{where}: the open turn is {self.open_turn}")
        if self.open_step is not None:
            raise SessionInvariantError(
                f"{where}: step {self.open_step} is still open; steps never nest"
            )
        if payload.step != self._last_step + 1:
            raise SessionInvariantError(f"{where}: the next step is {self._last_step + 1}")
        self.open_step = self._last_step = payload.step

    def _step_end(self, event: Event) -> None:
        payload = cast(StepEnd, event.payload)
        where = f"step/end {payload.turn}.{payload.step}"
        if self.open_step is None:
            raise SessionInvariantError(f"{where}: no step is open")
        if (payload.turn, payload.step) != (self.open_turn, self.open_step):
            raise SessionInvariantError(
                f"{where}: the open step is {self.open_turn}.{self.open_step}"
            )
        self.open_step = None
        self._forget_calls()

    def _in_step(self, event: Event) -> None:
        if self.open_step is None:
            raise SessionInvariantError(f"{event.type}: only allowed inside an open step")

    def _assistant_message(self, event: Event) -> None:
        self._in_step(event)
        payload = cast(AssistantMessageEvent, event.payload)
        calls = payload.tool_calls
        for call in calls:
            if call.id in self._requested:
                raise SessionInvariantError(
                    f"assistant/message: tool call id {call.id!r} was already requested "
                    f"in step {self.open_turn}.{self.open_step}"
                )
        for call in calls:
            self._requested[call.id] = call

    def _check_requested(self, event: Event) -> ToolCallEvent | ToolResultEvent:
        self._in_step(event)
        payload = cast(ToolCallEvent | ToolResultEvent, event.payload)
        call = self._requested.get(payload.id)
        if call is None:
            raise SessionInvariantError(
                f"{payload.type} {payload.id!r}: no assistant/message of step "
                f"{self.open_turn}.{self.open_step} requested this tool call"
            )
        if call.name != payload.name:
            raise SessionInvariantError(
                f"{payload.type} {payload.id!r}: names tool {payload.name!r}, "
                f"but {call.name!r} was requested"
            )
        if payload.id in self._resulted:
            raise SessionInvariantError(
                f"{payload.type} {payload.id!r}: the call already has a result"
            )
        return payload

    def _tool_call(self, event: Event) -> None:
        payload = self._check_requested(event)
        if payload.id in self._started:
            raise SessionInvariantError(f"tool/call {payload.id!r}: the call already started")
        self._started[payload.id] = cast(ToolCallEvent, payload)

    def _tool_result(self, event: Event) -> None:
        payload = self._check_requested(event)
        self._resulted.add(payload.id)


# Dispatch on the type name: each built-in name has its built-in class in
# every registry, and a dict lookup keeps the append path cheap. A restored
# chunk stays unbuilt: its rule reads nothing but the name.
_RULES: dict[str, Callable[[Structure, Event], None]] = {
    TurnStart.type: Structure._turn_start,
    TurnEnd.type: Structure._turn_end,
    StepStart.type: Structure._step_start,
    StepEnd.type: Structure._step_end,
    UserMessageEvent.type: Structure._in_step,
    AssistantChunk.type: Structure._in_step,
    AssistantMessageEvent.type: Structure._assistant_message,
    ToolCallEvent.type: Structure._tool_call,
    ToolResultEvent.type: Structure._tool_result,
}

IN_STEP_ONLY = frozenset(name for name, rule in _RULES.items() if rule is Structure._in_step)
"""The types whose one rule is to come inside an open step: `Structure.advance`
changes nothing for them while a step is open."""
