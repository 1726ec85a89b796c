"""A server's request for input (MCP elicitation) reaches the person at the editor.

The server is written with the SDK (:mod:`tests.mcp_client.asking_server`) and
calls ``ctx.elicit`` / ``ctx.elicit_url`` during a tool call; ``tether acp``
puts it to the client as ``elicitation/create`` when the client advertised
the capability, and sends the answer back to the server.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from acp.schema import (
    ClientCapabilities,
    CreateElicitationResponse,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    ElicitationUrlCapabilities,
)
from pydantic import TypeAdapter

from tests.acp.harness import SCRIPTED, AcpProcess, Recorder, serving
from tests.acp.test_schema_conformance import _check as frames_valid_by_the_schema
from tests.mcp_client.support import HERE, results, stdio

ASKING_SERVER = str(HERE / "asking_server.py")

ASKS = ClientCapabilities(
    elicitation=ElicitationCapabilities(
        form=ElicitationFormCapabilities(), url=ElicitationUrlCapabilities()
    )
)


class Answering(Recorder):
    """A client that answers ``elicitation/create`` with ``reply`` (``None``: never)."""

    def __init__(self, reply: dict[str, Any] | None) -> None:
        super().__init__()
        self.reply = reply
        self.elicitations: list[tuple[str, Any]] = []

    async def create_elicitation(
        self, message: str, mode: Any, **_meta: Any
    ) -> CreateElicitationResponse:
        self.elicitations.append((message, mode))
        self._changed.set()
        if self.reply is None:
            await asyncio.Event().wait()
        return TypeAdapter(CreateElicitationResponse).validate_python(self.reply)


def call(tool: str) -> str:
    return f"/tool {tool} {{}}"


def asked_and_answered(log: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    (asked,) = [e["data"] for e in log if e["type"] == "elicitation/asked"]
    (answered,) = [e["data"] for e in log if e["type"] == "elicitation/answered"]
    return asked, answered


async def session_with_asking_server(server: AcpProcess, *args: str) -> str:
    """A session with the asking server: current (2026-07-28), or ``--legacy`` (2025)."""
    response = await server.conn.new_session(
        cwd=str(server.home), mcp_servers=[stdio("ask", *args, script=ASKING_SERVER)]
    )
    return response.session_id


@pytest.mark.parametrize("generation", [(), ("--legacy",)], ids=["current", "2025"])
async def test_a_form_reaches_the_editor_and_its_answer_reaches_the_server(
    tmp_path: Path, generation: tuple[str, ...]
) -> None:
    filled = {"region": "eu", "replicas": 3, "confirm": True, "api_token": "tok-very-secret"}
    client = Answering({"action": "accept", "content": filled})
    async with serving(
        tmp_path, "--mode", "auto", model="offline", client=client, capabilities=ASKS, unstable=True
    ) as server:
        sid = await session_with_asking_server(server, *generation)
        assert await server.prompt(sid, call("mcp__ask__deploy")) == "end_turn"
        log = server.log(sid)
    methods, _ = frames_valid_by_the_schema(server)  # the official schema's
    assert "elicitation/create" in methods
    ((message, mode),) = client.elicitations
    assert message == "Where should it be deployed?"
    assert mode.session_id == sid
    schema = mode.requested_schema
    assert schema.required == ["region", "replicas", "confirm", "api_token"]
    (call_event,) = [e["data"] for e in log if e["type"] == "tool/call"]
    assert mode.tool_call_id == call_event["id"]
    ((_, content, is_error),) = results(log)
    assert not is_error and content.startswith("accept ")
    assert json.loads(content.removeprefix("accept ")) == filled
    asked, answered = asked_and_answered(log)
    assert asked["server"] == "ask" and asked["mode"] == "form"
    assert asked["fields"] == ["region", "replicas", "confirm", "api_token"]
    assert asked["call"] == call_event["id"]
    assert answered["action"] == "accept" and answered["id"] == asked["id"]
    assert answered["content"] == {**filled, "api_token": "***"}  # a secret is not logged


@pytest.mark.parametrize("generation", [(), ("--legacy",)], ids=["current", "2025"])
async def test_a_url_is_put_to_the_editor_and_accepted(
    tmp_path: Path, generation: tuple[str, ...]
) -> None:
    client = Answering({"action": "accept"})
    async with serving(
        tmp_path, "--mode", "auto", model="offline", client=client, capabilities=ASKS, unstable=True
    ) as server:
        sid = await session_with_asking_server(server, *generation)
        assert await server.prompt(sid, call("mcp__ask__sign_in")) == "end_turn"
        log = server.log(sid)
    methods, _ = frames_valid_by_the_schema(server)
    assert "elicitation/create" in methods
    ((message, mode),) = client.elicitations
    assert message == "Sign in to continue"
    assert str(mode.url) == "https://login.example.test/device?code=42"
    # A 2025 server names its URL question; a current one's comes unnamed, and tether names it.
    asked, answered = asked_and_answered(log)
    named = "sign-in-1" if generation else f"tether-{asked['id']}"
    assert mode.elicitation_id == named
    assert [r[1] for r in results(log)] == ["accept"]
    assert asked["mode"] == "url" and asked["url"] == "https://login.example.test/device?code=42"
    assert answered == {"id": asked["id"], "action": "accept"}


async def _signed_in_then_done(
    tmp_path: Path, action: str
) -> tuple[AcpProcess, list[dict[str, Any]], list[dict[str, Any]]]:
    """The editor answers the 2025 server's sign-in question ``action``; the server then
    says it is done, and says so of a question it never asked. The served process, the
    session's log and the ``elicitation/complete`` frames the editor got."""
    client = Answering({"action": action})
    async with serving(
        tmp_path, "--mode", "auto", model="offline", client=client, capabilities=ASKS, unstable=True
    ) as server:
        sid = await session_with_asking_server(server, "--legacy")
        assert await server.prompt(sid, call("mcp__ask__sign_in_done")) == "end_turn"
        log = server.log(sid)
    completes = [f for f in server.frames if f.get("method") == "elicitation/complete"]
    return server, log, completes


async def test_the_servers_word_that_a_url_is_done_reaches_the_editor(tmp_path: Path) -> None:
    server, log, frames = await _signed_in_then_done(tmp_path, "accept")
    methods, _ = frames_valid_by_the_schema(server)
    completes = [f["params"] for f in frames]
    # The id the editor was asked with, once; the one the server never asked is dropped.
    assert completes == [{"elicitationId": "sign-in-1"}]
    asked, _ = asked_and_answered(log)
    (done,) = [e["data"] for e in log if e["type"] == "elicitation/completed"]
    assert done == {"id": asked["id"], "server": "ask", "elicitation": "sign-in-1"}
    assert "elicitation/complete" in methods


async def test_a_declined_url_is_never_said_done(tmp_path: Path) -> None:
    _, log, completes = await _signed_in_then_done(tmp_path, "decline")
    assert completes == []
    assert [e for e in log if e["type"] == "elicitation/completed"] == []


async def test_an_editor_that_cannot_answer_declines_with_the_reason_logged(tmp_path: Path) -> None:
    client = Answering({"action": "accept"})
    async with serving(tmp_path, "--mode", "auto", model="offline", client=client) as server:
        sid = await session_with_asking_server(server)
        assert await server.prompt(sid, call("mcp__ask__deploy")) == "end_turn"
        log = server.log(sid)
    assert client.elicitations == []
    assert [r[1] for r in results(log)] == ["decline"]
    _, answered = asked_and_answered(log)
    assert answered["action"] == "decline"
    assert answered["reason"] == "the editor does not answer form elicitations"


async def test_an_answer_that_does_not_fit_the_form_is_a_cancel(tmp_path: Path) -> None:
    wrong = {"region": "mars", "replicas": 3, "confirm": True, "api_token": "x"}
    client = Answering({"action": "accept", "content": wrong})
    async with serving(
        tmp_path, "--mode", "auto", model="offline", client=client, capabilities=ASKS, unstable=True
    ) as server:
        sid = await session_with_asking_server(server)
        assert await server.prompt(sid, call("mcp__ask__deploy")) == "end_turn"
        log = server.log(sid)
    assert [r[1] for r in results(log)] == ["cancel"]
    _, answered = asked_and_answered(log)
    assert answered["action"] == "cancel" and "'Region': one of eu, us" in answered["reason"]
    assert "content" not in answered


async def test_a_cancel_during_an_elicitation_withdraws_it(tmp_path: Path) -> None:
    client = Answering(None)  # the person never answers
    async with serving(
        tmp_path, "--mode", "auto", model="offline", client=client, capabilities=ASKS, unstable=True
    ) as server:
        sid = await session_with_asking_server(server)
        prompt = server.start_prompt(sid, call("mcp__ask__deploy"))
        await client.wait_for(lambda: bool(client.elicitations))
        await server.conn.cancel(session_id=sid)
        async with asyncio.timeout(10):
            assert await prompt == "cancelled"
        log = server.log(sid)
        # The server heard the cancel and goes on serving.
        client.reply = {"action": "decline"}
        assert await server.prompt(sid, call("mcp__ask__deploy")) == "end_turn"
        assert [r[1] for r in results(server.log(sid))][-1] == "decline"
    (answered, *_) = [e["data"] for e in log if e["type"] == "elicitation/answered"]
    assert answered["action"] == "cancel"
    assert answered["reason"].startswith("withdrawn")


async def test_an_unanswered_elicitation_times_out_as_a_cancel(tmp_path: Path) -> None:
    overlay = SCRIPTED + "  - id: mcp\n    config: {{elicitation_timeout_ms: 300}}\n"
    client = Answering(None)
    async with serving(
        tmp_path,
        "--mode",
        "auto",
        model="offline",
        client=client,
        capabilities=ASKS,
        unstable=True,
        overlay=overlay,
    ) as server:
        sid = await session_with_asking_server(server)
        assert await server.prompt(sid, call("mcp__ask__deploy")) == "end_turn"
        log = server.log(sid)
    assert [r[1] for r in results(log)] == ["cancel"]
    _, answered = asked_and_answered(log)
    assert answered == {
        "id": answered["id"],
        "action": "cancel",
        "reason": "not answered within 0.3 s",
    }
