"""Small readers of an agent's log for the agent tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tether.agent import Agent
from tether.session import Session, TurnEnd


def types(session: Session) -> list[str]:
    return [event.type for event in session.events]


def turn_ends(session: Session) -> list[dict[str, Any]]:
    return [dict(e.data["reason"]) for e in session.events if e.type == "turn/end"]  # type: ignore[call-overload]


def prompts(session: Session) -> list[str]:
    return [
        block["text"]
        for event in session.events
        if event.type == "user/message"
        for block in event.data["content"]  # type: ignore[attr-defined]
    ]


def assert_balanced(session: Session) -> None:
    """The log closes every turn and step, and answers every tool call."""
    assert session.open_turn is None, "a turn is still open"
    calls: set[str] = set()
    results: set[str] = set()
    for event in session.events:
        if event.type == "assistant/message":
            calls.update(b["id"] for b in event.data["content"] if b["type"] == "tool_call")  # type: ignore[attr-defined]
        elif event.type == "tool/result":
            results.add(str(event.data["id"]))
    assert calls == results, (calls, results)
    Session.restore(session.header, session.events)  # every invariant holds


def on_disk(data_dir: Path, agent: Agent) -> list[dict[str, Any]]:
    path = data_dir / "sessions" / f"{agent.id}.jsonl"
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines[1:]]


def last_reason(session: Session) -> dict[str, Any]:
    payload = session.events[-1].payload
    assert isinstance(payload, TurnEnd)
    return dict(session.events[-1].data["reason"])  # type: ignore[call-overload]
