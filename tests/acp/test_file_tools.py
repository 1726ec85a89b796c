"""The file tools over ACP: kind, locations and diffs; the permission request shows the diff."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from acp.exceptions import RequestError
from acp.schema import (
    ClientCapabilities,
    FileEditToolCallContent,
    FileSystemCapabilities,
    ReadTextFileResponse,
    ToolCallProgress,
    ToolCallStart,
    WriteTextFileResponse,
)

from tests.acp.harness import AcpProcess, Recorder, serving


def workspace(tmp_path: Path, text: str | None = None) -> Path:
    """The session's cwd, holding ``a.txt`` with ``text`` if given."""
    work = tmp_path / "work"
    work.mkdir()
    if text is not None:
        (work / "a.txt").write_text(text)
    return work


def call(tool: str, **arguments: Any) -> str:
    return f"call {tool} {json.dumps(arguments)}"


def starts(server: AcpProcess, sid: str) -> list[ToolCallStart]:
    return [u for u in server.client.of(sid) if isinstance(u, ToolCallStart)]


def progress(server: AcpProcess, sid: str) -> list[ToolCallProgress]:
    return [u for u in server.client.of(sid) if isinstance(u, ToolCallProgress)]


def diffs(update: Any) -> list[FileEditToolCallContent]:
    return [c for c in update.content or [] if isinstance(c, FileEditToolCallContent)]


async def test_file_calls_show_their_kind_and_location(tmp_path: Path) -> None:
    work = workspace(tmp_path, "one\ntwo\n")
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
    work = workspace(tmp_path, "hello world\n")
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


async def test_ask_mode_shows_the_diff_and_allow_always_covers_edits_in_its_directory(
    tmp_path: Path,
) -> None:
    work = workspace(tmp_path, "v1\n")
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
        assert "Always allow Edit(./**)" in [o.name for o in options]

        client.answer = "allow-always"
        await server.prompt(sid, call("edit", path="a.txt", old_string="v1", new_string="v2"))
        assert (work / "a.txt").read_text() == "v2\n"
        asked_before = len(client.permission_requests)
        await server.prompt(sid, call("write", path="b.txt", content="new\n"))
        assert (work / "b.txt").read_text() == "new\n"
        assert len(client.permission_requests) == asked_before  # edits here are allowed now
        await server.prompt(sid, call("read", path="a.txt"))  # read-only: never asked
        assert len(client.permission_requests) == asked_before
        client.answer = "reject-once"
        await server.prompt(sid, call("bash", command="true"))
        assert len(client.permission_requests) == asked_before + 1  # a command is not an edit


async def test_outside_the_workspace_is_asked_even_in_auto_mode(tmp_path: Path) -> None:
    work = workspace(tmp_path)
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


class Editor(Recorder):
    """A client that serves files from its buffers: unsaved text wins over the disk."""

    def __init__(self) -> None:
        super().__init__()
        self.buffers: dict[str, str] = {}
        self.reads: list[str] = []
        self.writes: list[str] = []

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **_meta: Any,
    ) -> ReadTextFileResponse:
        self.reads.append(path)
        if path in self.buffers:
            return ReadTextFileResponse(content=self.buffers[path])
        try:
            return ReadTextFileResponse(content=_on_disk(path))
        except OSError:
            raise RequestError.resource_not_found(path) from None

    async def write_text_file(
        self, session_id: str, path: str, content: str, **_meta: Any
    ) -> WriteTextFileResponse:
        self.writes.append(path)
        self.buffers[path] = content
        return WriteTextFileResponse()


def _on_disk(path: str) -> str:
    return Path(path).read_text()


EDITOR_FS = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True, write_text_file=True))


async def test_file_tools_use_the_editors_buffers_when_it_serves_them(tmp_path: Path) -> None:
    work = workspace(tmp_path, "saved text\n")
    editor = Editor()
    editor.buffers[str(work / "a.txt")] = "unsaved text\n"
    async with serving(tmp_path, "--mode", "auto", client=editor, capabilities=EDITOR_FS) as server:
        sid = await server.new_session(work)
        await server.prompt(sid, call("read", path="a.txt"))
        assert server.client.text(sid) == "done:      1\tunsaved text"
        edit = call("edit", path="a.txt", old_string="unsaved", new_string="edited")
        assert await server.prompt(sid, edit) == "end_turn"
        assert editor.buffers[str(work / "a.txt")] == "edited text\n"
        assert (work / "a.txt").read_text() == "saved text\n"  # the disk is the editor's to save
        await server.prompt(sid, call("write", path="new.txt", content="fresh\n"))
        assert editor.buffers[str(work / "new.txt")] == "fresh\n"
        assert not (work / "new.txt").exists()
        assert editor.writes == [str(work / "a.txt"), str(work / "new.txt")]


async def test_a_buffer_changed_in_the_editor_since_the_read_is_stale(tmp_path: Path) -> None:
    work = workspace(tmp_path, "one\n")
    editor = Editor()
    async with serving(tmp_path, "--mode", "auto", client=editor, capabilities=EDITOR_FS) as server:
        sid = await server.new_session(work)
        await server.prompt(sid, call("read", path="a.txt"))
        editor.buffers[str(work / "a.txt")] = "one, typed in the editor\n"
        await server.prompt(sid, call("edit", path="a.txt", old_string="one", new_string="1"))
        assert "changed on disk since it was last read" in server.client.text(sid)
        assert editor.writes == []
        await server.prompt(sid, call("read", path="missing.txt"))
        assert "done: missing.txt does not exist; to find where it is" in server.client.text(sid)


async def test_without_the_capability_the_disk_is_used(tmp_path: Path) -> None:
    work = workspace(tmp_path, "disk\n")
    editor = Editor()
    async with serving(tmp_path, "--mode", "auto", client=editor) as server:
        sid = await server.new_session(work)
        await server.prompt(sid, call("read", path="a.txt"))
        await server.prompt(sid, call("edit", path="a.txt", old_string="disk", new_string="d"))
        assert (work / "a.txt").read_text() == "d\n"
        assert editor.reads == [] and editor.writes == []


class ReadOnlyEditor(Editor):
    """A client whose buffers refuse writes."""

    async def write_text_file(
        self, session_id: str, path: str, content: str, **_meta: Any
    ) -> WriteTextFileResponse:
        self.writes.append(path)
        raise RequestError.internal_error({"details": "the buffer is read-only"})


async def test_a_write_the_editor_refuses_is_an_error_result_and_changes_nothing(
    tmp_path: Path,
) -> None:
    work = workspace(tmp_path, "text\n")
    editor = ReadOnlyEditor()
    async with serving(tmp_path, "--mode", "auto", client=editor, capabilities=EDITOR_FS) as server:
        sid = await server.new_session(work)
        await server.prompt(sid, call("read", path="a.txt"))
        await server.prompt(sid, call("edit", path="a.txt", old_string="text", new_string="t"))
        assert "the editor could not write a.txt" in server.client.text(sid)
        assert editor.writes == [str(work / "a.txt")]
        assert (work / "a.txt").read_text() == "text\n"


async def test_bad_input_is_answered_by_the_call_without_a_traceback(tmp_path: Path) -> None:
    work = workspace(tmp_path)
    async with serving(tmp_path, "--mode", "auto") as server:
        sid = await server.new_session(work)
        await server.prompt(sid, call("read", path=""))
        await server.prompt(sid, call("grep", pattern="("))
        text = server.client.text(sid)
        assert "done: the path is empty" in text
        assert "done: invalid regular expression '('" in text
    assert "Traceback" not in server.stderr()


async def test_a_loaded_session_shows_file_calls_with_their_kind_and_location(
    tmp_path: Path,
) -> None:
    work = workspace(tmp_path, "one\n")
    async with serving(tmp_path, "--mode", "auto") as server:
        sid = await server.new_session(work)
        await server.prompt(sid, call("read", path="a.txt"))
    async with serving(tmp_path) as server:
        await server.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        (start,) = starts(server, sid)
        assert start.kind == "read"
        assert [loc.path for loc in start.locations or []] == [str(work / "a.txt")]
