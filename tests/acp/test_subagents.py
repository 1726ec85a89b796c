"""Child agents of an ACP session answer to that session's permission mode."""

from __future__ import annotations

import json
from pathlib import Path

from tests.acp.harness import serving

DELEGATE = "/tool task " + json.dumps(
    {"description": "greet", "prompt": "$ echo hello from the child"}
)


async def test_a_childs_tool_calls_are_asked_in_its_parents_session(tmp_path: Path) -> None:
    async with serving(tmp_path, overlay="plugins:\n", model="offline") as server:
        sid = await server.new_session()
        assert await server.prompt(sid, DELEGATE) == "end_turn"
        asked = [(session, call.title) for session, call, _ in server.client.permission_requests]
        # The delegation itself, then the child's bash call: both in the parent's session.
        assert [session for session, _ in asked] == [sid, sid]
        assert "hello from the child" in server.client.text(sid)


async def test_a_rejection_in_the_parents_session_stops_the_childs_call(tmp_path: Path) -> None:
    async with serving(tmp_path, overlay="plugins:\n", model="offline") as server:
        sid = await server.new_session()
        server.client.answers = ["allow-once", "reject-once"]
        assert await server.prompt(sid, DELEGATE) == "end_turn"
        assert len(server.client.permission_requests) == 2
        [result] = [e["data"] for e in server.log(sid) if e["type"] == "tool/result"]
        child = str(result["content"]).rsplit("[task ", 1)[1].split(":")[0]
        [refused] = [e["data"] for e in server.log(child) if e["type"] == "tool/result"]
        assert refused["is_error"] is True
        assert refused["content"] == "denied: the user did not allow this bash call"
        assert "hello from the child" not in server.client.text(sid)


async def test_in_auto_mode_nothing_is_asked_of_a_child_either(tmp_path: Path) -> None:
    async with serving(tmp_path, overlay="plugins:\n", model="offline") as server:
        sid = await server.new_session()
        await server.conn.set_session_mode(mode_id="auto", session_id=sid)
        server.client.answer = "reject-once"
        assert await server.prompt(sid, DELEGATE) == "end_turn"
        assert server.client.permission_requests == []
        assert "hello from the child" in server.client.text(sid)
