"""ACP ``session/fork``: a branch that is a first-class session, through a real ``tether acp``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from acp.exceptions import RequestError
from acp.schema import McpServerStdio, UserMessageChunk

from tests.acp.harness import SCRIPTED, AcpProcess, serving
from tests.acp.test_schema_conformance import _check


def header(server: AcpProcess, session_id: str) -> dict[str, Any]:
    path = server.home / "sessions" / f"{session_id}.jsonl"
    first: dict[str, Any] = json.loads(path.read_text().splitlines()[0])["header"]
    return first


def said(server: AcpProcess, session_id: str) -> list[str]:
    """The user messages the client was shown for ``session_id``."""
    shown = server.client.of(session_id)
    return [u.content.text for u in shown if isinstance(u, UserMessageChunk)]


async def test_a_fork_is_a_session_of_its_own_and_the_parent_is_unchanged(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    async with serving(tmp_path) as server:
        initialized = await server.conn.initialize(protocol_version=1)
        sessions = initialized.agent_capabilities.session_capabilities
        assert sessions is not None and sessions.fork is not None
        sid = await server.new_session(project)
        assert await server.prompt(sid, "hello") == "end_turn"
        assert await server.prompt(sid, "again") == "end_turn"
        parent_log = server.log(sid)

        forked = await server.conn.fork_session(session_id=sid, cwd=str(project), mcp_servers=[])
        fid = forked.session_id
        assert fid != sid
        assert forked.modes is not None and forked.modes.current_mode_id == "ask"
        assert forked.field_meta == {"tether": {"parent": sid, "seq": len(parent_log)}}
        lineage = header(server, fid)["lineage"]
        assert lineage == {"parent": sid, "seed_length": len(parent_log)}
        assert server.log(fid)[: len(parent_log)] == parent_log

        await server.conn.load_session(cwd=str(project), session_id=fid, mcp_servers=[])
        assert said(server, fid) == ["hello", "again"]
        assert await server.prompt(fid, "only in the branch") == "end_turn"
        assert server.client.text(fid).endswith("echo: only in the branch")

        assert server.log(sid) == parent_log
        assert await server.prompt(sid, "parent goes on") == "end_turn"
        assert "only in the branch" not in json.dumps(server.log(sid))
        listed = await server.conn.list_sessions(cwd=str(project))
        assert {sid, fid} <= {entry.session_id for entry in listed.sessions}
        methods, _ = _check(server)
    assert "session/fork" in methods

    async with serving(tmp_path) as server:
        resumed = await server.conn.resume_session(session_id=fid, cwd=str(project))
        assert resumed is not None
        assert await server.prompt(fid, "after a restart") == "end_turn"
        prompts = [
            e["data"]["content"][0]["text"] for e in server.log(fid) if e["type"] == "user/message"
        ]
        assert prompts[-2:] == ["only in the branch", "after a restart"]


async def test_a_stored_session_forks_at_a_seq(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    async with serving(tmp_path) as server:
        sid = await server.new_session(project)
        assert await server.prompt(sid, "first") == "end_turn"
        cut = len(server.log(sid))
        assert await server.prompt(sid, "second") == "end_turn"
        parent_log = server.log(sid)
    async with serving(tmp_path) as server:
        forked = await server.conn.fork_session(
            session_id=sid, cwd=str(project), mcp_servers=[], tether={"seq": cut}
        )
        fid = forked.session_id
        assert header(server, fid)["lineage"] == {"parent": sid, "seed_length": cut}
        await server.conn.load_session(cwd=str(project), session_id=fid, mcp_servers=[])
        assert said(server, fid) == ["first"]
        assert server.log(sid) == parent_log


async def test_bad_forks_are_clear_errors(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    async with serving(tmp_path) as server:
        sid = await server.new_session(project)
        assert await server.prompt(sid, "hello") == "end_turn"
        length = len(server.log(sid))

        with pytest.raises(RequestError) as unknown:
            await server.conn.fork_session(
                session_id="20200101-000000-0000abcd", cwd=str(project), mcp_servers=[]
            )
        assert unknown.value.code == -32002

        with pytest.raises(RequestError) as beyond:
            await server.conn.fork_session(
                session_id=sid, cwd=str(project), mcp_servers=[], tether={"seq": length + 1}
            )
        assert beyond.value.code == -32602
        assert f"has {length} events" in str(beyond.value)

        with pytest.raises(RequestError) as not_a_number:
            await server.conn.fork_session(
                session_id=sid, cwd=str(project), mcp_servers=[], tether={"seq": "3"}
            )
        assert not_a_number.value.code == -32602
        assert "_meta.tether.seq must be an integer" in str(not_a_number.value)

        with pytest.raises(RequestError) as moved:
            await server.conn.fork_session(session_id=sid, cwd=str(elsewhere), mcp_servers=[])
        assert moved.value.code == -32602

        stored = {p.stem for p in (server.home / "sessions").glob("*.jsonl")}
        assert stored == {sid}
        assert await server.prompt(sid, "still fine") == "end_turn"
        _check(server)


async def test_a_fork_offering_servers_no_plugin_runs_stores_nothing(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    without_mcp = SCRIPTED + "  - id: mcp\n    disabled: true\n"
    async with serving(tmp_path, overlay=without_mcp) as server:
        sid = await server.new_session(project)
        assert await server.prompt(sid, "hello") == "end_turn"
        offered = McpServerStdio(name="files", command="/bin/true", args=[], env=[])
        with pytest.raises(RequestError) as refused:
            await server.conn.fork_session(session_id=sid, cwd=str(project), mcp_servers=[offered])
        assert refused.value.code == -32602 and "no 'mcp' plugin" in str(refused.value)
        assert {p.stem for p in (server.home / "sessions").glob("*.jsonl")} == {sid}
