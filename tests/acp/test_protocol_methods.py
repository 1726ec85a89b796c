"""tether speaks the methods of the ACP schema it ships (``schemas/acp``), and advertises
them as the schema names them.

The first tests walk the schema: every stable method a client may send is answered,
every stable method tether may send a client is sent (or is listed here with why
not), and each capability that names a method is advertised exactly when tether
answers that method. They fail when a newer schema adds a method. The others drive
``tether acp`` for what those methods do: ``session/delete``, ``logout``, the
``notice`` and ``compaction_update`` updates a client asks for, message ids.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.acp.harness import ROOT, AcpProcess, serving
from tests.acp.test_auth import NO_KEYS, OVERLAY
from tests.acp.test_editor_features import CATALOG
from tests.acp.test_schema_conformance import _check
from tests.adapters.fake_server import FakeServer, stream
from tests.adapters.support import KEY, text_answer, usage
from tether.acp import wire
from tether.acp.gate import CANCEL_REQUEST, NOTIFICATION_METHODS, REQUEST_METHODS
from tether.acp.handshake import initialize_result
from tether.acp.rpc import AGENT_NOTIFICATIONS, AGENT_ROUTES

SCHEMAS = ROOT / "schemas" / "acp"
STABLE: dict[str, Any] = json.loads((SCHEMAS / "schema.json").read_text())["$defs"]
UNSTABLE: dict[str, Any] = json.loads((SCHEMAS / "schema.unstable.json").read_text())["$defs"]

NOT_SENT: dict[str, str] = {}
"""Stable methods a client serves that tether does not send, and why."""


def _methods(defs: dict[str, Any], *sides: str) -> set[str]:
    return {str(d["x-method"]) for d in defs.values() if "x-method" in d and d["x-side"] in sides}


def _sent_by_tether() -> set[str]:
    """The client methods the ACP package names where it sends them."""
    source = "\n".join(
        path.read_text()
        for path in (ROOT / "src" / "tether" / "acp").glob("*.py")
        if path.name != "wire.py"
    )
    keys = set(re.findall(r'CLIENT_METHODS\["(\w+)"\]', source))
    literals = set(re.findall(r'"([a-z_]+/[a-z_]+)"', source))
    return {wire.CLIENT_METHODS[k] for k in keys} | (literals & set(wire.CLIENT_METHODS.values()))


def test_every_stable_method_a_client_sends_is_answered() -> None:
    asked = _methods(STABLE, "agent", "protocol")
    answered = set(AGENT_ROUTES) | set(AGENT_NOTIFICATIONS) | {CANCEL_REQUEST}
    assert sorted(asked - answered) == []
    assert sorted(asked - (REQUEST_METHODS | NOTIFICATION_METHODS)) == []


def test_every_stable_method_a_client_serves_is_sent_or_said_why_not() -> None:
    served = _methods(STABLE, "client")
    assert sorted(served - _sent_by_tether() - set(NOT_SENT)) == []
    assert set(NOT_SENT) <= served


def _named_method(description: str) -> str | None:
    """The method a capability says the agent supports ("Whether the agent supports
    `session/list`.", "… supports the logout method.")."""
    found = re.search(r"agent supports (?:the )?`?([a-z_]+(?:/[a-z_]+)?)`?", description)
    if found is None or found.group(1) not in _methods(UNSTABLE, "agent"):
        return None
    return found.group(1)


KEY_METHOD = {"type": "env_var", "id": "k", "name": "key", "vars": [{"name": "K"}]}


@pytest.mark.parametrize("auth", [[], [KEY_METHOD]], ids=["no sign-in", "sign-in"])
def test_initialize_advertises_each_method_it_answers_as_the_schema_names_it(
    auth: list[dict[str, object]],
) -> None:
    result = initialize_result(images=True, auth_methods=auth)
    validator = Draft202012Validator({"$defs": UNSTABLE, "$ref": "#/$defs/InitializeResponse"})
    assert [e.message for e in validator.iter_errors(result)] == []
    capabilities = result["agentCapabilities"]
    answered = set(AGENT_ROUTES)
    for group, definition in (
        ("sessionCapabilities", "SessionCapabilities"),
        ("auth", "AgentAuthCapabilities"),
    ):
        offered = capabilities.get(group, {})
        properties = UNSTABLE[definition]["properties"]
        assert set(offered) <= set(properties), f"{group} names what the schema does not"
        for name, prop in properties.items():
            method = _named_method(prop.get("description", ""))
            if method is None or (group == "auth" and not auth):
                continue
            assert (name in offered) == (method in answered), (group, name, method)
    assert ("auth" in capabilities) == bool(auth)


def _updates(server: AcpProcess, kind: str) -> list[dict[str, Any]]:
    return [
        f["params"]["update"]
        for f in server.frames
        if f.get("method") == "session/update" and f["params"]["update"]["sessionUpdate"] == kind
    ]


async def test_session_delete_closes_an_open_session_and_forgets_it(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        kept = await server.new_session()
        gone = await server.new_session()
        assert await server.prompt(gone, "hello") == "end_turn"
        listed = await server.conn.list_sessions()
        assert {s.session_id for s in listed.sessions} == {kept, gone}

        assert await server.ask("session/delete", {"sessionId": gone}, "d1") == {
            "jsonrpc": "2.0",
            "id": "d1",
            "result": {},
        }
        listed = await server.conn.list_sessions()
        assert [s.session_id for s in listed.sessions] == [kept]
        assert not (server.home / "sessions" / f"{gone}.jsonl").exists()
        missing = await server.ask("session/delete", {"sessionId": gone}, "d2")
        assert missing["error"]["code"] == -32002
        assert gone in missing["error"]["message"]
        bad = await server.ask("session/delete", {}, "d3")
        assert bad["error"]["code"] == -32602
        reload = {"cwd": str(server.home), "sessionId": gone, "mcpServers": []}
        assert "error" in await server.ask("session/load", reload, "l1")
        _check(server)
        await server.close_stdin()
    assert "Traceback" not in server.stderr()


async def test_logout_removes_the_stored_key_and_the_model_waits_for_a_sign_in(
    tmp_path: Path,
) -> None:
    """After ``logout`` nothing reaches the model (not even a session open before)
    until ``authenticate`` finds a key again: here one stored by a new sign-in."""
    home = tmp_path / "home"
    credentials = home / "credentials.json"
    home.mkdir()
    credentials.write_text(json.dumps({"keys": {"deepseek": KEY, "openai": "sk-other"}}))
    async with FakeServer() as model:
        model.queue(stream(text_answer("signed in again")))
        async with serving(
            tmp_path,
            "--base-url",
            f"{model.url}/v1",
            initialize=False,
            overlay=OVERLAY,
            model="deepseek:deepseek-chat",
            env=NO_KEYS,
        ) as server:
            result = await server.initialize_json({})
            assert result["agentCapabilities"]["auth"] == {"logout": {}}
            sid = await server.new_session()
            assert await server.ask("logout", {}, "out") == {
                "jsonrpc": "2.0",
                "id": "out",
                "result": {},
            }
            assert json.loads(credentials.read_text()) == {"keys": {"openai": "sk-other"}}
            refused = await server.ask("session/new", {"cwd": str(home), "mcpServers": []}, "n")
            assert refused["error"]["code"] == -32000
            assert "signed out" in refused["error"]["message"]
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "hello"}]}
            assert (await server.ask("session/prompt", prompt, "p1"))["error"]["code"] == -32000
            sign_in = {"methodId": "deepseek-api-key"}
            assert (await server.ask("authenticate", sign_in, "a1"))["error"]["code"] == -32000
            credentials.write_text(json.dumps({"keys": {"deepseek": KEY}}))
            assert (await server.ask("authenticate", sign_in, "a2"))["result"] == {}
            assert await server.prompt(sid, "hello") == "end_turn"
            assert server.client.text(sid) == "signed in again"
            assert len(model.requests) == 1  # nothing was sent while signed out
            _check(server)


async def test_logout_is_not_offered_nor_answered_when_the_model_needs_no_key(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, initialize=False) as server:
        result = await server.initialize_json({})
        assert "auth" not in result["agentCapabilities"]
        answer = await server.ask("logout", {}, "out")
        assert answer["error"]["code"] == -32601


NOTICES = {"session": {"notices": {}}}


async def test_a_client_that_shows_notices_is_told_of_an_exhausted_budget_in_one(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, "--mode", "auto", overlay=CATALOG, initialize=False) as server:
        await server.initialize_json(NOTICES)
        sid = await server.new_session()
        await server.conn.set_config_option(config_id="budget_usd", session_id=sid, value="0.05")
        assert await server.prompt(sid, "are you there") == "max_turn_requests"
        (shown,) = _updates(server, "notice")
        assert shown["severity"] == "warning"
        assert shown["title"] == "Budget exhausted"
        assert "budget exhausted" in shown["description"]
        assert "budget exhausted" not in server.client.text(sid)
        _check(server)


async def test_without_the_notices_capability_the_budget_is_said_in_a_message(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, "--mode", "auto", overlay=CATALOG, initialize=False) as server:
        await server.initialize_json({"session": {}})
        sid = await server.new_session()
        await server.conn.set_config_option(config_id="budget_usd", session_id=sid, value="0.05")
        assert await server.prompt(sid, "are you there") == "max_turn_requests"
        assert _updates(server, "notice") == []
        assert "budget exhausted" in server.client.text(sid)


async def test_a_prompt_the_server_cut_is_a_notice_live_and_a_line_on_a_load(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    long = "Consider this line with care. " * 1_000  # about 7,500 tokens
    async with FakeServer() as model:
        # The server counted 2,048 prompt tokens: it dropped the front of what it was sent.
        model.queue(stream([*text_answer("Fine.")[:-2], usage(2_048, 2), "[DONE]"]))
        flags = ("--base-url", f"{model.url}/v1", "--mode", "auto")
        async with serving(
            tmp_path, *flags, model="openai-compatible:local", initialize=False
        ) as server:
            await server.initialize_json(NOTICES)
            sid = await server.new_session(project)
            assert await server.prompt(sid, long) == "end_turn"
            (shown,) = _updates(server, "notice")
            assert shown["severity"] == "warning"
            assert shown["title"] == "The prompt was cut"
            assert "2,048 prompt tokens" in shown["description"]
            assert "--no-context-shift" in shown["description"]
            assert "dropped the front" not in server.client.text(sid)
            _check(server)
        async with serving(
            tmp_path, *flags, model="openai-compatible:local", initialize=False
        ) as server:
            await server.initialize_json(NOTICES)
            await server.conn.load_session(cwd=str(project), session_id=sid, mcp_servers=[])
            assert _updates(server, "notice") == []
            assert "dropped the front of the conversation" in server.client.text(sid)
            _check(server)


async def test_a_compaction_is_a_compaction_update_live_and_on_a_load(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    capabilities = {"session": {"compaction": {}}}
    async with serving(tmp_path, initialize=False) as server:
        await server.initialize_json(capabilities)
        sid = await server.new_session(project)
        for text in ("one", "two", "three"):
            assert await server.prompt(sid, text) == "end_turn"
        assert await server.prompt(sid, "/compact") == "end_turn"
        (live,) = _updates(server, "compaction_update")
        _check(server)
    assert live["status"] == "completed"
    assert live["compactionId"].startswith("compaction-")
    assert live["summary"][0]["type"] == "text"
    async with serving(tmp_path, initialize=False) as server:
        await server.initialize_json(capabilities)
        await server.conn.load_session(cwd=str(project), session_id=sid, mcp_servers=[])
        assert _updates(server, "compaction_update") == [live]
        _check(server)
    async with serving(tmp_path) as server:
        await server.conn.load_session(cwd=str(project), session_id=sid, mcp_servers=[])
        assert _updates(server, "compaction_update") == []


async def test_the_chunks_of_one_message_share_an_id_live_and_on_a_load(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()

    def ids(server: AcpProcess) -> list[tuple[str, str]]:
        return [
            (u["sessionUpdate"], u["messageId"])
            for kind in ("agent_message_chunk", "agent_thought_chunk")
            for u in _updates(server, kind)
        ]

    async with serving(tmp_path) as server:
        sid = await server.new_session(project)
        assert await server.prompt(sid, "hello") == "end_turn"
        assert await server.prompt(sid, "think hard") == "end_turn"
        live = ids(server)
    messages = sorted(set(live))
    assert len(live) > len(messages)  # chunks were streamed, several to a message
    assert len(messages) == 3  # an answer, a thought, the answer after it
    assert len({m for _, m in messages}) == 3
    async with serving(tmp_path) as server:
        await server.conn.load_session(cwd=str(project), session_id=sid, mcp_servers=[])
        assert ids(server) == live


async def test_only_a_first_initialize_asking_for_version_2_gets_the_draft(
    tmp_path: Path,
) -> None:
    """Version 2 is a draft, spoken only to a client that asks for exactly it first
    (``tests/acp/test_v2.py``): a client asking for a later version is answered with
    version 1, the latest stable one, and a version 1 connection stays version 1."""
    async with serving(tmp_path, initialize=False) as server:
        params = {"protocolVersion": 3, "info": {"name": "v3-client", "version": "1"}}
        answer = await server.ask("initialize", {**params, "capabilities": {}}, "v3")
        assert answer["result"]["protocolVersion"] == 1
        params = {"protocolVersion": 2, "clientCapabilities": {}}
        again = await server.ask("initialize", params, "v2-later")
        assert again["result"]["protocolVersion"] == 1
        _check(server)
