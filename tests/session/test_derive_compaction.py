"""``context/compacted``: the summary stands in for its range; the log keeps every event."""

from __future__ import annotations

import json
import re

import pytest

from tests.session.builders import complete_turn, new_session
from tether.content import TextBlock, UserRoleMessage
from tether.session import (
    ContextCompacted,
    Event,
    EventFormatError,
    EventRegistry,
    derive_messages,
)
from tether.session.derive import SUMMARY_PREFIX, summary_message


def compacted(last_seq: int, summary: str = "the summary", first_seq: int = 0) -> ContextCompacted:
    return ContextCompacted(
        first_seq=first_seq,
        last_seq=last_seq,
        summary=summary,
        trigger="auto",
        model="offline",
        tokens_before=1234,
    )


def step_ends(session: object) -> list[int]:
    return [e.seq for e in session.events if e.type == "step/end"]  # type: ignore[attr-defined]


def test_the_summary_replaces_the_messages_of_its_range_and_keeps_the_rest() -> None:
    session = new_session()
    complete_turn(session, "first")
    complete_turn(session, "second")
    before = derive_messages(session)
    end_of_first_turn = step_ends(session)[1]
    events_before = list(session.events)

    session.append(compacted(end_of_first_turn))

    after = derive_messages(session)
    assert after[0] == summary_message(compacted(end_of_first_turn))
    # The first turn made four messages; the second turn's stay as they were.
    assert after[1:] == before[4:]
    assert list(session.events)[: len(events_before)] == events_before


def test_messages_appended_after_the_compaction_follow_it_verbatim() -> None:
    session = new_session()
    complete_turn(session, "first")
    session.append(compacted(step_ends(session)[-1]))
    complete_turn(session, "third")

    messages = derive_messages(session)
    assert messages[0] == summary_message(compacted(step_ends(session)[1]))
    assert messages[1] == UserRoleMessage((TextBlock("third"),))
    assert len(messages) == 5


def test_a_later_compaction_covering_an_earlier_summary_replaces_it_too() -> None:
    session = new_session()
    complete_turn(session, "one")
    session.append(compacted(step_ends(session)[-1], "first summary"))
    complete_turn(session, "two")
    complete_turn(session, "three")
    session.append(compacted(step_ends(session)[3], "second summary"))

    messages = derive_messages(session)
    texts = [m.content[0].text for m in messages if isinstance(m, UserRoleMessage)]  # type: ignore[union-attr]
    assert texts == [SUMMARY_PREFIX + "second summary", "three"]


def test_a_compacted_log_reloads_into_the_same_conversation() -> None:
    session = new_session()
    complete_turn(session, "first")
    complete_turn(session, "second")
    session.append(compacted(step_ends(session)[1]))
    registry = EventRegistry()
    records = [json.loads(json.dumps(event.to_record())) for event in session.events]

    reloaded = [Event.from_record(record, registry) for record in records]

    assert derive_messages(reloaded) == derive_messages(session)
    assert reloaded[-1].type == "context/compacted"


def test_a_range_that_names_the_compaction_itself_or_later_is_cut_at_it() -> None:
    session = new_session()
    complete_turn(session, "first")
    seq = len(session.events)
    session.append(compacted(10_000))

    messages = derive_messages(session)
    assert messages == [summary_message(compacted(seq - 1))]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"first_seq": 5, "last_seq": 2}, "last_seq (2) is before first_seq (5)"),
        ({"first_seq": -1}, "first_seq must be an int >= 0"),
        ({"trigger": "sometimes"}, "trigger"),
        ({"summary": 3}, "summary"),
    ],
)
def test_a_malformed_compaction_is_refused_with_the_field(
    data: dict[str, object], message: str
) -> None:
    good = {
        "first_seq": 0,
        "last_seq": 3,
        "summary": "s",
        "trigger": "manual",
        "model": "offline",
        "tokens_before": 10,
    }
    record = {"type": "context/compacted", "seq": 4, "time": 1.0, "data": {**good, **data}}
    with pytest.raises(EventFormatError, match=re.escape(message)):
        Event.from_record(record, EventRegistry())


def test_an_event_without_a_payload_is_decoded_from_its_data() -> None:
    session = new_session()
    complete_turn(session, "first")
    plain = [Event(e.type, e.seq, e.time, e.data) for e in session.events]
    plain.append(Event("context/compacted", len(plain), 1.0, compacted(3).to_data()))
    assert derive_messages(plain)[0] == summary_message(compacted(3))
