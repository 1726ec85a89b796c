"""The file tools over ACP: kind, locations and diffs; the permission request shows the diff."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from acp.schema import FileEditToolCallContent, ToolCallProgress, ToolCallStart

from tests.acp.harness import AcpProcess, serving


def call(tool: str, **arguments: Any) -> str:
    return f"call {tool} {json.dumps(arguments)}"


def starts(server: AcpProcess, sid: str) -> list[ToolCallStart]:
    return [u for u in server.client.of(sid) if isinstance(u, ToolCallStart)]


def progress(server: AcpProcess, sid: str) -> list[ToolCallProgress]:
    return [u for u in server.client.of(sid) if isinstance(u, ToolCallProgress)]


def diffs(update: Any) -> list[FileEditToolCallContent]:
    return [c for c in update.content or [] if isinstance(c, FileEditToolCallContent)]


async def test_file_calls_show_their_kind_and_location(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("one\ntwo\n")
    async with serving(tmp_path, "--mode", "auto") as server:
        sid = await server.new_session(work)
        assert await server.prompt(sid, call("read", path="a.txt", offset=2)) == "end_turn"
        assert await server.prompt(sid, call("grep", pattern="two")) == "end_turn"
        read, grep = starts(server, sid)
        assert (read.kind, read.title) == ("read", "read")
        assert [(loc.path, loc.line) for loc in read.locations or []] == [(str(work / "a.txt"), 2)]
        assert grep.kind == "search"
        assert [loc.path for loc in grep.locations or []] == [str(work)]
        assert server.client.text(sid) == "done:      2\ttwo" + "done: a.txt"


async def test_an_edit_streams_its_diff_and_keeps_it_when_done(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("hello world\n")
    async with serving(tmp_path, "--mode", "auto") as server:
        sid = await server.new_session(work)
        await server.prompt(sid, call("read", path="a.txt"))
        edit = call("edit", path="a.txt", old_string="world", new_string="tether")
        assert await server.prompt(sid, edit) == "end_turn"
        assert (work / "a.txt").read_text() == "hello tether\n"
        (start,) = starts(server, sid)[1:]
        assert start.kind == "edit"
        updates = [u for u in progress(server, sid) if u.tool_call_id == start.tool_call_id]
        preview = next(u for u in updates if diffs(u))
        (diff,) = diffs(preview)
        assert (diff.path, diff.old_text, diff.new_text) == (
            str(work / "a.txt"),
            "hello world\n",
            "hello tether\n",
        )
        assert [(loc.path, loc.line) for loc in preview.locations or []] == [
            (str(work / "a.txt"), 1)
        ]
        assert preview.title == "edit a.txt" and preview.kind == "edit"
        final = updates[-1]
        assert final.status == "completed" and len(diffs(final)) == 1


async def test_ask_mode_shows_the_diff_and_allow_always_covers_every_edit(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("v1\n")
    async with serving(tmp_path) as server:
        client = server.client
        sid = await server.new_session(work)
        await server.prompt(sid, call("read", path="a.txt"))
        client.answer = "reject-once"
        await server.prompt(sid, call("edit", path="a.txt", old_string="v1", new_string="v2"))
        assert (work / "a.txt").read_text() == "v1\n"  # rejected: nothing applied
        _, asked, options = client.permission_requests[-1]
        (diff,) = diffs(asked)
        assert (diff.old_text, diff.new_text) == ("v1\n", "v2\n")
        assert asked.kind == "edit" and asked.title == "edit a.txt"
        assert "Always allow edits in this session" in [o.name for o in options]

        client.answer = "allow-always"
        await server.prompt(sid, call("edit", path="a.txt", old_string="v1", new_string="v2"))
        assert (work / "a.txt").read_text() == "v2\n"
        asked_before = len(client.permission_requests)
        await server.prompt(sid, call("write", path="b.txt", content="new\n"))
        assert (work / "b.txt").read_text() == "new\n"
        assert len(client.permission_requests) == asked_before  # edits are allowed now
        client.answer = "reject-once"
        await server.prompt(sid, call("read", path="a.txt"))
        assert len(client.permission_requests) == asked_before + 1  # a read is not an edit


async def test_outside_the_workspace_is_asked_even_in_auto_mode(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "elsewhere.txt").write_text("far\n")
    async with serving(tmp_path, "--mode", "auto") as server:
        client = server.client
        sid = await server.new_session(work)
        client.answer = "allow-once"
        await server.prompt(sid, call("read", path="../elsewhere.txt"))
        ((_, asked, options),) = client.permission_requests
        assert [o.kind for o in options] == ["allow_once", "reject_once"]
        assert asked.kind == "read"
        assert server.client.text(sid) == "done:      1\tfar"
        client.answer = "reject-once"
        await server.prompt(sid, call("read", path="../elsewhere.txt"))
        assert len(client.permission_requests) == 2
        assert progress(server, sid)[-1].status == "failed"
