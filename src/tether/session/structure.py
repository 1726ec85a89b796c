"""The structural invariants of a session log, as a state machine.

`Structure` holds what the log's structure says about the present (which turn
and step are open, which tool calls the open step still owes) and advances
over one payload at a time. `Session.append` and `Session.restore` both go
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
from dataclasses import dataclass
from typing import cast

from tether.llm.messages import ToolCallBlock
from tether.session.errors import SessionInvariantError
from tether.session.vocabulary import (
    AssistantChunk,
    AssistantMessageEvent,
    EventPayload,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)

__all__ = ["PendingToolCall", "Structure"]


@dataclass(frozen=True, slots=True)
class PendingToolCall:
    """A tool call requested in the open step that has no result yet.

    ``started`` tells whether a ``tool/call`` marked it as executing: a started
    call may have had effects, one that never started had none.
    """

    call: ToolCallBlock
    started: bool


class Structure:
    """The structural state of a log, advanced one payload at a time."""

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
        self._started: set[str] = set()
        self._resulted: set[str] = set()

    def _forget_calls(self) -> None:
        # Tool calls belong to their step; between steps there are none.
        self._requested = {}
        self._started = set()
        self._resulted = set()

    def advance(self, payload: EventPayload) -> None:
        """Account for ``payload`` appended next.

        Payload types without structural meaning (the inbox, plugin types) are
        accepted anywhere and change nothing.

        Raises:
            SessionInvariantError: ``payload`` would break an invariant; the
                state is then unchanged.
        """
        rule = _RULES.get(type(payload))
        if rule is not None:
            rule(self, payload)

    def pending_tool_calls(self) -> tuple[PendingToolCall, ...]:
        """Tool calls requested in the open step without a result, in request
        order."""
        return tuple(
            PendingToolCall(call, call_id in self._started)
            for call_id, call in self._requested.items()
            if call_id not in self._resulted
        )

    # Each rule checks everything before it changes anything, which is what
    # lets a rejected append leave the session untouched.

    def _turn_start(self, payload: TurnStart) -> None:
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

    def _turn_end(self, payload: TurnEnd) -> None:
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

    def _step_start(self, payload: StepStart) -> None:
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

    def _step_end(self, payload: StepEnd) -> None:
        where = f"step/end {payload.turn}.{payload.step}"
        if self.open_step is None:
            raise SessionInvariantError(f"{where}: no step is open")
        if (payload.turn, payload.step) != (self.open_turn, self.open_step):
            raise SessionInvariantError(
                f"{where}: the open step is {self.open_turn}.{self.open_step}"
            )
        self.open_step = None
        self._forget_calls()

    def _in_step(self, payload: EventPayload) -> None:
        if self.open_step is None:
            raise SessionInvariantError(f"{payload.type}: only allowed inside an open step")

    def _assistant_message(self, payload: AssistantMessageEvent) -> None:
        self._in_step(payload)
        calls = payload.tool_calls
        for call in calls:
            if call.id in self._requested:
                raise SessionInvariantError(
                    f"assistant/message: tool call id {call.id!r} was already requested "
                    f"in step {self.open_turn}.{self.open_step}"
                )
        for call in calls:
            self._requested[call.id] = call

    def _check_requested(self, payload: ToolCallEvent | ToolResultEvent) -> None:
        self._in_step(payload)
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

    def _tool_call(self, payload: ToolCallEvent) -> None:
        self._check_requested(payload)
        if payload.id in self._started:
            raise SessionInvariantError(f"tool/call {payload.id!r}: the call already started")
        self._started.add(payload.id)

    def _tool_result(self, payload: ToolResultEvent) -> None:
        self._check_requested(payload)
        self._resulted.add(payload.id)


_Rule = Callable[[Structure, EventPayload], None]

# Dispatch on the exact class: payload classes are final in practice, and a
# dict lookup keeps the append path cheap.
_RULES: dict[type[EventPayload], _Rule] = {
    TurnStart: cast(_Rule, Structure._turn_start),
    TurnEnd: cast(_Rule, Structure._turn_end),
    StepStart: cast(_Rule, Structure._step_start),
    StepEnd: cast(_Rule, Structure._step_end),
    UserMessageEvent: Structure._in_step,
    AssistantChunk: Structure._in_step,
    AssistantMessageEvent: cast(_Rule, Structure._assistant_message),
    ToolCallEvent: cast(_Rule, Structure._tool_call),
    ToolResultEvent: cast(_Rule, Structure._tool_result),
}
