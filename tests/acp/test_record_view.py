"""A session record reads its updates from the log: what is appended during a replay is
shown once, after it, and a prompt whose turn ended meanwhile is answered after that."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from tether.acp.editor_files import ClientFeatures
from tether.acp.record import SessionRecord
from tether.acp.replay import replay
from tether.acp.updates import SessionUpdate
from tether.agent import UserMessage
from tether.host import Tether
from tether.tools.permission import Mode


class _Link:
    """A client link that keeps every update, and runs ``during`` at the first drain."""

    def __init__(self) -> None:
        self.sent: list[SessionUpdate] = []
        self.during: Callable[[], Awaitable[None]] | None = None
        self.features = ClientFeatures()

    def send_update(self, session_id: str, update: SessionUpdate, seq: int | None = None) -> None:
        self.sent.append(update)

    async def drain(self) -> None:
        during, self.during = self.during, None
        if during is not None:
            await during()
        await asyncio.sleep(0)


async def test_a_turn_run_during_a_replay_is_shown_once_after_it_then_answered(
    tmp_path: Path,
) -> None:
    async with Tether(data_dir=tmp_path) as tether:
        handle = await tether.agents.create(cwd=str(tmp_path))
        agent = handle.agent
        await agent.followup(UserMessage.text("$ echo one")).ended()
        link = _Link()
        record = SessionRecord(agent, link, Mode.AUTO, hold=False)  # type: ignore[arg-type]
        agent.session.observe(lambda _session, event: record.on_event(event))
        history = len(agent.session.events)
        answers: list[asyncio.Future[object]] = []

        async def prompt_and_finish() -> None:
            answers.append(record.begin_prompt(UserMessage.text("$ echo two")))
            await agent.when_idle()
            assert agent.session.last_turn == 2
            await asyncio.sleep(0.05)
            assert not answers[0].done()  # its updates wait for the replay's end

        link.during = prompt_and_finish
        await record.replay()
        assert await answers[0] == "end_turn"
        usage = "usage_update"  # a replay without a meter sends none
        sent = [u for u in link.sent if u.get("sessionUpdate") != usage]
        replayed = list(
            replay(agent.session.events, cwd=str(tmp_path), stop=history, shown=record.shown)
        )
        assert sent[: len(replayed)] == replayed
        live = sent[len(replayed) :]
        calls = [u for u in live if u.get("sessionUpdate") == "tool_call"]
        assert len(calls) == 1  # the turn run meanwhile, shown once, after the replay
        await handle.dispose()
