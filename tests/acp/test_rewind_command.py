"""``/rewind`` and ``/diff`` in an editor: a real ``tether acp`` on the offline model, real
files and real git."""

from __future__ import annotations

from pathlib import Path

import pytest
from acp.exceptions import RequestError
from acp.schema import AvailableCommandsUpdate

from tests.acp.harness import LEDGER, serving

OFFLINE = "plugins:\n" + LEDGER
"""The default composition (the offline model, the real ``bash``, snapshots) and the ledger."""


async def test_rewind_lists_diffs_refuses_an_outside_change_then_forces(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text("value = 1\n")
    async with serving(tmp_path, overlay=OFFLINE, model="offline") as server:
        sid = await server.new_session(work)
        client = server.client
        await client.wait_for(
            lambda: any(isinstance(u, AvailableCommandsUpdate) for u in client.of(sid))
        )
        offered = next(u for u in client.of(sid) if isinstance(u, AvailableCommandsUpdate))
        assert {"rewind", "diff"} <= {c.name for c in offered.available_commands}
        assert await server.prompt(sid, "/mode auto") == "end_turn"
        assert await server.prompt(sid, "$ sed -i s/1/2/ app.py && echo made > made.txt") == (
            "end_turn"
        )
        assert (work / "app.py").read_text() == "value = 2\n"

        assert await server.prompt(sid, "/rewind") == "end_turn"
        assert "1  $ sed -i s/1/2/ app.py" in client.text(sid)

        assert await server.prompt(sid, "/diff 1") == "end_turn"
        shown = client.text(sid)
        assert "-value = 1" in shown and "+value = 2" in shown and "+made" in shown

        (work / "made.txt").write_text("edited by hand\n")
        with pytest.raises(RequestError) as refused:
            await server.prompt(sid, "/rewind 1 code")
        assert "made.txt" in str(refused.value) and "with force" in str(refused.value)
        assert (work / "app.py").read_text() == "value = 2\n"

        assert await server.prompt(sid, "/rewind 1 code force") == "end_turn"
        assert (work / "app.py").read_text() == "value = 1\n"
        assert not (work / "made.txt").exists()
        assert "back to the start of turn 1" in client.text(sid)
        assert server.log(sid)[-1]["data"]["moment"] == "rewound"


async def test_a_conversation_rewind_stores_a_branch_to_load(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with serving(tmp_path, overlay=OFFLINE, model="offline") as server:
        sid = await server.new_session(work)
        assert await server.prompt(sid, "/mode auto") == "end_turn"
        assert await server.prompt(sid, "$ echo one > one.txt") == "end_turn"
        assert await server.prompt(sid, "/rewind 1 conversation") == "end_turn"
        said = server.client.text(sid)
        assert f"a branch of {sid} before turn 1" in said
        branch = said.split("load session ")[1].split()[0]
        loaded = await server.conn.load_session(cwd=str(work), session_id=branch, mcp_servers=[])
        assert loaded is not None
        assert (work / "one.txt").exists()  # the conversation only: the files stay
