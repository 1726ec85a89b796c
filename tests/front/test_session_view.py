"""The session view: a cursor reads a log once, settings are folded as the log grows,
and a turn another process runs is followed to its end through its log."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tether.agent import TurnClaimed, TurnEnded, UserMessage
from tether.front.follow import Cursor, SessionViews, following_turn
from tether.host import Tether
from tether.session import Aborted, Session, SessionHeader, TurnEnd, TurnStart
from tether.session.settings import (
    MODE_OPTION,
    ConfigChanged,
    PermissionGranted,
    SessionSettings,
)


def _session() -> Session:
    return Session(SessionHeader("s-1", 1_700_000_000.0, "/tmp"))


def test_a_cursor_reads_each_event_once_however_it_is_woken() -> None:
    session = _session()
    cursor = Cursor()
    shown: list[int] = []
    first = session.append(ConfigChanged(option="a", value="1"))
    shown += [e.seq for e in cursor.next(first, session.events)]
    # Appended while the reader was busy: the log keeps them, the next read takes them.
    for value in ("2", "3", "4"):
        session.append(ConfigChanged(option="a", value=value))
    last = session.events[-1]
    shown += [e.seq for e in cursor.next(last, session.events)]
    shown += [e.seq for e in cursor.next(last, session.events)]  # woken twice: nothing new
    assert shown == [0, 1, 2, 3]
    assert [e.seq for e in cursor.take(session.events, limit=2)] == []
    behind = Cursor(-1)
    assert [e.seq for e in behind.take(session.events, limit=3)] == [0, 1, 2]
    assert [e.seq for e in behind.take(session.events, limit=3)] == [3]


def test_a_sessions_settings_are_folded_as_its_log_grows() -> None:
    session = _session()
    assert session.settings.options == {}
    session.append(ConfigChanged(option=MODE_OPTION, value="auto"))
    session.append(PermissionGranted(tool="bash"))
    assert session.settings.options == {MODE_OPTION: "auto"}
    assert session.settings.allowed == ("bash",)
    session.append(ConfigChanged(option=MODE_OPTION, value="ask"))
    settings = session.settings
    assert settings is session.settings  # one fold, advanced: not rebuilt per read
    assert settings.options == SessionSettings(session.events).options == {MODE_OPTION: "ask"}
    restored = Session.restore(session.header, list(session.events))
    assert restored.settings.options == {MODE_OPTION: "ask"}
    assert restored.settings.allowed == ("bash",)


async def test_a_turn_run_by_another_host_is_followed_to_its_end_in_the_log(
    tmp_path: Path,
) -> None:
    async with (
        Tether(data_dir=tmp_path) as running,
        Tether(data_dir=tmp_path) as watching,
    ):
        handle = await running.agents.create(cwd=str(tmp_path))
        agent = handle.agent
        await agent.followup(UserMessage.text("$ sleep 30")).claimed()
        await running.sessions.flush(agent.session)
        stored = await watching.persistence.load(agent.id, as_stored=True)
        assert stored.open_turn == 1
        views = SessionViews(watching.sessions, watching.persistence)
        async with following_turn(views, stored, holder_check=0.05) as turn:
            claimed = await turn.handle.claimed()
            start = next(e.seq for e in stored.events if isinstance(e.payload, TurnStart))
            assert claimed == TurnClaimed(turn=1, seq=start)
            assert turn.handle.outcome is None
            agent.cancel()
            async with asyncio.timeout(20):
                ended = await turn.settled()
            assert ended is not None and await turn.handle.durable() == ended
        assert isinstance(ended, TurnEnded)
        assert ended.reason == Aborted(cause="user")
        end = agent.session.events[ended.end_seq]
        assert end.payload == TurnEnd(turn=1, reason=Aborted(cause="user"))
        assert turn.handle.message is None
        await handle.dispose()
