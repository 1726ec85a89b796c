"""``session/load`` replays a stored session exactly as it was streamed; ``session/list``."""

import json
from pathlib import Path
from typing import Any

import pytest
from acp.exceptions import RequestError
from acp.schema import AvailableCommandsUpdate, ToolCallProgress, UserMessageChunk

from tests.acp.harness import serving
from tests.plugins.fs_support import PNG_1X1


def dumped(updates: list[Any]) -> list[dict[str, Any]]:
    return [u.model_dump(mode="json", by_alias=True, exclude_none=True) for u in updates]


async def test_load_replays_what_was_streamed_live(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    async with serving(tmp_path, "--mode", "auto") as server:
        sid = await server.new_session(project)
        assert await server.prompt(sid, "hello") == "end_turn"
        assert await server.prompt(sid, "think deep") == "end_turn"
        assert await server.prompt(sid, "bash echo x") == "end_turn"
        held = server.start_prompt(sid, "hold")
        await server.client.wait_for(server.client.saw_text(sid, "holding"))
        await server.conn.cancel(session_id=sid)
        assert await held == "cancelled"
        live = server.client.of(sid)
    async with serving(tmp_path) as server:
        response = await server.conn.load_session(cwd=str(project), session_id=sid, mcp_servers=[])
        assert response.modes is not None and response.modes.current_mode_id == "ask"
        replayed = server.client.of(sid)
        said = [u.content.text for u in replayed if isinstance(u, UserMessageChunk)]
        assert said == ["hello", "think deep", "bash echo x", "hold"]
        live_shown = [
            u
            for u in live
            if not (isinstance(u, ToolCallProgress) and u.status == "in_progress")
            and not isinstance(u, AvailableCommandsUpdate)
        ]
        history = [
            u for u in replayed if not isinstance(u, UserMessageChunk | AvailableCommandsUpdate)
        ]
        assert dumped(history) == dumped(live_shown)
        # The loaded session goes on where it stopped.
        assert await server.prompt(sid, "and now?") == "end_turn"
        assert server.client.text(sid).endswith("echo: and now?")


async def test_load_replays_the_diffs_of_edits_and_writes_and_read_images(
    tmp_path: Path,
) -> None:
    import base64

    project = tmp_path / "project"
    project.mkdir()
    (project / "a.txt").write_text("hello world\n")
    (project / "cat.png").write_bytes(PNG_1X1)
    async with serving(tmp_path, "--mode", "auto", model="offline") as server:
        sid = await server.new_session(project)
        assert await server.prompt(sid, "edit a.txt: world => tether") == "end_turn"
        assert await server.prompt(sid, "write b.txt: fresh") == "end_turn"
        assert await server.prompt(sid, "read cat.png") == "end_turn"
        assert server.client.text(sid).endswith("(I was shown an image: image/png)")
        live = server.client.of(sid)
    assert (project / "a.txt").read_text() == "hello tether\n"
    async with serving(tmp_path, model="offline") as server:
        await server.conn.load_session(cwd=str(project), session_id=sid, mcp_servers=[])
        replayed = server.client.of(sid)
    live_shown = [
        u
        for u in live
        if not (isinstance(u, ToolCallProgress) and u.status == "in_progress")
        and not isinstance(u, AvailableCommandsUpdate)
    ]
    history = [u for u in replayed if not isinstance(u, UserMessageChunk | AvailableCommandsUpdate)]
    assert dumped(history) == dumped(live_shown)
    contents = [c for u in history if isinstance(u, ToolCallProgress) for c in u.content or []]
    diffs = [(c.path, c.old_text, c.new_text) for c in contents if c.type == "diff"]
    edited, created = str(project / "a.txt"), str(project / "b.txt")
    assert diffs == [
        (edited, "hello world\n", "hello tether\n"),  # the preview
        (edited, "hello world\n", "hello tether\n"),  # kept when the edit completed
        (created, None, "fresh\n"),
        (created, None, "fresh\n"),
    ]
    (image,) = [c.content for c in contents if c.type == "content" and c.content.type == "image"]
    assert (image.mime_type, base64.b64decode(image.data)) == ("image/png", PNG_1X1)


async def test_load_refuses_another_cwd_and_unknown_sessions(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        assert await server.prompt(sid, "remember me") == "end_turn"
        with pytest.raises(RequestError) as open_elsewhere:
            await server.conn.load_session(cwd="/elsewhere", session_id=sid, mcp_servers=[])
        assert open_elsewhere.value.code == -32602 and "/elsewhere" in str(open_elsewhere.value)
        with pytest.raises(RequestError) as unknown:
            await server.conn.load_session(cwd=str(server.home), session_id="nope", mcp_servers=[])
        assert unknown.value.code == -32002 and "'nope'" in str(unknown.value)
        await server.close_stdin()
    async with serving(tmp_path) as server:
        with pytest.raises(RequestError) as stored_elsewhere:
            await server.conn.load_session(cwd="/elsewhere", session_id=sid, mcp_servers=[])
        assert stored_elsewhere.value.code == -32602
        await server.close_stdin()
        # The refused load published nothing.
        assert [line for line in server.ledger() if line.startswith("created")] == [
            f"created {sid}"
        ]


async def test_list_shows_stored_sessions_with_cwd_and_title(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        assert await server.prompt(sid, "a title for this") == "end_turn"
        await server.close_stdin()
    async with serving(tmp_path) as server:
        listed = await server.conn.list_sessions(cwd=str(server.home))
        assert [(s.session_id, s.cwd, s.title) for s in listed.sessions] == [
            (sid, str(server.home), "a title for this")
        ]
        assert (await server.conn.list_sessions(cwd="/elsewhere")).sessions == []


def _request(frame_id: str, method: str, params: dict[str, object]) -> bytes:
    frame = {"jsonrpc": "2.0", "id": frame_id, "method": method, "params": params}
    return json.dumps(frame).encode() + b"\n"


async def _stored_session(tmp_path: Path) -> str:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        assert await server.prompt(sid, "stored") == "end_turn"
    return sid


async def test_a_close_sent_while_its_session_loads_closes_it(tmp_path: Path) -> None:
    sid = await _stored_session(tmp_path)
    async with serving(tmp_path) as server:
        await server.conn.list_sessions()  # tether is up
        earlier = len(server.ledger())  # the lines of the process that stored it
        load = {"cwd": str(server.home), "sessionId": sid, "mcpServers": []}
        # What Zed sends: the load, and at once the close of the same session.
        server.write_raw(
            _request("load", "session/load", load)
            + _request("close", "session/close", {"sessionId": sid})
        )
        closed = await server.frame(lambda f: f.get("id") == "close")
        assert "error" not in closed and "result" in closed, closed
        # Disposed by the close, not left live until the connection ends.
        assert f"disposed {sid}" in server.ledger()[earlier:], server.ledger()
        loaded = await server.frame(lambda f: f.get("id") == "load")
        assert "result" in loaded, loaded
        with pytest.raises(RequestError) as refused:
            await server.prompt(sid, "still there?")
        assert refused.value.code == -32602
        # Closed, it loads again.
        await server.conn.load_session(cwd=str(server.home), session_id=sid, mcp_servers=[])
        assert await server.prompt(sid, "back") == "end_turn"


async def test_two_concurrent_loads_of_one_session_both_answer_with_one_replay(
    tmp_path: Path,
) -> None:
    sid = await _stored_session(tmp_path)
    async with serving(tmp_path) as server:
        await server.conn.list_sessions()  # tether is up
        earlier = len(server.ledger())  # the lines of the process that stored it
        load = {"cwd": str(server.home), "sessionId": sid, "mcpServers": []}
        server.write_raw(
            _request("first", "session/load", load) + _request("second", "session/load", load)
        )
        first = await server.frame(lambda f: f.get("id") == "first")
        second = await server.frame(lambda f: f.get("id") == "second")
        assert "result" in first and "result" in second, (first, second)
        said = [u.content.text for u in server.client.of(sid) if isinstance(u, UserMessageChunk)]
        assert said == ["stored"]
        assert server.ledger()[earlier:].count(f"created {sid}") == 1, server.ledger()
        assert await server.prompt(sid, "one session") == "end_turn"
