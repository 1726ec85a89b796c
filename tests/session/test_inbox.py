"""replay_inbox: rebuilding an agent's two FIFOs from the log."""

from __future__ import annotations

import pytest

from tether.session import (
    Event,
    InboxSpliced,
    InboxState,
    SessionInvariantError,
    replay_inbox,
)

from .builders import complete_turn, new_session, open_step, user


def test_replay_inbox_rebuilds_fifos() -> None:
    session = new_session()
    a, b, c, d, e = (user(f"m{i}", f"prompt {i}") for i in range(5))
    session.append(InboxSpliced("queued", "insert", messages=(a, b)))
    session.append(InboxSpliced("steering", "insert", messages=(c,)))
    complete_turn(session)
    session.append(InboxSpliced("queued", "insert", messages=(d,)))
    session.append(InboxSpliced("steering", "insert", messages=(e,)))
    open_step(session)
    session.append(InboxSpliced("queued", "claim", ids=("m0",)))
    session.append(InboxSpliced("steering", "claim", ids=("m2",)))
    session.append(InboxSpliced("queued", "cancel", ids=("m3",)))

    assert replay_inbox(session.events) == InboxState(queued=(b,), steering=(e,))
    # From stored records alone, too.
    stored = [Event.from_record(event.to_record()) for event in session.events]
    assert replay_inbox(stored) == InboxState(queued=(b,), steering=(e,))
    opaque = [Event(ev.type, ev.seq, ev.time, ev.data) for ev in session.events]
    assert replay_inbox(opaque) == InboxState(queued=(b,), steering=(e,))


def test_replay_of_a_log_without_splices_is_empty() -> None:
    session = new_session()
    complete_turn(session)
    assert replay_inbox(session.events) == InboxState((), ())


def test_replay_rejects_removing_a_message_that_is_not_pending() -> None:
    session = new_session()
    session.append(InboxSpliced("queued", "insert", messages=(user("m1"),)))
    session.append(InboxSpliced("steering", "discard", ids=("m1",)))
    with pytest.raises(
        SessionInvariantError, match="seq 1: inbox discard of 'm1': not pending in steering"
    ):
        replay_inbox(session.events)


def test_replay_rejects_inserting_an_id_that_is_already_pending() -> None:
    session = new_session()
    session.append(InboxSpliced("queued", "insert", messages=(user("m1"),)))
    session.append(InboxSpliced("steering", "insert", messages=(user("m1"),)))
    with pytest.raises(
        SessionInvariantError, match="seq 1: inbox insert of 'm1': that id is already pending"
    ):
        replay_inbox(session.events)
