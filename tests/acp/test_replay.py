"""``session/load`` of a long log: replayed a batch at a time, each sent before the next is read."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.long_logs import Decodes, store_long_session
from tether.acp import bridge as bridge_plugin
from tether.acp import record as record_module
from tether.acp.bridge import ACP, Bridge
from tether.acp.editor_files import ClientFeatures
from tether.acp.wire import PermissionOption, RequestPermissionResponse, ToolCallUpdate
from tether.host import Tether
from tether.session.packed import _RUN

OVERLAY = {
    "plugins": [
        {"id": "agent_loop", "config": {"model": "scripted"}},
        {"id": "scripted", "plugin": "tests.acp.scripted"},
    ]
}


@dataclass
class Link:
    """A client that takes updates as they are written and notes what was
    decoded by then and when the replay waited for them to leave."""

    decodes: Decodes
    updates: list[Any] = field(default_factory=list)
    drains: list[tuple[int, int]] = field(default_factory=list)
    """(updates written, events decoded) at each drain."""
    features: ClientFeatures = field(default_factory=ClientFeatures)

    def send_update(self, session_id: str, update: Any, seq: int | None = None) -> None:
        self.updates.append(update)

    async def drain(self) -> None:
        self.drains.append((len(self.updates), self.decodes.count))

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        raise ConnectionError("not asked in these tests")


async def test_a_load_replays_a_long_log_a_batch_at_a_time_each_sent_before_the_next_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = 100
    monkeypatch.setattr(record_module, "REPLAY_BATCH", batch)
    async with Tether(overlays=[OVERLAY], data_dir=tmp_path) as tether:
        await tether.runtime.ctx.plugin(bridge_plugin, {"mode": "auto"})
        bridge = tether.runtime.ctx.get(ACP)
        assert isinstance(bridge, Bridge)
        turns, chunks = 40, 80
        session_id = await store_long_session(tether.persistence, "/", turns, chunks)
        link = Link(Decodes(monkeypatch))
        bridge.bind(link)
        record = await bridge.load(session_id, "/")

        texts = [
            update["content"]["text"]
            for update in link.updates
            if update["sessionUpdate"] == "agent_message_chunk"
        ]
        assert texts == [f"word{i} " for i in range(chunks)] * turns  # no gap, no duplicate
        # Every batch of updates is handed on before the next is made...
        sent = [0, *(written for written, _ in link.drains)]
        assert sent[-1] == len(link.updates)
        assert max(b - a for a, b in itertools.pairwise(sent)) <= batch
        # ...and what it shows is decoded as it goes: one run ahead at most.
        decoded = [count for _, count in link.drains]
        per_turn = len(record.agent.session.events) / turns / chunks  # events per update, about
        assert max(b - a for a, b in itertools.pairwise(decoded)) <= (batch * per_turn + _RUN)
        await bridge.close()


@dataclass
class HeldLink(Link):
    """A client whose first drain waits until :attr:`go` is set: the load's replay
    is held half way."""

    waiting: asyncio.Event = field(default_factory=asyncio.Event)
    go: asyncio.Event = field(default_factory=asyncio.Event)

    async def drain(self) -> None:
        await super().drain()
        self.waiting.set()
        await self.go.wait()


async def test_a_session_still_replaying_its_load_is_closed_or_joined_only_once_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(record_module, "REPLAY_BATCH", 50)
    async with Tether(overlays=[OVERLAY], data_dir=tmp_path) as tether:
        await tether.runtime.ctx.plugin(bridge_plugin, {"mode": "auto"})
        bridge = tether.runtime.ctx.get(ACP)
        assert isinstance(bridge, Bridge)
        session_id = await store_long_session(tether.persistence, "/", 4, 40)
        link = HeldLink(Decodes(monkeypatch))
        bridge.bind(link)
        loading = asyncio.create_task(bridge.load(session_id, "/"))
        await link.waiting.wait()  # published, its replay half way
        again = asyncio.create_task(bridge.load(session_id, "/"))
        closing = asyncio.create_task(bridge.close_session(session_id))
        link.go.set()
        record = await loading
        assert await again is record  # joined: one replay for both
        await closing
        replayed = [u for u in link.updates if u["sessionUpdate"] == "agent_message_chunk"]
        assert len(replayed) == 4 * 40  # the history once
        assert bridge.sessions == []  # the close waited for the load, then closed it
        await bridge.close()
