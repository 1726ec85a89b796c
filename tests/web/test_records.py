"""What a record carries for the page beyond the log's data: a failed turn says what
failed and what to do, in the words the terminal uses."""

from __future__ import annotations

import json

from tether.front.outcomes import MODEL_ADVICE
from tether.session import Completed, Errored, Event, TurnEnd
from tether.web.app import EncodedLogs


def _records(*events: Event) -> list[dict[str, object]]:
    message = EncodedLogs().message("s1", list(events)).decode()
    data = next(line for line in message.splitlines() if line.startswith("data: "))
    return json.loads(data[len("data: ") :])  # type: ignore[no-any-return]


def test_a_failed_turn_carries_the_terminals_advice_and_a_completed_one_none() -> None:
    failed = TurnEnd(turn=1, reason=Errored(error="openai: cannot connect", code="unreachable"))
    done = TurnEnd(turn=2, reason=Completed())
    first, second = _records(
        Event.from_payload(failed, seq=0, time=1.0), Event.from_payload(done, seq=1, time=2.0)
    )
    assert first["outcome"] == f"error: openai: cannot connect — {MODEL_ADVICE['unreachable']}"
    assert second["outcome"] is None
