"""In process: a server that changes its prompts has its slash commands follow, on both
generations of servers (``notifications/prompts/list_changed`` from a 2025-era one, the
``subscriptions/listen`` stream of a current one)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.mcp_client.support import SDK_SERVER
from tether.agent.commands import COMMANDS, COMMANDS_CHANGED, CommandArgument, CommandRegistry
from tether.front.prompting import offered_commands, run_command
from tether.host import Tether
from tether.mcp.plugin import MCP
from tether.mcp.servers import StdioServer
from tether.runtime.signal import CancelSignal


def _names(commands: list[Any]) -> set[str]:
    return {command.name for command in commands if command.name.startswith("mcp__")}


@pytest.mark.parametrize("generation", ["current", "2025"])
async def test_a_changed_prompt_list_is_what_the_next_command_listing_offers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, generation: str
) -> None:
    monkeypatch.setenv("TETHER_HOME", str(tmp_path))
    legacy = ("--legacy",) if generation == "2025" else ()
    server = StdioServer("t", sys.executable, (SDK_SERVER, "stdio", *legacy))
    async with Tether(data_dir=tmp_path) as tether:
        ctx = tether.runtime.ctx
        mcp, registry = ctx.get(MCP), ctx.get(COMMANDS)
        assert mcp is not None and registry is not None
        told: list[set[str]] = []

        def heard(changed: CommandRegistry) -> None:
            told.append(_names(changed.list()))

        ctx.on(COMMANDS_CHANGED, heard)

        async def setup(agent: Any) -> None:
            assert await mcp.attach(agent, [server]) == []

        handle = await tether.agents.create(cwd=str(Path.cwd()), setup=setup)
        agent = handle.agent
        (connection,) = mcp.connections(agent)
        expected = "2026-07-28" if generation == "current" else "2025-11-25"
        assert connection.protocol_version == expected
        assert _names(await offered_commands(agent, registry)) == {"mcp__t__review"}

        swapped = await connection.call("swap_prompt", {"name": "fresh"}, CancelSignal())
        assert not swapped.is_error
        # The change may come just after the call's answer, on a stream of its own.
        for _ in range(250):
            offered = await offered_commands(agent, registry)
            if _names(offered) == {"mcp__t__fresh"}:
                break
            await asyncio.sleep(0.02)
        assert _names(offered) == {"mcp__t__fresh"}
        (fresh,) = [command for command in offered if command.name == "mcp__t__fresh"]
        assert fresh.description == "the prompt fresh"
        assert fresh.arguments == (CommandArgument("subject", None, True),)
        assert told[-1] == {"mcp__t__fresh"}  # what an editor's available_commands_update lists

        answer = await run_command(fresh, agent, "tides")
        assert answer == "Sent prompt 'fresh' of MCP server 't' (1 message(s))."
        await agent.when_idle()
        assert any("About tides." in repr(event) for event in agent.session.events)
        await handle.dispose()
        assert _names(registry.list()) == set()
