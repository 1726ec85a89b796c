"""``session/cancel``: the pending prompt answers ``cancelled``, always and promptly."""

import asyncio
import json
from pathlib import Path

from tests.acp.harness import serving

CANCEL_BOUND = 2.0
"""Seconds a cancelled prompt may take to answer here (the benchmark measures it closely)."""


async def test_cancel_mid_stream_answers_cancelled_promptly(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        prompt = server.start_prompt(sid, "hold")
        await server.client.wait_for(server.client.saw_text(sid, "holding"))
        loop = asyncio.get_running_loop()
        start = loop.time()
        await server.conn.cancel(session_id=sid)
        assert await prompt == "cancelled"
        assert loop.time() - start < CANCEL_BOUND
        # A prompt sent after the cancel runs as its own turn.
        assert await server.prompt(sid, "again") == "end_turn"
        await server.close_stdin()
        ends = [e["data"]["reason"] for e in server.log(sid) if e["type"] == "turn/end"]
        assert ends == [{"kind": "aborted", "cause": "user"}, {"kind": "completed"}]


async def test_cancel_before_the_turn_starts_means_it_never_runs(tmp_path: Path) -> None:
    busy = tmp_path / "busy-project"
    busy.mkdir()
    async with serving(tmp_path) as server:
        # The agent of a "busy" directory is kept busy by a plugin turn, so
        # the prompt below waits in its inbox until the cancel clears it.
        sid = await server.new_session(busy)
        await server.client.wait_for(server.client.saw_text(sid, "holding"))
        prompt = {
            "jsonrpc": "2.0",
            "id": "queued-prompt",
            "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "never run me"}]},
        }
        cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
        # One write: the server reads the prompt, then the cancel.
        server.write_raw(f"{json.dumps(prompt)}\n{json.dumps(cancel)}\n".encode())
        answer = await server.frame(lambda frame: frame.get("id") == "queued-prompt")
        assert answer["result"] == {"stopReason": "cancelled"}
        assert await server.prompt(sid, "after the cancel") == "end_turn"
        await server.close_stdin()
        events = server.log(sid)
        said = [e["data"]["content"][0]["text"] for e in events if e["type"] == "user/message"]
        assert said == ["hold", "after the cancel"]
        cancelled = [
            e["data"]
            for e in events
            if e["type"] == "agent/inbox/spliced" and e["data"]["op"] == "cancel"
        ]
        assert len(cancelled) == 1
        assert "never run me" not in server.client.text(sid)


async def test_sessions_are_isolated(tmp_path: Path) -> None:
    async with serving(tmp_path, "--mode", "auto") as server:
        first = await server.new_session()
        second = await server.new_session()
        held = server.start_prompt(first, "hold")
        await server.client.wait_for(server.client.saw_text(first, "holding"))
        # The other session runs, and runs tools, while the first is busy.
        assert await server.prompt(second, "bash echo meanwhile") == "end_turn"
        await server.conn.cancel(session_id=second)  # cancelling an idle session: nothing
        assert not held.done()
        await server.conn.cancel(session_id=first)
        assert await held == "cancelled"
        assert await server.prompt(second, "still fine") == "end_turn"
        assert server.client.text(first) == "holding"
        assert server.client.text(second) == "done: meanwhile" + "echo: still fine"


def _prompt_frame(frame_id: str, sid: str, text: str) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": frame_id,
        "method": "session/prompt",
        "params": {"sessionId": sid, "prompt": [{"type": "text", "text": text}]},
    }


async def test_cancel_request_naming_a_prompt_by_request_id_cancels_it_promptly(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        server.write_raw(json.dumps(_prompt_frame("long", sid, "hold")).encode() + b"\n")
        await server.client.wait_for(server.client.saw_text(sid, "holding"))
        loop = asyncio.get_running_loop()
        start = loop.time()
        # The field the ACP schema (CancelRequestNotification) and the SDKs send.
        cancel = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "long"}}
        server.write_raw(json.dumps(cancel).encode() + b"\n")
        answer = await server.frame(lambda frame: frame.get("id") == "long")
        assert loop.time() - start < CANCEL_BOUND
        # A valid response carrying the cancellation marker, as the spec allows.
        assert answer["result"] == {"stopReason": "cancelled"}
        await server.close_stdin()
        ends = [e["data"]["reason"] for e in server.log(sid) if e["type"] == "turn/end"]
        assert ends == [{"kind": "aborted", "cause": "user"}]


async def test_a_prompt_sent_right_after_a_cancel_runs_after_the_cancelled_one(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        server.write_raw(json.dumps(_prompt_frame("first", sid, "hold")).encode() + b"\n")
        await server.client.wait_for(server.client.saw_text(sid, "holding"))
        cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
        second = _prompt_frame("second", sid, "after the cancel")
        # One write: the cancel, then at once the next prompt (no waiting for the answer).
        server.write_raw(f"{json.dumps(cancel)}\n{json.dumps(second)}\n".encode())
        answered = await server.frame(lambda frame: frame.get("id") == "second")
        assert answered.get("result") == {"stopReason": "end_turn"}, answered
        answers = [f for f in server.frames if f.get("id") in ("first", "second")]
        assert [(f["id"], f["result"]["stopReason"]) for f in answers] == [
            ("first", "cancelled"),
            ("second", "end_turn"),
        ]
        assert server.client.text(sid) == "holding" + "echo: after the cancel"
        await server.close_stdin()
        ends = [e["data"]["reason"] for e in server.log(sid) if e["type"] == "turn/end"]
        assert ends == [{"kind": "aborted", "cause": "user"}, {"kind": "completed"}]


async def test_a_second_prompt_without_a_cancel_is_still_refused(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        server.write_raw(json.dumps(_prompt_frame("first", sid, "hold")).encode() + b"\n")
        await server.client.wait_for(server.client.saw_text(sid, "holding"))
        server.write_raw(json.dumps(_prompt_frame("second", sid, "too soon")).encode() + b"\n")
        refused = await server.frame(lambda frame: frame.get("id") == "second")
        assert refused["error"]["code"] == -32600
        await server.conn.cancel(session_id=sid)
        first = await server.frame(lambda frame: frame.get("id") == "first")
        assert first["result"] == {"stopReason": "cancelled"}
