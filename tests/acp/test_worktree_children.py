"""Over ACP, a ``task`` with ``isolation: worktree`` runs its child in a git worktree it owns
(real git): the editor's session gets the child's diff in the call's result, and the
repository the editor opened is left as it was."""

from __future__ import annotations

import json
from pathlib import Path

from tests.acp.harness import serving
from tests.plugins.test_worktrees import make_repo
from tether.rewind.worktree import WORKTREES_DIR

DELEGATE = "/tool task " + json.dumps(
    {"description": "edit", "prompt": "$ echo from acp >> a.txt", "isolation": "worktree"}
)


async def test_an_editors_child_in_a_worktree_returns_its_diff(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    async with serving(tmp_path, overlay="plugins:\n", model="offline") as server:
        sid = await server.new_session(cwd=repo)
        await server.conn.set_session_mode(mode_id="auto", session_id=sid)
        assert await server.prompt(sid, DELEGATE) == "end_turn"
        [result] = [e["data"] for e in server.log(sid) if e["type"] == "tool/result"]
    [kept] = sorted((repo / ".git" / WORKTREES_DIR).iterdir())
    content = str(result["content"])
    assert f"[worktree kept: {kept} (branch tether/{kept.name})" in content
    assert "+from acp" in content.splitlines()
    assert (repo / "a.txt").read_text() == "committed\nuncommitted\n"
