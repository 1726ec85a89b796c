"""Bad servers and bad input: clear errors and notices, never a crashed session."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from acp.exceptions import RequestError

from tests.acp.harness import SCRIPTED, serving
from tests.mcp_client.support import RAW_SERVER, command, notices, results, stdio
from tests.mcp_client.test_acp_servers import _alive, call, new_session

QUICK = SCRIPTED + (
    "  - id: mcp\n    plugin: tether.mcp.plugin\n"
    "    config: {{startup_timeout_ms: 10000, cancel_grace_ms: 500, kill_grace_ms: 500}}\n"
)
"""The test composition, with short MCP timeouts."""


MALFORMED = [
    ({"name": "x"}, "mcpServers[0].command: must be a non-empty string"),
    ({"name": "", "command": "true", "args": [], "env": []}, "mcpServers[0].name"),
    ({"type": "http", "name": "x", "url": "ftp://h", "headers": []}, "must be an http://"),
    ({"type": "pigeon", "name": "x"}, "mcpServers[0]"),
    ("a string", "mcpServers[0]"),
]


async def test_a_malformed_mcp_servers_entry_is_invalid_params(tmp_path: Path) -> None:
    async with serving(tmp_path, model="offline") as server:
        for number, (entry, error) in enumerate(MALFORMED, start=90):
            for method in ("session/new", "session/load"):
                params = {"cwd": str(server.home), "sessionId": "s", "mcpServers": [entry]}
                frame = {"jsonrpc": "2.0", "id": number, "method": method, "params": params}
                answer = await server.frame_answer(frame, number)
                assert answer["error"]["code"] == -32602, (method, entry)
                assert error in answer["error"]["message"], (method, entry)
        assert server.ledger() == []  # no session was created


async def test_two_servers_with_one_name_are_refused(tmp_path: Path) -> None:
    async with serving(tmp_path, model="offline") as server:
        with pytest.raises(RequestError) as raised:
            await new_session(server, stdio("same"), stdio("same"))
        assert "two servers are named 'same'" in str(raised.value.data or raised.value)


async def test_servers_that_cannot_start_are_notices_and_the_session_works(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, "--mode", "auto", overlay=QUICK, model="offline") as server:
        loop = asyncio.get_running_loop()
        started = loop.time()
        sid = await new_session(
            server,
            command("missing", "no-such-mcp-server-command"),
            command(
                "quitter",
                sys.executable,
                "-c",
                "import sys; print('bye', file=sys.stderr); sys.exit(3)",
            ),
            command("silent", "sleep", "60"),
            stdio("good"),
        )
        assert loop.time() - started < 25  # the startup timeout, not a hang
        # The notice reaches the model with the first prompt (the offline model
        # answers the last message, so that prompt is a plain one).
        assert await server.prompt(sid, "hello") == "end_turn"
        assert await server.prompt(sid, call("mcp__good__echo", text="still here")) == "end_turn"
        assert results(server.log(sid)) == [("mcp__good__echo", "echo: still here", False)]
        (notice,) = notices(server.log(sid))
        assert (
            "'missing' failed to start: command 'no-such-mcp-server-command' was not found"
            in notice
        )
        assert "'quitter' failed to start: it exited with status 3" in notice and "bye" in notice
        assert "'silent' failed to start: it did not answer its handshake" in notice
    assert "Traceback" not in server.stderr()


async def test_a_server_that_dies_is_an_error_result_and_a_notice(tmp_path: Path) -> None:
    async with serving(tmp_path, "--mode", "auto", overlay=QUICK, model="offline") as server:
        sid = await new_session(server, stdio("t"))
        assert await server.prompt(sid, call("mcp__t__exit")) == "end_turn"
        assert await server.prompt(sid, "hello") == "end_turn"  # takes the notice
        assert await server.prompt(sid, call("mcp__t__echo", text="again")) == "end_turn"
        (died, later) = results(server.log(sid))
        assert died[2] and "exited with status 7" in died[1]
        assert later[2] and "is not running" in later[1]
        assert any("'t' exited with status 7" in text for text in notices(server.log(sid)))


async def test_huge_and_malformed_results_are_cut_or_refused(tmp_path: Path) -> None:
    async with serving(tmp_path, "--mode", "auto", model="offline") as server:
        sid = await new_session(server, stdio("t"), stdio("raw", script=RAW_SERVER))
        assert await server.prompt(sid, "hello") == "end_turn"  # takes the notice
        assert await server.prompt(sid, call("mcp__t__huge", size=3_000_000)) == "end_turn"
        assert await server.prompt(sid, call("mcp__raw__bad")) == "end_turn"
        (huge, bad) = results(server.log(sid))
        assert not huge[2] and len(huge[1]) < 101_000
        assert huge[1].endswith("[truncated: 100000 of 3000000 characters shown]")
        assert bad[2] and "malformed result" in bad[1]
        (notice,) = notices(server.log(sid))
        assert "'broken' was left out: its input schema is unusable" in notice


async def test_a_cancel_the_server_honours_keeps_it_running(tmp_path: Path) -> None:
    marker = tmp_path / "finished"
    async with serving(tmp_path, "--mode", "auto", overlay=QUICK, model="offline") as server:
        sid = await new_session(server, stdio("t"))
        assert await server.prompt(sid, call("mcp__t__pid")) == "end_turn"
        pid = int(results(server.log(sid))[0][1])
        prompt = server.start_prompt(sid, call("mcp__t__wait", seconds=30, marker=str(marker)))
        await server.client.wait_for(lambda: _running(server, sid) == 2)
        await server.conn.cancel(session_id=sid)
        assert await prompt == "cancelled"
        assert _alive(pid) and not marker.exists()
        assert await server.prompt(sid, call("mcp__t__echo", text="after")) == "end_turn"
        assert results(server.log(sid))[-1] == ("mcp__t__echo", "echo: after", False)


async def test_a_server_stuck_in_a_cancelled_call_is_killed(tmp_path: Path) -> None:
    async with serving(tmp_path, "--mode", "auto", overlay=QUICK, model="offline") as server:
        sid = await new_session(server, stdio("t"))
        assert await server.prompt(sid, call("mcp__t__pid")) == "end_turn"
        pid = int(results(server.log(sid))[0][1])
        prompt = server.start_prompt(sid, call("mcp__t__stuck", seconds=60))
        await server.client.wait_for(lambda: _running(server, sid) == 2)
        # Cleared to run, the call snapshots the workspace before it starts: cancel
        # once it has reached the server.
        for _ in range(200):  # the log is read from disk: look again until it shows it
            if _snapshot_after_last_call(server, sid):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        await server.conn.cancel(session_id=sid)
        assert await prompt == "cancelled"
        assert not _alive(pid)
        assert await server.prompt(sid, "hello") == "end_turn"  # takes the notice
        assert any("did not honour the cancellation" in text for text in notices(server.log(sid)))
        assert await server.prompt(sid, call("mcp__t__echo", text="after")) == "end_turn"
        content, is_error = results(server.log(sid))[-1][1:]
        assert is_error and "did not honour the cancellation" in content


def _snapshot_after_last_call(server: object, sid: str) -> bool:
    """Whether ``sid``'s last tool call took its workspace snapshot before it ran."""
    log = server.log(sid)  # type: ignore[attr-defined]
    calls = [i for i, e in enumerate(log) if e["type"] == "tool/call"]
    return bool(calls) and any(
        e["type"] == "workspace/snapshot" and e["data"]["moment"] == "call"
        for e in log[calls[-1] :]
    )


def _running(server: object, sid: str) -> int:
    """How many tool calls of ``sid`` were cleared to run."""
    from acp.schema import ToolCallProgress

    updates = server.client.of(sid)  # type: ignore[attr-defined]
    return sum(isinstance(u, ToolCallProgress) and u.status == "in_progress" for u in updates)
