"""ACP over the network (`/acp` of `tether web`): streamable HTTP with a real httpx
client, WebSocket with the `websockets` client library, both against a real uvicorn
server on 127.0.0.1 — reconnects that replay from the last frame, dropped connections
mid-prompt, the grace period's teardown, and the token guard."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from websockets.asyncio.client import ClientConnection, connect

from tether.agent.registry import AGENTS
from tether.session.store import SESSIONS

from .server import TOKEN, Served, served

ASKING_SERVER = str(Path(__file__).parents[1] / "mcp_client" / "asking_server.py")

AUTH = {"Authorization": f"Bearer {TOKEN}"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": 1, "clientCapabilities": {}},
}

Frame = dict[str, Any]


class SseStream:
    """The frames of one `GET /acp` stream, read as they come."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()
        self.frames: list[tuple[int, Frame]] = []

    async def until(self, wanted: Callable[[Frame], bool]) -> Frame:
        """Read until a frame ``wanted`` accepts arrives; return it."""
        seq: int | None = None
        async with asyncio.timeout(20):
            async for line in self._lines:
                if line.startswith("id: "):
                    seq = int(line[4:])
                elif line.startswith("data: "):
                    assert seq is not None
                    frame = json.loads(line[6:])
                    self.frames.append((seq, frame))
                    if wanted(frame):
                        return frame
        raise AssertionError("the stream ended")

    @property
    def ids(self) -> list[int]:
        return [seq for seq, _ in self.frames]


class HttpClient:
    """An ACP client over streamable HTTP."""

    def __init__(self, web: Served, connection_id: str) -> None:
        self.http = web.client
        self.id = connection_id
        self._next = 1

    async def send(self, method: str, params: Frame) -> int:
        request_id = self._next
        self._next += 1
        await self.post({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return request_id

    async def post(self, frame: Frame) -> None:
        response = await self.http.post("/acp", json=frame, headers={"Acp-Connection-Id": self.id})
        assert response.status_code == 202, response.text

    @asynccontextmanager
    async def stream(self, after: int | None = None) -> AsyncIterator[SseStream]:
        headers = {"Acp-Connection-Id": self.id}
        if after is not None:
            headers["Last-Event-ID"] = str(after)
        async with self.http.stream("GET", "/acp", headers=headers) as response:
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"].startswith("text/event-stream")
            yield SseStream(response)


async def _open(web: Served) -> HttpClient:
    response = await web.client.post("/acp", json=INITIALIZE)
    assert response.status_code == 200, response.text
    assert response.json()["result"]["protocolVersion"] == 1
    return HttpClient(web, response.headers["Acp-Connection-Id"])


def _answer_to(request_id: int) -> Callable[[Frame], bool]:
    return lambda frame: frame.get("id") == request_id and "method" not in frame


def _is_permission_request(frame: Frame) -> bool:
    return frame.get("method") == "session/request_permission"


def _allow(request: Frame) -> Frame:
    (option,) = [o for o in request["params"]["options"] if o["kind"] == "allow_once"]
    outcome = {"outcome": "selected", "optionId": option["optionId"]}
    return {"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": outcome}}


async def test_a_client_opens_a_session_and_prompts_over_http_and_sse(tmp_path: Path) -> None:
    async with served(tmp_path, mode="auto", acp_grace=30) as web:
        client = await _open(web)
        async with client.stream() as stream:
            new = await client.send("session/new", {"cwd": str(tmp_path), "mcpServers": []})
            answer = await stream.until(_answer_to(new))
            session_id = answer["result"]["sessionId"]
            prompt = await client.send(
                "session/prompt",
                {"sessionId": session_id, "prompt": [{"type": "text", "text": "$ echo over-http"}]},
            )
            answered = await stream.until(_answer_to(prompt))
        assert answered["result"] == {"stopReason": "end_turn"}
        updates = [f for _, f in stream.frames if f.get("method") == "session/update"]
        assert "over-http" in json.dumps(updates)
        assert stream.ids == list(range(1, len(stream.ids) + 1))


async def test_a_stream_dropped_mid_prompt_resumes_after_its_last_event_id(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, mode="ask", acp_grace=30) as web:
        client = await _open(web)
        async with client.stream() as first:
            new = await client.send("session/new", {"cwd": str(tmp_path), "mcpServers": []})
            session_id = (await first.until(_answer_to(new)))["result"]["sessionId"]
            prompt = await client.send(
                "session/prompt",
                {"sessionId": session_id, "prompt": [{"type": "text", "text": "$ echo resumed"}]},
            )
            asked = await first.until(_is_permission_request)
        # The stream is gone mid-prompt; the prompt waits for the question's answer,
        # asked of the editor only (the page shows the session, but asks nothing).
        seen = first.ids
        page = await web.client.get(f"/api/sessions/{session_id}/questions")
        assert page.status_code == 200 and page.json()["questions"] == []
        assert web.connections is not None and len(web.connections) == 1
        resume_after = seen[-3]
        async with client.stream(after=resume_after) as second:
            await second.until(_is_permission_request)
            await client.post(_allow(asked))
            answered = await second.until(_answer_to(prompt))
        assert answered["result"] == {"stopReason": "end_turn"}
        # Exactly what followed the named frame: the two frames it had after it, then on.
        assert second.ids == list(range(resume_after + 1, resume_after + 1 + len(second.ids)))
        assert second.frames[:2] == first.frames[-2:]
        assert "resumed" in json.dumps([f for _, f in second.frames])
        # A frame it confirmed is gone; one it never got cannot be named.
        gone = await web.client.get(
            "/acp", headers={"Acp-Connection-Id": client.id, "Last-Event-ID": "1"}
        )
        assert gone.status_code == 409 and "no longer kept" in gone.json()["error"]
        future = await web.client.get(
            "/acp", headers={"Acp-Connection-Id": client.id, "Last-Event-ID": "99999"}
        )
        assert future.status_code == 409 and "never sent" in future.json()["error"]


def _ws_url(web: Served) -> str:
    return web.base.replace("http://", "ws://") + "/acp"


async def _ws_until(
    socket: ClientConnection, got: list[Frame], wanted: Callable[[Frame], bool]
) -> Frame:
    async with asyncio.timeout(20):
        while True:
            frame = json.loads(await socket.recv())
            got.append(frame)
            if wanted(frame):
                return frame


async def test_a_websocket_dropped_mid_prompt_reconnects_and_replays_from_its_last_frame(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, mode="ask", acp_grace=30) as web:
        before: list[Frame] = []
        async with connect(_ws_url(web), additional_headers=AUTH) as socket:
            connection_id = socket.response.headers["Acp-Connection-Id"]
            await socket.send(json.dumps(INITIALIZE))
            await _ws_until(socket, before, _answer_to(0))
            new = {"cwd": str(tmp_path), "mcpServers": []}
            await socket.send(
                json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": new})
            )
            session_id = (await _ws_until(socket, before, _answer_to(1)))["result"]["sessionId"]
            text = [{"type": "text", "text": "$ echo over-websocket"}]
            params = {"sessionId": session_id, "prompt": text}
            await socket.send(
                json.dumps(
                    {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": params}
                )
            )
            asked = await _ws_until(socket, before, _is_permission_request)
        # Dropped mid-prompt. Back with the count of frames it got, less one: the last
        # frame comes again, and nothing before it.
        headers = {
            **AUTH,
            "Acp-Connection-Id": connection_id,
            "Last-Event-ID": str(len(before) - 1),
        }
        after: list[Frame] = []
        async with connect(_ws_url(web), additional_headers=headers) as socket:
            assert socket.response.headers["Acp-Connection-Id"] == connection_id
            again = await _ws_until(socket, after, lambda _frame: True)
            assert again == asked
            await socket.send(json.dumps(_allow(asked)))
            answered = await _ws_until(socket, after, _answer_to(2))
        assert answered["result"] == {"stopReason": "end_turn"}
        assert [f for f in after if _is_permission_request(f)] == [asked]
        assert "over-websocket" in json.dumps(after)


async def test_a_client_that_never_comes_back_is_closed_after_the_grace_period(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, mode="ask", acp_grace=2.0) as web:
        client = await _open(web)
        async with client.stream() as stream:
            new = await client.send("session/new", {"cwd": str(tmp_path), "mcpServers": []})
            session_id = (await stream.until(_answer_to(new)))["result"]["sessionId"]
            await client.send(
                "session/prompt",
                {"sessionId": session_id, "prompt": [{"type": "text", "text": "$ echo never"}]},
            )
            await stream.until(_is_permission_request)
        assert web.connections is not None
        connection = web.connections.get(client.id)
        assert connection is not None
        async with asyncio.timeout(10):
            await connection.ended.wait()
        ctx = web.tether.runtime.ctx
        agents = ctx.get(AGENTS)
        sessions = ctx.get(SESSIONS)
        assert agents is not None and sessions is not None
        assert agents.get(session_id) is None
        assert sessions.get(session_id) is None
        log = (tmp_path / "sessions" / f"{session_id}.jsonl").read_text()
        (last,) = [json.loads(line) for line in log.splitlines()[-1:]]
        assert last["type"] == "turn/end"
        assert last["data"]["reason"]["kind"] == "aborted"
        refused = await web.client.post(
            "/acp",
            json={"jsonrpc": "2.0", "id": 9, "method": "session/list", "params": {}},
            headers={"Acp-Connection-Id": client.id},
        )
        assert refused.status_code == 404


async def test_delete_ends_the_connection_once_its_sessions_are_disposed(tmp_path: Path) -> None:
    async with served(tmp_path, mode="auto", acp_grace=30) as web:
        client = await _open(web)
        async with client.stream() as stream:
            new = await client.send("session/new", {"cwd": str(tmp_path), "mcpServers": []})
            session_id = (await stream.until(_answer_to(new)))["result"]["sessionId"]
            deleted = await web.client.delete("/acp", headers={"Acp-Connection-Id": client.id})
            assert deleted.status_code == 204
            agents = web.tether.runtime.ctx.get(AGENTS)
            assert agents is not None and agents.get(session_id) is None
            with pytest.raises(AssertionError, match="the stream ended"):
                await stream.until(lambda _frame: False)


async def test_a_session_still_being_created_when_the_client_deletes_is_disposed(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, mode="auto", acp_grace=30) as web:
        client = await _open(web)
        for _ in range(3):
            await client.send("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        deleted = await web.client.delete("/acp", headers={"Acp-Connection-Id": client.id})
        assert deleted.status_code == 204
        agents = web.tether.runtime.ctx.get(AGENTS)
        sessions = web.tether.runtime.ctx.get(SESSIONS)
        assert agents is not None and sessions is not None
        assert agents.list() == [] and sessions.list() == []


async def test_bad_requests_get_one_line_errors(tmp_path: Path) -> None:
    async with served(tmp_path, acp_grace=30) as web:
        listed = {"jsonrpc": "2.0", "id": 1, "method": "session/list", "params": {}}
        no_connection = await web.client.post("/acp", json=listed)
        assert no_connection.status_code == 400 and "initialize" in no_connection.json()["error"]
        unknown = await web.client.post("/acp", json=listed, headers={"Acp-Connection-Id": "nope"})
        assert unknown.status_code == 404
        not_json = await web.client.post("/acp", content=b"{oops")
        assert not_json.status_code == 400 and not_json.json()["error"]["code"] == -32700
        client = await _open(web)
        bad_id = await web.client.get(
            "/acp", headers={"Acp-Connection-Id": client.id, "Last-Event-ID": "x"}
        )
        assert bad_id.status_code == 400
        per_session = await web.client.get(
            "/acp", headers={"Acp-Connection-Id": client.id, "Acp-Session-Id": "s"}
        )
        assert per_session.status_code == 400
        for headers, status in (
            ({"Acp-Connection-Id": "nope"}, 404),
            ({"Acp-Connection-Id": client.id, "Last-Event-ID": "99"}, 409),
        ):
            with pytest.raises(websockets.InvalidStatus) as refused:
                async with connect(_ws_url(web), additional_headers={**AUTH, **headers}):
                    pass
            assert refused.value.response.status_code == status


async def test_a_wrong_or_missing_token_or_a_foreign_origin_is_refused(tmp_path: Path) -> None:
    async with served(tmp_path, acp_grace=30) as web:
        async with httpx.AsyncClient(base_url=web.base) as anonymous:
            missing = await anonymous.post("/acp", json=INITIALIZE)
            wrong = await anonymous.post(
                "/acp", json=INITIALIZE, headers={"Authorization": "Bearer wrong"}
            )
            stream = await anonymous.get("/acp", params={"token": "wrong"})
        assert (missing.status_code, wrong.status_code, stream.status_code) == (401, 401, 401)
        foreign = await web.client.post(
            "/acp", json=INITIALIZE, headers={"Origin": "http://evil.example"}
        )
        assert foreign.status_code == 403
        for headers, status in (
            ({}, 401),
            ({"Authorization": "Bearer wrong"}, 401),
            ({**AUTH, "Origin": "http://evil.example"}, 403),
        ):
            with pytest.raises(websockets.InvalidStatus) as refused:
                async with connect(_ws_url(web), additional_headers=headers):
                    pass
            assert refused.value.response.status_code == status
        async with connect(f"{_ws_url(web)}?token={TOKEN}") as socket:
            await socket.send(json.dumps(INITIALIZE))
            assert json.loads(await socket.recv())["id"] == 0
        assert web.connections is not None and len(web.connections) == 1


def test_sigterm_ends_tether_web_s_acp_clients_with_their_turns_closed_on_disk(
    tmp_path: Path,
) -> None:
    import signal

    from tests.cli.test_exit_codes import tether_process

    web = tether_process(tmp_path, "web", "--mode", "auto", env={"TETHER_MODEL": "offline"})
    try:
        assert web.stdout is not None
        url = web.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        base, _, token = url.partition("/?token=")

        async def drive() -> str:
            headers = {"Authorization": f"Bearer {token}"}
            async with connect(
                base.replace("http://", "ws://") + "/acp", additional_headers=headers
            ) as socket:
                got: list[Frame] = []
                await socket.send(json.dumps(INITIALIZE))
                await _ws_until(socket, got, _answer_to(0))
                new = {"cwd": str(tmp_path), "mcpServers": []}
                await socket.send(
                    json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": new})
                )
                session_id: str = (await _ws_until(socket, got, _answer_to(1)))["result"][
                    "sessionId"
                ]
                text = [{"type": "text", "text": "$ sleep 30"}]
                params = {"sessionId": session_id, "prompt": text}
                await socket.send(
                    json.dumps(
                        {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": params}
                    )
                )
                await _ws_until(
                    socket,
                    got,
                    lambda f: f.get("params", {}).get("update", {}).get("status") == "in_progress",
                )
                web.send_signal(signal.SIGTERM)
                answered = await _ws_until(socket, got, _answer_to(2))
                assert answered["result"] == {"stopReason": "cancelled"}
                return session_id

        session_id = asyncio.run(drive())
        _out, err = web.communicate(timeout=30)
        assert web.returncode == 143, err
    finally:
        if web.poll() is None:
            web.kill()
            web.wait()
    records = [
        json.loads(line)
        for line in (tmp_path / "sessions" / f"{session_id}.jsonl").read_text().splitlines()
    ]
    assert records[-1]["type"] == "turn/end"
    assert records[-1]["data"]["reason"]["kind"] == "aborted"


def _asking_servers() -> set[int]:
    """The pids of this process's descendants running the asking MCP server."""
    parents: dict[int, int] = {}
    commands: dict[int, bytes] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            commands[int(entry.name)] = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    me = os.getpid()

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == me:
                return True
        return False

    return {
        pid for pid, command in commands.items() if b"asking_server.py" in command and descends(pid)
    }


async def test_a_client_gone_with_an_elicitation_open_cancels_it_at_the_grace_period(
    tmp_path: Path,
) -> None:
    asking = {"name": "ask", "command": sys.executable, "args": [ASKING_SERVER], "env": []}
    async with served(tmp_path, mode="auto", acp_grace=1.0) as web:
        response = await web.client.post(
            "/acp",
            json={
                **INITIALIZE,
                "params": {
                    "protocolVersion": 1,
                    "clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
                },
            },
        )
        assert response.status_code == 200, response.text
        client = HttpClient(web, response.headers["Acp-Connection-Id"])
        async with client.stream() as stream:
            new = await client.send("session/new", {"cwd": str(tmp_path), "mcpServers": [asking]})
            session_id = (await stream.until(_answer_to(new)))["result"]["sessionId"]
            servers = _asking_servers()
            assert servers
            await client.send(
                "session/prompt",
                {
                    "sessionId": session_id,
                    "prompt": [{"type": "text", "text": "/tool mcp__ask__deploy {}"}],
                },
            )
            await stream.until(lambda frame: frame.get("method") == "elicitation/create")
        # The client is gone for good, its question unanswered.
        assert web.connections is not None
        connection = web.connections.get(client.id)
        assert connection is not None
        async with asyncio.timeout(10):
            await connection.ended.wait()
        ctx = web.tether.runtime.ctx
        assert ctx.get(AGENTS).get(session_id) is None  # type: ignore[union-attr]
        assert ctx.get(SESSIONS).get(session_id) is None  # type: ignore[union-attr]
        assert not servers & _asking_servers()
        records = [
            json.loads(line)
            for line in (tmp_path / "sessions" / f"{session_id}.jsonl").read_text().splitlines()
        ]
    # The question was withdrawn with its call (docs/mcp.md), the turn closed on disk.
    (result,) = [r["data"] for r in records if r.get("type") == "tool/result"]
    assert result["is_error"] and "cancelled (disposed)" in result["content"], result
    assert records[-1]["type"] == "turn/end"
    assert records[-1]["data"]["reason"]["kind"] == "aborted"
