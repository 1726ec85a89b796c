"""``context/environment``: the model sees the changing facts of its environment as a
message where they were noted, and a note it no longer sees is noted again."""

from __future__ import annotations

from tether.content import TextBlock, UserRoleMessage
from tether.session import derive_messages
from tether.session.environment import last_noted
from tether.session.events import Event

ONE = "Environment now:\n- Today's date: 2026-12-05\n- Git: not a git repository"
TWO = "Environment now:\n- Today's date: 2026-12-06\n- Git: not a git repository"


def note(seq: int, text: str) -> Event:
    return Event("context/environment", seq, 0.0, {"text": text})


def prompt(seq: int, text: str) -> Event:
    content = [{"type": "text", "text": text}]
    return Event("user/message", seq, 0.0, {"id": f"m{seq}", "source": "user", "content": content})


def compacted(seq: int, first: int, last: int) -> Event:
    data = {
        "first_seq": first,
        "last_seq": last,
        "summary": "earlier work",
        "trigger": "auto",
        "model": "m",
        "tokens_before": 10,
    }
    return Event("context/compacted", seq, 0.0, data)


def test_a_note_is_a_user_message_where_it_stands() -> None:
    events = [note(0, ONE), prompt(1, "hi"), note(2, TWO), prompt(3, "again")]
    assert derive_messages(events) == [
        UserRoleMessage((TextBlock(ONE),)),
        UserRoleMessage((TextBlock("hi"),)),
        UserRoleMessage((TextBlock(TWO),)),
        UserRoleMessage((TextBlock("again"),)),
    ]


def test_the_last_note_is_the_one_that_holds() -> None:
    assert last_noted([note(0, ONE), prompt(1, "hi"), note(2, TWO)]) == TWO
    assert last_noted([prompt(0, "hi")]) is None


def test_a_note_summarized_or_cleared_away_is_not_seen_any_more() -> None:
    assert last_noted([note(0, ONE), prompt(1, "hi"), compacted(2, 0, 1)]) is None
    assert last_noted([prompt(0, "hi"), note(1, ONE), compacted(2, 0, 0)]) == ONE
    assert last_noted([note(0, ONE), Event("history/cleared", 1, 0.0, {})]) is None
