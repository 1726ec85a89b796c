"""The agent side's JSON-RPC connection (:mod:`tether.acp.rpc`) over an in-memory transport."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tether.acp import wire
from tether.acp.rpc import AgentConnection, RequestError


class Pipe:
    """Frames in from a queue, frames out to a list."""

    def __init__(self) -> None:
        self.incoming: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.sent: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()
        self.closed = False

    async def receive(self) -> dict[str, Any] | None:
        return await self.incoming.get()

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        self.arrived.set()

    async def close(self) -> None:
        self.closed = True

    async def sent_at_least(self, count: int) -> None:
        while len(self.sent) < count:
            self.arrived.clear()
            await self.arrived.wait()

    async def answer_to(self, frame_id: object) -> dict[str, Any]:
        while True:
            for frame in self.sent:
                if frame.get("id") == frame_id and "method" not in frame:
                    return frame
            self.arrived.clear()
            await self.arrived.wait()


class Agent:
    """Records what it was called with."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, object]]] = []
        self.cancelled = asyncio.Event()

    async def new_session(self, **arguments: object) -> wire.NewSessionResponse:
        self.calls.append(("new_session", arguments))
        return wire.NewSessionResponse(session_id="s1")

    async def prompt(self, **arguments: object) -> wire.PromptResponse:
        self.calls.append(("prompt", arguments))
        raise ValueError("the model broke")

    async def cancel(self, **arguments: object) -> None:
        self.calls.append(("cancel", arguments))
        self.cancelled.set()


@pytest.fixture
async def wired() -> Any:
    pipe, agent = Pipe(), Agent()
    connection = AgentConnection(agent, pipe)
    listening = asyncio.get_running_loop().create_task(connection.listen())
    yield pipe, agent, connection
    await pipe.incoming.put(None)
    await listening
    await connection.close()


def request(frame_id: object, method: str, params: object) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": frame_id, "method": method, "params": params}


async def test_params_are_checked_against_the_wire_type_and_passed_in_snake_case(
    wired: Any,
) -> None:
    pipe, agent, _ = wired
    await pipe.incoming.put(request(1, "session/new", {"cwd": "/w", "mcpServers": []}))
    assert (await pipe.answer_to(1))["result"] == {"sessionId": "s1"}
    assert agent.calls == [
        (
            "new_session",
            {
                "cwd": "/w",
                "mcp_servers": [],
                "additional_directories": None,
                "system_prompt": None,
            },
        )
    ]


async def test_params_that_do_not_fit_are_invalid_params_naming_the_field(wired: Any) -> None:
    pipe, agent, _ = wired
    await pipe.incoming.put(request(1, "session/new", {"cwd": 5}))
    await pipe.incoming.put(request(2, "session/new", ["not", "an", "object"]))
    first, second = await pipe.answer_to(1), await pipe.answer_to(2)
    assert first["error"]["code"] == -32602 and "$.cwd" in first["error"]["message"]
    assert second["error"]["code"] == -32602
    assert agent.calls == []


async def test_an_unknown_method_is_method_not_found(wired: Any) -> None:
    pipe, _, _ = wired
    await pipe.incoming.put(request("a", "session/archive", {"sessionId": "s"}))
    error = (await pipe.answer_to("a"))["error"]
    assert error == {
        "code": -32601,
        "message": "Method not found",
        "data": {"method": "session/archive"},
    }


async def test_a_handler_that_fails_unexpectedly_answers_internal_error(wired: Any) -> None:
    pipe, _, _ = wired
    prompt = {"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]}
    await pipe.incoming.put(request(3, "session/prompt", prompt))
    error = (await pipe.answer_to(3))["error"]
    assert error == {
        "code": -32603,
        "message": "Internal error",
        "data": {"details": "the model broke"},
    }


async def test_handlers_start_in_arrival_order(wired: Any) -> None:
    pipe, agent, _ = wired
    prompt = {"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]}
    await pipe.incoming.put(request(1, "session/prompt", prompt))
    await pipe.incoming.put(
        {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}}
    )
    await pipe.answer_to(1)
    await agent.cancelled.wait()
    assert [name for name, _ in agent.calls] == ["prompt", "cancel"]


async def test_a_request_to_the_client_is_settled_by_its_answer(wired: Any) -> None:
    pipe, _, connection = wired
    asking = asyncio.ensure_future(
        connection.request(
            "fs/read_text_file",
            wire.ReadTextFileRequest(session_id="s", path="/a"),
            wire.ReadTextFileResponse,
        )
    )
    await pipe.sent_at_least(1)
    sent = pipe.sent[0]
    assert sent["params"] == {"sessionId": "s", "path": "/a"}
    await pipe.incoming.put({"jsonrpc": "2.0", "id": sent["id"], "result": {"content": "text"}})
    assert (await asking).content == "text"


async def test_a_client_error_or_a_malformed_answer_raises_request_error(wired: Any) -> None:
    pipe, _, connection = wired
    params = wire.ReadTextFileRequest(session_id="s", path="/a")
    failing = asyncio.ensure_future(
        connection.request("fs/read_text_file", params, wire.ReadTextFileResponse)
    )
    malformed = asyncio.ensure_future(
        connection.request("fs/read_text_file", params, wire.ReadTextFileResponse)
    )
    await pipe.sent_at_least(2)
    error = {"code": -32601, "message": "Method not found"}
    await pipe.incoming.put({"jsonrpc": "2.0", "id": pipe.sent[0]["id"], "error": error})
    await pipe.incoming.put({"jsonrpc": "2.0", "id": pipe.sent[1]["id"], "result": {"content": 1}})
    with pytest.raises(RequestError) as failed:
        await failing
    assert failed.value.code == -32601
    with pytest.raises(RequestError):
        await malformed


async def test_close_fails_the_requests_still_waiting(wired: Any) -> None:
    pipe, _, connection = wired
    params = wire.KillTerminalRequest(session_id="s", terminal_id="t")
    waiting = asyncio.ensure_future(connection.request("terminal/kill", params))
    await pipe.sent_at_least(1)
    await connection.close()
    with pytest.raises(ConnectionError):
        await waiting
    assert pipe.closed
