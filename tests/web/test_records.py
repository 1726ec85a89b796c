"""What a record carries for the page beyond the log's data: a failed turn says what
failed and what to do, in the words the terminal uses."""

from __future__ import annotations

import json

from tether.front.outcomes import MODEL_ADVICE
from tether.session import Completed, Errored, Event, TurnEnd
from tether.session.elicitation import ElicitationCompleted
from tether.session.prompt_cut import PromptCut, prompt_cut_notice
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


def test_a_prompt_the_server_cut_carries_the_terminals_notice() -> None:
    cut = PromptCut(model="local", sent=9_400, counted=2_048)
    (record,) = _records(Event.from_payload(cut, seq=0, time=1.0))
    assert record["notice"] == prompt_cut_notice({"sent": 9_400, "counted": 2_048})
    assert "counted 2,048 prompt tokens of about 9,400 sent" in str(record["notice"])


def test_a_url_question_done_at_its_servers_word_carries_the_terminals_line() -> None:
    done = ElicitationCompleted(id="e-2", server="github", elicitation="sign-in-1")
    (record,) = _records(Event.from_payload(done, seq=0, time=1.0))
    assert record["notice"] == done.describe()
    assert "MCP server github" in str(record["notice"])
