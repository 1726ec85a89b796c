"""The bridge plugin's own teardown (an unload, not a disconnect), in process.

Unloading the plugin disposes every session it opened — including one still
opening — and answers every pending prompt ``cancelled``; afterwards no agent
and no session-store entry remain.
"""

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tether.acp import bridge as bridge_plugin
from tether.acp.bridge import ACP, CLOSED, Bridge
from tether.acp.editor_files import ClientFeatures
from tether.acp.errors import BridgeClosedError
from tether.acp.wire import PermissionOption, RequestPermissionResponse, ToolCallUpdate
from tether.agent import AgentsView, UserMessage
from tether.host import Tether
from tether.runtime import Fiber
from tether.session.store import SESSION_EVENT

OVERLAY = {
    "plugins": [
        {"id": "agent_loop", "config": {"model": "scripted"}},
        {"id": "scripted", "plugin": "tests.acp.scripted"},
    ]
}


@dataclass
class Link:
    updates: list[tuple[str, Any]] = field(default_factory=list)
    features: ClientFeatures = field(default_factory=ClientFeatures)

    def send_update(self, session_id: str, update: Any, seq: int | None = None) -> None:
        self.updates.append((session_id, update))

    async def drain(self) -> None:
        pass

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        raise ConnectionError("not asked in these tests")


@dataclass
class Mounted:
    tether: Tether
    fiber: Fiber
    bridge: Bridge
    link: Link


@pytest.fixture
async def mounted(tmp_path: Path) -> AsyncIterator[Mounted]:
    async with Tether(overlays=[OVERLAY], data_dir=tmp_path) as tether:
        fiber = await tether.runtime.ctx.plugin(bridge_plugin, {"mode": "auto"})
        bridge = tether.runtime.ctx.get(ACP)
        assert isinstance(bridge, Bridge)
        link = Link()
        bridge.bind(link)
        yield Mounted(tether, fiber, bridge, link)


async def test_unloading_the_bridge_disposes_its_sessions_and_answers_prompts(
    mounted: Mounted,
) -> None:
    bridge, tether = mounted.bridge, mounted.tether
    first = await bridge.create("/")
    second = await bridge.create("/")
    streaming = asyncio.Event()
    tether.runtime.ctx.on(
        SESSION_EVENT,
        lambda session, event: (
            streaming.set() if session.id == first.id and event.type == "assistant/chunk" else None
        ),
    )
    closed: list[object] = []
    tether.runtime.ctx.on(CLOSED, closed.append)
    answer = bridge.prompt(first.id, UserMessage.text("hold"))
    await streaming.wait()
    await mounted.fiber.dispose()
    assert await answer == "cancelled"
    assert closed == [bridge]
    assert tether.agents.list() == [] and tether.sessions.list() == []
    assert bridge.sessions == [] and second.agent.id not in [a.id for a in tether.agents.list()]
    stored = await tether.persistence.load(first.id)
    assert stored.events[-1].type == "turn/end"
    assert stored.events[-1].data["reason"] == {"kind": "aborted", "cause": "disposed"}


async def test_a_load_still_opening_when_the_bridge_closes_disposes_itself(
    mounted: Mounted, monkeypatch: pytest.MonkeyPatch
) -> None:
    bridge, tether = mounted.bridge, mounted.tether
    handle = await tether.agents.create(cwd="/")
    handle.agent.followup(UserMessage.text("remember"))
    await handle.agent.when_idle()
    await handle.dispose()

    reached, release = asyncio.Event(), asyncio.Event()
    persistence = tether.persistence
    prepare_resume = persistence.prepare_resume

    async def gated(session_id: str) -> Any:
        reached.set()
        await release.wait()
        return await prepare_resume(session_id)

    monkeypatch.setattr(persistence, "prepare_resume", gated)
    loading = asyncio.ensure_future(bridge.load(handle.agent.id, "/"))
    await reached.wait()
    closing = bridge.close()
    release.set()
    with pytest.raises(BridgeClosedError, match="was opening"):
        await loading
    await closing
    created = tether.agents.list(), tether.sessions.list()
    assert created == ([], [])
    with pytest.raises(BridgeClosedError):
        await bridge.create("/")


async def test_close_returns_only_after_every_opening_session_was_disposed(
    mounted: Mounted, monkeypatch: pytest.MonkeyPatch
) -> None:
    bridge, tether = mounted.bridge, mounted.tether
    reached, release = asyncio.Event(), asyncio.Event()
    create = AgentsView.create

    async def gated(self: AgentsView, *args: Any, **kwargs: Any) -> Any:
        handle = await create(self, *args, **kwargs)
        reached.set()
        await release.wait()
        return handle

    monkeypatch.setattr(AgentsView, "create", gated)
    opening = asyncio.ensure_future(bridge.create("/"))
    await reached.wait()
    assert [a.id for a in tether.agents.list()] != []  # created, not yet published
    closing = asyncio.ensure_future(bridge.close())
    for _ in range(50):
        await asyncio.sleep(0)
    assert not closing.done(), "close returned while a session/new was still opening"
    release.set()
    await closing
    # The moment close returns, the opening session is gone too.
    assert (tether.agents.list(), tether.sessions.list()) == ([], [])
    with pytest.raises(BridgeClosedError, match="was opening"):
        await opening
