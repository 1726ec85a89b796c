"""Bad input gets the proper JSON-RPC error, and the server keeps serving."""

from pathlib import Path
from typing import Any

import pytest
from acp.exceptions import RequestError

from tests.acp.harness import AcpProcess, serving


async def answer(server: AcpProcess, frame: bytes | dict[str, Any], frame_id: object) -> Any:
    """Write ``frame`` raw and return the server's answer to ``frame_id``."""
    reply = await server.frame_answer(frame, frame_id)
    return reply.get("error", reply.get("result"))


async def test_malformed_frames_are_answered_and_serving_goes_on(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        parse = await answer(server, b"{not json", None)
        assert parse["code"] == -32700
        assert (await answer(server, b"[1, 2]", None))["code"] == -32600
        assert (await answer(server, {"jsonrpc": "2.0", "id": 5}, 5))["code"] == -32600
        bad_method = {"jsonrpc": "2.0", "id": 6, "method": 3}
        assert (await answer(server, bad_method, 6))["code"] == -32600
        unknown = {"jsonrpc": "2.0", "id": 7, "method": "session/bogus", "params": {}}
        assert (await answer(server, unknown, 7))["code"] == -32601
        wrong_type = {"jsonrpc": "2.0", "id": 8, "method": "session/new", "params": {"cwd": 5}}
        assert (await answer(server, wrong_type, 8))["code"] == -32602
        assert await server.prompt(sid, "still serving") == "end_turn"


async def test_bad_params_and_unknown_sessions_get_specific_errors(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        conn = server.conn
        cases = [
            (conn.new_session(cwd="relative/dir", mcp_servers=[]), "absolute path"),
            (conn.new_session(cwd=str(tmp_path / "missing"), mcp_servers=[]), "not a directory"),
            (server.prompt("no-such-session", "hi"), "unknown session 'no-such-session'"),
            (conn.set_session_mode(session_id="no-such-session", mode_id="auto"), "unknown"),
        ]
        for call, message in cases:
            with pytest.raises(RequestError) as failed:
                await call
            assert failed.value.code == -32602 and message in str(failed.value)
        sid = await server.new_session()
        with pytest.raises(RequestError) as bad_mode:
            await conn.set_session_mode(session_id=sid, mode_id="yolo")
        assert "unknown mode 'yolo'" in str(bad_mode.value)
        await conn.cancel(session_id="no-such-session")  # a notification: nothing to answer
        assert await server.prompt(sid, "fine") == "end_turn"


async def test_meta_keys_are_ignored(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        prompt = {
            "jsonrpc": "2.0",
            "id": "with-meta",
            "method": "session/prompt",
            "params": {
                "sessionId": sid,
                "prompt": [{"type": "text", "text": "hello"}],
                "_meta": {"session_id": "someone-else", "prompt": "injected"},
            },
        }
        assert await answer(server, prompt, "with-meta") == {"stopReason": "end_turn"}
        assert server.client.text(sid) == "echo: hello"
