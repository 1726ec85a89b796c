"""Every frame ``tether acp`` sends in a representative conversation is valid against the
official ACP JSON schema (``schemas/acp/schema.unstable.json``), checked with ``jsonschema``.

Each frame is checked twice: as a whole against the schema's root (a JSON-RPC message of
either side), and its params, result or error against the definition the schema names
for that method (``x-method``): a request's ``…Request``, a notification's
``…Notification``, an answer's ``…Response`` (found from the id of the request it
answers) or ``Error``.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from tests.acp.harness import AcpProcess, serving

SCHEMA: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "schemas" / "acp" / "schema.unstable.json").read_text()
)
DEFS: dict[str, Any] = SCHEMA["$defs"]


@functools.cache
def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator({"$defs": DEFS, "$ref": f"#/$defs/{name}"})


def _definition(method: str, suffix: str) -> str:
    """The schema's definition for ``method`` whose name ends with ``suffix``."""
    names = [n for n, d in DEFS.items() if d.get("x-method") == method and n.endswith(suffix)]
    assert len(names) == 1, f"the schema has no single {suffix} for {method}: {names}"
    return names[0]


def _problems(frame: dict[str, Any], asked: dict[object, str]) -> list[str]:
    """What is wrong with ``frame`` (a frame the server sent) by the schema."""
    if "method" in frame:
        name = _definition(frame["method"], "Request" if "id" in frame else "Notification")
        part = frame.get("params")
    elif "result" in frame:
        name = _definition(asked[frame["id"]], "Response")
        part = frame["result"]
    else:
        name, part = "Error", frame.get("error")
    errors = [
        f"{name}: {e.message} at {list(e.absolute_path)}"
        for e in _validator(name).iter_errors(part)
    ]
    envelope = Draft202012Validator(SCHEMA).iter_errors(frame)
    return errors + [f"message: {e.message}" for e in envelope]


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
