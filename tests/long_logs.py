"""Long stored session logs for tests of what reads them: many turns of streamed chunks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tether.content import TextBlock
from tether.persist.service import Persistence
from tether.session import (
    AssistantChunk,
    AssistantMessageEvent,
    Completed,
    EventPayload,
    Session,
    StepEnd,
    StepStart,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)
from tether.session import packed as packed_module
from tether.session.events import Event
from tether.session.log import SessionHeader
from tether.session.packed import encode_events
from tether.session.stored import decode_event_lines


def _turn(number: int, chunks: int) -> Iterator[EventPayload]:
    words = [f"word{i} " for i in range(chunks)]
    yield TurnStart(turn=number)
    yield StepStart(turn=number, step=1)
    yield UserMessageEvent(id=f"u{number}", source="user", content=(TextBlock(f"q{number}"),))
    yield from (AssistantChunk(kind="text", delta=word) for word in words)
    yield AssistantMessageEvent(
        content=(TextBlock("".join(words)),), finish="stop", interrupted=False
    )
    yield StepEnd(turn=number, step=1)
    yield TurnEnd(turn=number, reason=Completed())


async def store_long_session(persistence: Persistence, cwd: str, turns: int, chunks: int) -> str:
    """Store a session of ``turns`` turns, each an answer streamed in ``chunks``
    chunks; its id."""
    session = Session(SessionHeader(id=f"long-{turns}x{chunks}", created_at=0.0, cwd=cwd))
    for number in range(1, turns + 1):
        for payload in _turn(number, chunks):
            session.append(payload)
    lines = encode_events(session.events[:])
    await persistence.import_log(session.header.to_record(), decode_event_lines(lines))
    return session.id


class Decodes:
    """Counts the packed events decoded (read back from their stored lines)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        lines = packed_module._Block._lines

        def counted(block: packed_module._Block, start: int, stop: int) -> list[Event]:
            self.count += stop - start
            return lines(block, start, stop)

        monkeypatch.setattr(packed_module._Block, "_lines", counted)


__all__ = ["Decodes", "store_long_session"]
