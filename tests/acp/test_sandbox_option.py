"""The sandbox mode as a session config option, through a real ``tether acp``: offered,
changed for the next command, logged, shown, and restored when the session is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest
from acp.exceptions import RequestError
from acp.schema import ConfigOptionUpdate

from tests.acp.harness import LEDGER, serving
from tests.acp.test_editor_features import assert_frames_parse, updates_of
from tests.shell.support import require_landlock

REAL_BASH = (
    """\
plugins:
  - id: scripted
    plugin: tests.acp.scripted
  - id: sandbox
    config: {{network: allow-list, allowed_hosts: [pypi.org]}}
"""
    + LEDGER
)
"""The scripted model with the real ``bash`` tool, under a sandbox with an allow-list."""


@pytest.fixture(autouse=True)
def _landlock() -> None:
    require_landlock()


async def test_the_sandbox_option_changes_the_next_command_and_survives_a_load(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    home = tmp_path / "home"
    async with serving(tmp_path / "one", "--mode", "auto", overlay=REAL_BASH, home=home) as server:
        created = await server.conn.new_session(cwd=str(ws), mcp_servers=[])
        sid = created.session_id
        offered = {option.id: option for option in created.config_options or []}
        sandbox = offered["sandbox"]
        assert sandbox.current_value == "workspace-write"
        assert "network allow-list: pypi.org" in (sandbox.description or "")
        assert [o.value for o in sandbox.options] == [
            "read-only",
            "workspace-write",
            "full-access",
        ]
        assert await server.prompt(sid, "bash touch before") == "end_turn"

        changed = await server.conn.set_config_option(
            config_id="sandbox", session_id=sid, value="read-only"
        )
        by_id = {option.id: option for option in changed.config_options}
        assert by_id["sandbox"].current_value == "read-only"
        assert await server.prompt(sid, "bash touch after") == "end_turn"

        with pytest.raises(RequestError) as refused:
            await server.conn.set_config_option(config_id="sandbox", session_id=sid, value="off")
        assert refused.value.code == -32602
        assert "unknown sandbox mode 'off'" in str(refused.value)
        shown = [
            {o.id: o.current_value for o in update.config_options}["sandbox"]
            for update in updates_of(server, sid, ConfigOptionUpdate)
        ]
        assert shown == ["read-only"]
        logged = [e["data"] for e in server.log(sid) if e["type"] == "session/config"]
        assert {"option": "sandbox", "value": "read-only"} in logged
        assert assert_frames_parse(server) > 0

    async with serving(tmp_path / "two", "--mode", "auto", overlay=REAL_BASH, home=home) as again:
        loaded = await again.conn.load_session(cwd=str(ws), session_id=sid, mcp_servers=[])
        restored = {option.id: option for option in loaded.config_options or []}
        assert restored["sandbox"].current_value == "read-only"
        assert await again.prompt(sid, "bash touch loaded") == "end_turn"
        await again.conn.set_config_option(
            config_id="sandbox", session_id=sid, value="workspace-write"
        )
        assert await again.prompt(sid, "bash touch back") == "end_turn"

    assert sorted(p.name for p in ws.iterdir()) == ["back", "before"]


async def test_a_client_that_shows_notices_is_told_when_the_sandbox_denies_a_command(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    async with serving(tmp_path, "--mode", "auto", overlay=REAL_BASH, initialize=False) as server:
        await server.initialize_json({"session": {"notices": {}}})
        sid = await server.new_session(ws)
        assert await server.prompt(sid, f"bash touch {outside}") == "end_turn"
        notices = [
            f["params"]["update"]
            for f in server.frames
            if f.get("method") == "session/update"
            and f["params"]["update"]["sessionUpdate"] == "notice"
        ]
        assert len(notices) == 1
        assert notices[0]["title"] == "The sandbox denied an access"
        assert notices[0]["description"].startswith("sandbox workspace-write")
        assert "the command was denied an access" in notices[0]["description"]
        assert not outside.exists()
