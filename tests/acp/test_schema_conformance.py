"""Every frame ``tether acp`` sends in a representative conversation is valid against the
official ACP JSON schema (``schemas/acp/schema.unstable.json``), checked with ``jsonschema``
(see :mod:`tests.acp.conformance`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.acp.conformance import V1
from tests.acp.harness import AcpProcess, serving


def _problems(frame: dict[str, Any], asked: dict[object, str]) -> list[str]:
    """What is wrong with ``frame`` (a frame the server sent) by the schema."""
    return V1.problems(frame, asked)


def _check(server: AcpProcess) -> tuple[set[str], set[str]]:
    """Check every frame ``server`` sent; the methods it answered or sent, and the update kinds."""
    asked = {f["id"]: f["method"] for f in server.sent if "method" in f and "id" in f}
    problems = {
        json.dumps(frame)[:300]: found
        for frame in server.frames
        if (found := _problems(frame, asked))
    }
    assert problems == {}
    methods = {f.get("method") or asked.get(f.get("id"), "error") for f in server.frames}
    kinds = {
        f["params"]["update"]["sessionUpdate"]
        for f in server.frames
        if f.get("method") == "session/update"
    }
    return methods, kinds


async def _conversation(server: AcpProcess, cwd: Path) -> str:
    """Tool calls with a permission request, thoughts, a plan, a command, a mode, a cancel."""
    sid = await server.new_session(cwd)
    assert await server.prompt(sid, "bash echo hi") == "end_turn"
    assert len(server.client.permission_requests) == 1
    assert await server.prompt(sid, "think deep") == "end_turn"
    assert await server.prompt(sid, "plan") == "end_turn"
    assert await server.prompt(sid, "/shout hi") == "end_turn"
    await server.conn.set_session_mode(session_id=sid, mode_id="auto")
    held = server.start_prompt(sid, "hold")
    await server.client.wait_for(server.client.saw_text(sid, "holding"))
    await server.conn.cancel(session_id=sid)
    assert await held == "cancelled"
    await server.conn.list_sessions()
    unknown = {"jsonrpc": "2.0", "id": "x", "method": "session/prompt", "params": {}}
    assert "error" in await server.frame_answer(unknown, "x")
    return sid


async def test_every_frame_of_a_conversation_and_its_load_is_valid_against_the_schema(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    async with serving(tmp_path) as server:
        sid = await _conversation(server, project)
        methods, kinds = _check(server)
    assert {
        "initialize",
        "session/new",
        "session/prompt",
        "session/update",
        "session/request_permission",
        "session/set_mode",
        "session/list",
        "error",
    } <= methods
    assert {"tool_call", "tool_call_update", "agent_message_chunk", "agent_thought_chunk"} <= kinds
    assert {"plan", "available_commands_update", "current_mode_update"} <= kinds
    async with serving(tmp_path) as server:
        await server.conn.load_session(cwd=str(project), session_id=sid, mcp_servers=[])
        await server.conn.fork_session(session_id=sid, cwd=str(project), mcp_servers=[])
        methods, kinds = _check(server)
    assert {"session/load", "session/fork"} <= methods
    assert {"user_message_chunk", "tool_call", "agent_message_chunk"} <= kinds
