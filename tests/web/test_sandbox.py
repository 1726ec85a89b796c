"""The sandbox behind ``tether web``: chosen when a session is created, shown with its
network policy, and obeyed by the session's commands."""

from __future__ import annotations

from pathlib import Path

from tests.shell.support import require_landlock
from tests.web.server import read_stream, served
from tests.web.test_api import _create, _prompt

ALLOW_LIST = {
    "plugins": [
        {"id": "sandbox", "config": {"network": "allow-list", "allowed_hosts": ["pypi.org"]}}
    ]
}


async def test_a_session_is_created_in_a_sandbox_mode_that_is_shown_and_obeyed(
    tmp_path: Path,
) -> None:
    require_landlock()
    locked, open_ = tmp_path / "locked", tmp_path / "open"
    locked.mkdir()
    open_.mkdir()
    async with served(tmp_path / "data", overlays=[ALLOW_LIST]) as web:
        offered = (await web.client.get("/api/models")).json()
        assert offered["sandbox_modes"] == ["read-only", "workspace-write", "full-access"]
        assert offered["default_sandbox"] == "workspace-write"

        read_only = await _create(web, locked, sandbox="read-only")
        default = await _create(web, open_)
        for session_id in (read_only, default):
            await _prompt(web, session_id, "$ touch made")
            await read_stream(web.client, session_id)
        shown = (await web.client.get(f"/api/sessions/{read_only}")).json()
        plain = (await web.client.get(f"/api/sessions/{default}")).json()
        logged = [
            (
                event.type,
                getattr(event.payload, "option", None),
                getattr(event.payload, "value", None),
            )
            for event in web.hub.live_agent(read_only).session.events  # type: ignore[union-attr]
        ]

    assert shown["sandbox"] == {"mode": "read-only", "network": "network allow-list: pypi.org"}
    assert plain["sandbox"] == {
        "mode": "workspace-write",
        "network": "network allow-list: pypi.org",
    }
    assert ("session/config", "sandbox", "read-only") in logged
    assert not (locked / "made").exists()
    assert (open_ / "made").exists()


async def test_a_bad_sandbox_mode_is_refused_naming_the_modes(tmp_path: Path) -> None:
    async with served(tmp_path / "data") as web:
        refused = await web.client.post(
            "/api/sessions", json={"cwd": str(tmp_path), "sandbox": "yolo"}
        )
        assert refused.status_code == 400
        assert refused.json()["error"] == (
            "sandbox must be one of read-only, workspace-write, full-access, got 'yolo'"
        )
        listed = (await web.client.get("/api/sessions")).json()["sessions"]
    assert listed == []
