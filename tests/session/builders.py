"""Small constructors for session tests."""

from __future__ import annotations

from tether.llm import TextBlock, ToolCallBlock
from tether.session import (
    AssistantMessageEvent,
    Completed,
    EventRegistry,
    Session,
    SessionHeader,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)

HEADER = SessionHeader("s-1", 1_700_000_000.0, "/work")


class FakeClock:
    """A clock that advances one second per reading."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def new_session(registry: EventRegistry | None = None) -> Session:
    return Session(HEADER, registry=registry, clock=FakeClock())


def user(message_id: str = "u1", text: str = "hello") -> UserMessageEvent:
    return UserMessageEvent(message_id, "user", (TextBlock(text),))


def call(call_id: str, name: str = "bash", **arguments: object) -> ToolCallBlock:
    return ToolCallBlock(call_id, name, arguments or {"command": "ls"})


def answer(*calls: ToolCallBlock, text: str = "ok") -> AssistantMessageEvent:
    finish = "tool_calls" if calls else "stop"
    return AssistantMessageEvent((TextBlock(text), *calls), finish)


def started(block: ToolCallBlock) -> ToolCallEvent:
    return ToolCallEvent(block.id, block.name, block.arguments)


def result(block: ToolCallBlock, content: str = "done") -> ToolResultEvent:
    return ToolResultEvent(block.id, block.name, content, is_error=False)


def open_step(session: Session) -> tuple[int, int]:
    """Open the next step, opening the next turn first if none is open."""
    if session.open_turn is None:
        session.append(TurnStart(session.last_turn + 1))
    turn = session.open_turn
    assert turn is not None
    step = 1 + sum(
        1
        for event in session.events
        if isinstance(event.payload, StepStart) and event.payload.turn == turn
    )
    session.append(StepStart(turn, step))
    return turn, step


def complete_turn(session: Session, prompt: str = "hello") -> None:
    """Append one whole turn: a prompt, a tool round trip, and an answer."""
    turn, step = open_step(session)
    session.append(user(f"u{turn}", prompt))
    block = call(f"c{turn}")
    session.append(answer(block))
    session.append(started(block))
    session.append(result(block))
    session.append(StepEnd(turn, step))
    session.append(StepStart(turn, step + 1))
    session.append(answer(text="all done"))
    session.append(StepEnd(turn, step + 1))
    session.append(TurnEnd(turn, Completed()))


def snapshot(session: Session) -> tuple[object, ...]:
    """Everything observable about a session's contents and structure."""
    return (
        list(session.events),
        session.open_turn,
        session.open_step,
        session.last_turn,
        session.pending_tool_calls,
    )
