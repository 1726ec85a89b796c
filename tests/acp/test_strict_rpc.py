"""Strict JSON-RPC 2.0: malformed envelopes are refused, mis-sent frames never crash or spam."""

import json
from pathlib import Path
from typing import Any

from tests.acp.harness import AcpProcess, serving
from tests.acp.test_bad_input import answer


def request(frame_id: object, method: str, params: object = None, **extra: Any) -> dict[str, Any]:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "id": frame_id, "method": method, **extra}
    if params is not None:
        frame["params"] = params
    return frame


async def code_of(server: AcpProcess, frame: bytes | dict[str, Any], frame_id: object) -> int:
    error = await answer(server, frame, frame_id)
    assert isinstance(error, dict) and "code" in error, error
    return int(error["code"])


async def test_deep_nesting_is_a_parse_error_not_a_crash(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        assert await code_of(server, b"[" * 1200 + b"]" * 1200, None) == -32700
        assert await code_of(server, b'{"a":' * 5000 + b"1" + b"}" * 5000, None) == -32700
        # Deep enough to hurt later code, shallow enough for the decoder: refused too.
        nested = json.dumps(request(3, "session/new", {"cwd": "/", "x": [[[[[[[[[[[[]]]]]]]]]]]]}))
        deep = nested.replace("[[[[[[[[[[[[]]]]]]]]]]]]", "[" * 200 + "]" * 200)
        assert await code_of(server, deep.encode(), 3) == -32600
        assert await server.prompt(sid, "still serving") == "end_turn"
        assert server.process.returncode is None


async def test_envelopes_must_be_strict_json_rpc_2(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        new = {"cwd": str(server.home)}
        cases: list[tuple[bytes | dict[str, Any], object]] = [
            ({"jsonrpc": "1.0", "id": 1, "method": "session/new", "params": new}, 1),
            ({"id": 2, "method": "session/new", "params": new}, 2),
            ({"jsonrpc": 2.0, "id": 3, "method": "session/new", "params": new}, 3),
            (request(True, "session/new", new), None),
            (request({"a": 1}, "session/new", new), None),
            (request([1], "session/new", new), None),
            (b'{"jsonrpc":"2.0","id":9,"method":"session/new","params":{"cwd":NaN}}', None),
            (b'{"jsonrpc":"2.0","id":"\\ud800","method":"session/new"}', None),
            (b'{"jsonrpc":"2.0","id":1e400,"method":"session/list","params":{}}', None),
            (b'{"jsonrpc":"2.0","id":4,"method":"session/new","params":{"cwd":-1e999}}', 4),
            (b"\xff\xfe{}", None),
        ]
        for frame, frame_id in cases:
            code = await code_of(server, frame, frame_id)
            assert code in (-32600, -32700), (frame, code)
        # A float id is a number, and a number id is answered with that id.
        assert "result" in await server.frame_answer(request(1.5, "session/list", {}), 1.5)
        assert await server.prompt(sid, "fine") == "end_turn"


async def test_misdirected_frames_are_logged_once_without_a_traceback(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        lost_prompt = {
            "jsonrpc": "2.0",
            "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "lost"}]},
        }
        unknown = {"jsonrpc": "2.0", "method": "what/ever", "params": {}}
        bad_cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": 5}}
        burst = [lost_prompt, lost_prompt, unknown, unknown, bad_cancel, bad_cancel]
        server.write_raw(b"".join(json.dumps(f).encode() + b"\n" for f in burst))
        # A notification sent with an id is a request for a method that is not one.
        assert await code_of(server, request(20, "session/cancel", {"sessionId": sid}), 20) == (
            -32601
        )
        assert await server.prompt(sid, "answered") == "end_turn"
        await server.close_stdin()
        stderr = server.stderr()
        assert "Traceback" not in stderr
        assert stderr.count("session/prompt was sent as a notification") == 1
        assert stderr.count("unknown notification 'what/ever'") == 1
        assert stderr.count("without a string sessionId") == 1
        assert "lost" not in server.client.text(sid)


async def test_cancel_request_cancels_a_prompt_and_ignores_anything_else(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        quiet = [
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "nothing"}},
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": {"x": 1}}},
            {"jsonrpc": "2.0", "method": "$/cancel_request"},
        ]
        server.write_raw(b"".join(json.dumps(f).encode() + b"\n" for f in quiet))
        held = request("held", "session/prompt", {"sessionId": sid, "prompt": [_text("hold")]})
        server.write_raw(json.dumps(held).encode() + b"\n")
        await server.client.wait_for(server.client.saw_text(sid, "holding"))
        # The same id again while the prompt runs: refused, the prompt unharmed.
        assert await code_of(server, request("held", "session/list", {}), "held") == -32600
        cancel = request(77, "$/cancel_request", {"requestId": "held"})
        assert await server.frame_answer(cancel, 77) == {"jsonrpc": "2.0", "id": 77, "result": None}
        outcome = await server.frame(lambda f: f.get("id") == "held" and "result" in f)
        assert outcome["result"] == {"stopReason": "cancelled"}
        assert await server.prompt(sid, "next") == "end_turn"
        await server.close_stdin()
        assert "Traceback" not in server.stderr()


async def test_initialize_negotiates_the_protocol_version(tmp_path: Path) -> None:
    async with serving(tmp_path, initialize=False) as server:
        first = await server.frame_answer(request(0, "initialize", {"protocolVersion": 7}), 0)
        assert first["result"]["protocolVersion"] == 1
        again = await server.frame_answer(request(1, "initialize", {"protocolVersion": 1}), 1)
        assert again["result"]["protocolVersion"] == 1
        assert await code_of(server, request(2, "initialize", {"protocolVersion": -1}), 2) == (
            -32602
        )
        assert await code_of(server, request(3, "initialize", {"protocolVersion": 70000}), 3) == (
            -32602
        )


async def test_loading_an_invalid_session_id_is_invalid_params(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        for bad in ("../../etc/passwd", "a/b", "x" * 500):
            load = request(5, "session/load", {"sessionId": bad, "cwd": str(server.home)})
            load["params"]["mcpServers"] = []
            assert await code_of(server, load, 5) == -32602


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}
