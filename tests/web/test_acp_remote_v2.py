"""ACP protocol version 2 over the network (`/acp` of `tether web`): a connection whose
``initialize`` asks for version 2 is served version 2 over streamable HTTP and over a
WebSocket, every frame valid by the version 2 schema, while a version 1 client of the
same server is served version 1."""

from __future__ import annotations

import json
from pathlib import Path

from websockets.asyncio.client import connect

from tests.acp.conformance import V1, V2, SchemaCheck

from .server import served
from .test_acp_remote import (
    AUTH,
    Frame,
    HttpClient,
    _answer_to,
    _open,
    _ws_until,
    _ws_url,
)

INITIALIZE_V2 = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": 2, "info": {"name": "remote-v2-test", "version": "1"}},
}


def _idle(session_id: str) -> object:
    def ended(frame: Frame) -> bool:
        update = frame.get("params", {}).get("update", {}) if "method" in frame else {}
        return bool(
            frame.get("method") == "session/update"
            and frame["params"]["sessionId"] == session_id
            and update.get("sessionUpdate") == "state_update"
            and update.get("state") == "idle"
        )

    return ended


def _problems(check: SchemaCheck, frames: list[Frame], asked: dict[object, str]) -> list[str]:
    return [problem for frame in frames for problem in check.problems(frame, asked)]


async def test_a_v2_client_over_http_gets_its_prompt_answered_on_acceptance(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, mode="auto", acp_grace=30) as web:
        opened = await web.client.post("/acp", json=INITIALIZE_V2)
        assert opened.status_code == 200, opened.text
        assert opened.json()["result"]["protocolVersion"] == 2
        assert V2.problems(opened.json(), {0: "initialize"}) == []
        client = HttpClient(web, opened.headers["Acp-Connection-Id"])
        asked: dict[object, str] = {}
        async with client.stream() as stream:
            new = await client.send("session/new", {"cwd": str(tmp_path), "mcpServers": []})
            asked[new] = "session/new"
            session_id = (await stream.until(_answer_to(new)))["result"]["sessionId"]
            text = [{"type": "text", "text": "$ echo over-v2"}]
            prompt = await client.send("session/prompt", {"sessionId": session_id, "prompt": text})
            asked[prompt] = "session/prompt"
            accepted = await stream.until(_answer_to(prompt))
            end = await stream.until(_idle(session_id))  # type: ignore[arg-type]
        assert set(accepted["result"]) == {"messageId"}  # accepted, not finished
        assert end["params"]["update"]["stopReason"] == "end_turn"
        frames = [frame for _, frame in stream.frames]
        assert frames.index(accepted) < frames.index(end)
        assert "over-v2" in json.dumps(frames[frames.index(accepted) :])
        assert _problems(V2, frames, asked) == []


async def test_v2_over_a_websocket_beside_a_v1_client_over_http(tmp_path: Path) -> None:
    async with served(tmp_path, mode="auto", acp_grace=30) as web:
        got: list[Frame] = []
        async with connect(_ws_url(web), additional_headers=AUTH) as socket:
            await socket.send(json.dumps(INITIALIZE_V2))
            opened = await _ws_until(socket, got, _answer_to(0))
            assert opened["result"]["protocolVersion"] == 2
            new = {"cwd": str(tmp_path), "mcpServers": []}
            await socket.send(
                json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": new})
            )
            session_id = (await _ws_until(socket, got, _answer_to(1)))["result"]["sessionId"]

            # A version 1 client of the same server meanwhile: version 1, unaffected.
            v1 = await _open(web)
            async with v1.stream() as stream:
                v1_new = await v1.send("session/new", {"cwd": str(tmp_path), "mcpServers": []})
                v1_sid = (await stream.until(_answer_to(v1_new)))["result"]["sessionId"]
                text = [{"type": "text", "text": "$ echo to-v1"}]
                v1_prompt = await v1.send("session/prompt", {"sessionId": v1_sid, "prompt": text})
                v1_answer = await stream.until(_answer_to(v1_prompt))
            assert v1_answer["result"] == {"stopReason": "end_turn"}
            v1_frames = [frame for _, frame in stream.frames]
            assert "state_update" not in json.dumps(v1_frames)
            v1_asked = {v1_new: "session/new", v1_prompt: "session/prompt"}
            assert _problems(V1, v1_frames, v1_asked) == []

            text = [{"type": "text", "text": "$ echo over-v2-websocket"}]
            params = {"sessionId": session_id, "prompt": text}
            await socket.send(
                json.dumps(
                    {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": params}
                )
            )
            accepted = await _ws_until(socket, got, _answer_to(2))
            end = await _ws_until(socket, got, _idle(session_id))  # type: ignore[arg-type]
        assert set(accepted["result"]) == {"messageId"}
        assert end["params"]["update"]["stopReason"] == "end_turn"
        assert "over-v2-websocket" in json.dumps(got)
        asked = {0: "initialize", 1: "session/new", 2: "session/prompt"}
        assert _problems(V2, got, asked) == []
