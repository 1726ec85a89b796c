"""Child agents of an ACP session answer to that session's permission mode, show their
work in the parent's ``task`` call, and are listed with their parent."""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
from pathlib import Path
from typing import Any

from acp.schema import ListSessionsResponse, SessionNotification
from acp.utils import serialize_params

from tests.acp.harness import ROOT, env_for, serving

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


def _updates(frames: list[dict[str, Any]], session_id: str) -> list[dict[str, Any]]:
    return [
        f["params"]["update"]
        for f in frames
        if f.get("method") == "session/update" and f["params"]["sessionId"] == session_id
    ]


def _progress(update: dict[str, Any]) -> str:
    [item] = update["content"]
    return str(item["content"]["text"])


async def test_a_childs_stream_and_tool_calls_show_in_the_parents_task_call(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, overlay="plugins:\n", model="offline") as server:
        sid = await server.new_session()
        await server.conn.set_session_mode(mode_id="auto", session_id=sid)
        assert await server.prompt(sid, DELEGATE) == "end_turn"
        frames = list(server.frames)
    updates = _updates(frames, sid)
    [call] = [u for u in updates if u["sessionUpdate"] == "tool_call" and u["title"] == "task"]
    of_call = [
        u
        for u in updates
        if u["sessionUpdate"] == "tool_call_update" and u["toolCallId"] == call["toolCallId"]
    ]
    progress = [_progress(u) for u in of_call if "content" in u and "status" not in u]
    # One line for the child's bash call, then its answer as it streams.
    assert progress[0] == "\u25b8 bash: echo hello from the child\n"
    assert len(progress) > 2
    for shorter, longer in itertools.pairwise(progress):
        assert longer.startswith(shorter) and longer != shorter
    assert "hello from the child\n[exit code: 0]" in progress[-1]
    # The result replaces the progress once the child is done.
    final = of_call[-1]
    assert final["status"] == "completed"
    assert "\u25b8" not in _progress(final) and "[task " in _progress(final)
    # The child has no session of its own on the wire.
    assert {f["params"]["sessionId"] for f in frames if f.get("method") == "session/update"} == {
        sid
    }
    for frame in frames:
        if frame.get("method") == "session/update":
            params = frame["params"]
            assert serialize_params(SessionNotification.model_validate(params)) == params


NESTED = "/tool task " + json.dumps(
    {
        "description": "outer job",
        "prompt": "/tool task "
        + json.dumps({"description": "inner job", "prompt": "$ echo from the grandchild"}),
    }
)


async def test_children_are_listed_with_their_parent_and_sessions_show_prints_the_tree(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, overlay="plugins:\n", model="offline") as server:
        sid = await server.new_session()
        await server.conn.set_session_mode(mode_id="auto", session_id=sid)
        assert await server.prompt(sid, NESTED) == "end_turn"
        answer = await server.frame_answer(
            {"jsonrpc": "2.0", "id": 900, "method": "session/list", "params": {}}, 900
        )
    listed = answer["result"]["sessions"]
    ListSessionsResponse.model_validate(answer["result"])
    by_id = {entry["sessionId"]: entry for entry in listed}
    assert "_meta" not in by_id[sid]
    [child] = [e for e in listed if e.get("_meta", {}).get("tether", {}).get("parent") == sid]
    assert child["_meta"] == {"tether": {"parent": sid, "task": "outer job"}}
    [grandchild] = [
        e
        for e in listed
        if e.get("_meta", {}).get("tether", {}).get("parent") == child["sessionId"]
    ]
    assert grandchild["_meta"]["tether"]["task"] == "inner job"

    shown = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tether.cli.main",
        "sessions",
        "show",
        sid,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env_for(tmp_path / "home"),
        cwd=str(ROOT),
    )
    out, err = await asyncio.wait_for(shown.communicate(), 60)
    assert shown.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    tree = lines[lines.index("delegated to:") :]
    assert tree == [
        "delegated to:",
        f"  {child['sessionId']}  outer job",
        f"    {grandchild['sessionId']}  inner job",
    ]


async def test_a_background_childs_work_never_overwrites_its_answered_task_call(
    tmp_path: Path,
) -> None:
    background = "/tool task " + json.dumps(
        {"description": "later", "prompt": "$ echo from the background", "run_in_background": True}
    )
    async with serving(tmp_path, overlay="plugins:\n", model="offline") as server:
        sid = await server.new_session()
        await server.conn.set_session_mode(mode_id="auto", session_id=sid)
        assert await server.prompt(sid, background) == "end_turn"
        # Its completion comes as a notice, which the parent's model answers.
        await server.frame(
            lambda f: (
                f.get("method") == "session/update"
                and f["params"]["update"]["sessionUpdate"] == "user_message_chunk"
                and "background task" in f["params"]["update"]["content"]["text"]
            )
        )
        frames = list(server.frames)
    updates = _updates(frames, sid)
    [call] = [u for u in updates if u["sessionUpdate"] == "tool_call" and u["title"] == "task"]
    of_call = [
        u
        for u in updates
        if u["sessionUpdate"] == "tool_call_update" and u["toolCallId"] == call["toolCallId"]
    ]
    assert of_call[-1]["status"] == "completed"
    assert _progress(of_call[-1]).startswith("started task ")
    assert not any("\u25b8 bash" in _progress(u) for u in of_call if "content" in u)
