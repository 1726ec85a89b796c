"""`SessionViews.follow`: a session's events after a seq, then live — no gap, no duplicate."""

from __future__ import annotations

import asyncio
import gc
import weakref
from pathlib import Path

import pytest

from tests.long_logs import Decodes, store_long_session
from tether.agent import UserMessage
from tether.front import follow as follow_module
from tether.front.follow import SessionViews
from tether.host import Tether
from tether.persist.backends import JsonlBackend
from tether.persist.backends.base import LoadedLog
from tether.session import Event, Session
from tether.session.registry import EventRegistry
from tether.session.store import SESSION_EVENT
from tether.web.app import ENCODED_KEPT, EncodedLogs


async def _until_turn_end(follow: object, seen: list[Event]) -> None:
    async for batch in follow:  # type: ignore[attr-defined]
        seen.extend(batch)
        if seen and seen[-1].type == "turn/end":
            return


async def test_a_stored_session_is_followed_from_disk_then_live_once_resumed(
    tmp_path: Path,
) -> None:
    async with Tether(data_dir=tmp_path) as tether:
        handle = await tether.agents.create(cwd=str(tmp_path))
        handle.agent.followup(UserMessage.text("$ echo stored-turn"))
        await handle.agent.when_idle()
        session_id = handle.agent.id
        stored = len(handle.agent.session.events)
        await handle.dispose()
        assert tether.sessions.get(session_id) is None

        follows = SessionViews(tether.sessions, tether.persistence)
        tether.runtime.ctx.on(SESSION_EVENT, follows.on_session_event)
        follow = follows.follow(session_id, after_seq=2)
        first = await anext(follow)
        assert [e.seq for e in first] == list(range(3, stored))
        assert follows.followers(session_id) == 1

        resumed = await tether.agents.resume(session_id)
        resumed.agent.followup(UserMessage.text("$ echo live-turn"))
        seen: list[Event] = []
        await _until_turn_end(follow, seen)
        assert [e.seq for e in seen] == list(range(stored, seen[-1].seq + 1))
        assert "live-turn" in str([e.to_record() for e in seen])
        await follow.aclose()
        assert follows.followers(session_id) == 0
        await resumed.dispose()


async def test_a_nudge_yields_an_empty_batch_between_events(tmp_path: Path) -> None:
    async with Tether(data_dir=tmp_path) as tether:
        handle = await tether.agents.create(cwd=str(tmp_path))
        handle.agent.followup(UserMessage.text("first"))
        await handle.agent.when_idle()
        follows = SessionViews(tether.sessions, tether.persistence)
        tether.runtime.ctx.on(SESSION_EVENT, follows.on_session_event)
        follow = follows.follow(handle.agent.id)
        await anext(follow)  # the first turn
        follows.nudge(handle.agent.id)
        assert await anext(follow) == ()
        handle.agent.followup(UserMessage.text("hi"))
        seen: list[Event] = []
        await _until_turn_end(follow, seen)
        assert seen[0].seq > 0 and [e.seq for e in seen] == list(
            range(seen[0].seq, seen[-1].seq + 1)
        )
        await follow.aclose()
        await handle.dispose()


async def test_views_of_one_stored_session_opened_together_read_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Tether(data_dir=tmp_path) as tether:
        handle = await tether.agents.create(cwd=str(tmp_path))
        handle.agent.followup(UserMessage.text("$ echo stored-turn"))
        await handle.agent.when_idle()
        session_id = handle.agent.id
        await handle.dispose()

        reads: list[str] = []
        load_events = JsonlBackend.load_events

        def counted(self: JsonlBackend, session_id: str, registry: EventRegistry) -> LoadedLog:
            reads.append(session_id)
            return load_events(self, session_id, registry)

        monkeypatch.setattr(JsonlBackend, "load_events", counted)
        follows = SessionViews(tether.sessions, tether.persistence)
        # What a page opens at once: its details, its usage, its events.
        follow = follows.follow(session_id)
        loaded = await asyncio.gather(
            follows.load(session_id), follows.load(session_id), anext(follow)
        )
        await follow.aclose()
        assert reads == [session_id]
        assert loaded[0] is loaded[1]
        assert list(loaded[2]) == list(loaded[0].events)
        # Once read, a later view reads it again (nothing is kept).
        await follows.load(session_id)
        assert reads == [session_id, session_id]


async def test_a_follower_catching_up_with_a_stored_log_decodes_it_a_batch_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(follow_module, "BATCH", 100)
    async with Tether(data_dir=tmp_path) as tether:
        session_id = await store_long_session(tether.persistence, "/", turns=20, chunks=40)
        total = len((await tether.persistence.load(session_id)).events)
        held: list[weakref.ref[Session]] = []
        load = tether.persistence.load

        async def kept(session_id: str) -> Session:
            session = await load(session_id)
            held.append(weakref.ref(session))
            return session

        monkeypatch.setattr(tether.persistence, "load", kept)
        decodes = Decodes(monkeypatch)
        follows = SessionViews(tether.sessions, tether.persistence)
        follow = follows.follow(session_id)
        seqs: list[int] = []
        while len(seqs) < total:
            batch = await anext(follow)
            # Each batch is at most BATCH events, decoded when it is asked for.
            assert 0 < len(batch) <= 100
            assert decodes.count == len(seqs) + len(batch)
            seqs += [event.seq for event in batch]
        assert seqs == list(range(total))
        # Caught up: the stored session read is let go while the follower waits.
        follows.nudge(session_id)
        assert await anext(follow) == ()
        gc.collect()
        assert len(held) == 1 and held[0]() is None
        await follow.aclose()


async def test_the_records_a_stream_keeps_encoded_for_its_followers_are_bounded(
    tmp_path: Path,
) -> None:
    async with Tether(data_dir=tmp_path) as tether:
        session_id = await store_long_session(tether.persistence, "/", turns=120, chunks=80)
        events = (await tether.persistence.load(session_id)).events
        encoded = EncodedLogs()
        encoded.enter(session_id)
        for start in range(0, len(events), 2000):
            message = encoded.message(session_id, events[start : start + 2000])
            assert message.startswith(b"id: %d\n" % min(start + 1999, len(events) - 1))
        assert len(events) > ENCODED_KEPT
        assert len(encoded._records[session_id]) == ENCODED_KEPT
        encoded.leave(session_id)
        assert encoded._records == {}
