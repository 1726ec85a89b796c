"""derive_messages: the model-visible conversation, from the log alone."""

from __future__ import annotations

import json

from tether.llm import (
    AssistantMessage,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolMessage,
    UserRoleMessage,
)
from tether.session import (
    Aborted,
    AssistantChunk,
    AssistantMessageEvent,
    Event,
    EventRegistry,
    InboxSpliced,
    StepEnd,
    StepStart,
    TurnEnd,
    derive_messages,
)

from .builders import answer, call, complete_turn, new_session, open_step, result, started, user
from .test_events import Retry


def test_derive_messages_from_log_alone() -> None:
    session = new_session()
    complete_turn(session, prompt="list files")
    expected = [
        UserRoleMessage((TextBlock("list files"),)),
        AssistantMessage((TextBlock("ok"), ToolCallBlock("c1", "bash", {"command": "ls"}))),
        ToolMessage("c1", "bash", "done", is_error=False),
        AssistantMessage((TextBlock("all done"),)),
    ]
    assert derive_messages(session) == expected
    # The same conversation comes back from nothing but the stored records.
    records = json.loads(json.dumps([event.to_record() for event in session.events]))
    assert derive_messages(Event.from_record(record) for record in records) == expected
    assert derive_messages(Event(r["type"], r["seq"], r["time"], r["data"]) for r in records) == (
        expected
    )


def test_derive_keeps_an_interrupted_answer_as_streamed() -> None:
    session = new_session()
    turn, step = open_step(session)
    session.append(user())
    session.append(AssistantChunk("reasoning", "let me"))
    session.append(AssistantChunk("text", "Partial"))
    session.append(
        AssistantMessageEvent(
            (ReasoningBlock("let me"), TextBlock("Partial")), "cancelled", interrupted=True
        )
    )
    session.append(StepEnd(turn, step))
    session.append(TurnEnd(turn, Aborted("user")))
    assert derive_messages(session)[-1] == AssistantMessage(
        (ReasoningBlock("let me"), TextBlock("Partial")), interrupted=True
    )


def test_derive_skips_events_that_are_not_model_visible() -> None:
    registry = EventRegistry()
    registry.register(Retry)
    session = new_session(registry)
    session.append(InboxSpliced("queued", "insert", messages=(user("m1", "queued prompt"),)))
    turn, step = open_step(session)
    session.append(InboxSpliced("queued", "claim", ids=("m1",)))
    session.append(user("m1", "queued prompt"))
    session.append(Retry(1))
    session.append(AssistantChunk("text", "hi"))
    block = call("c1")
    session.append(answer(block, text="hi"))
    session.append(started(block))
    session.append(result(block, "out"))
    session.append(StepEnd(turn, step))
    session.append(StepStart(turn, step + 1))
    assert derive_messages(session) == [
        UserRoleMessage((TextBlock("queued prompt"),)),
        AssistantMessage((TextBlock("hi"), block)),
        ToolMessage("c1", "bash", "out", is_error=False),
    ]


def test_derive_of_an_empty_log_is_empty() -> None:
    assert derive_messages(new_session()) == []
