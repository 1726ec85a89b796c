"""In the web page, a ``task`` with ``isolation: worktree`` runs its child in a git worktree
it owns (real git): the session's stream carries the child's diff in the call's result."""

from __future__ import annotations

import json
from pathlib import Path

from tests.plugins.test_worktrees import make_repo
from tether.rewind.worktree import WORKTREES_DIR

from .server import read_stream, served

DELEGATE = "/tool task " + json.dumps(
    {"description": "edit", "prompt": "$ echo from the web >> a.txt", "isolation": "worktree"}
)


async def test_a_web_sessions_child_in_a_worktree_returns_its_diff(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    async with served(tmp_path / "data") as web:
        created = await web.client.post("/api/sessions", json={"cwd": str(repo)})
        assert created.status_code == 201, created.text
        sid = str(created.json()["id"])
        sent = await web.client.post(f"/api/sessions/{sid}/prompt", json={"text": DELEGATE})
        assert sent.status_code == 202, sent.text
        stream = await read_stream(web.client, sid)
    [result] = [r["data"] for r in stream.records if r["type"] == "tool/result"]
    [kept] = sorted((repo / ".git" / WORKTREES_DIR).iterdir())
    content = str(result["content"])  # type: ignore[index]
    assert f"[worktree kept: {kept} (branch tether/{kept.name})" in content
    assert "+from the web" in content.splitlines()
    assert (repo / "a.txt").read_text() == "committed\nuncommitted\n"
