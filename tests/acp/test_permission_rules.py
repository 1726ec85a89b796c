"""Permission rules in ``tether acp``: an ask rule reaches the editor whatever the mode."""

from __future__ import annotations

from pathlib import Path

from tests.acp.harness import serving


async def test_an_ask_rule_is_put_to_the_editor_in_auto_mode_without_always(
    tmp_path: Path,
) -> None:
    rules = ("--mode", "auto", "--ask", "Bash(echo:*)", "--deny", "Bash(rm:*)")
    async with serving(tmp_path, *rules) as server:
        sid = await server.new_session()
        assert await server.prompt(sid, "bash echo hi") == "end_turn"
        [(asked_in, _call, options)] = server.client.permission_requests
        assert asked_in == sid
        assert "allow_always" not in {option.kind for option in options}
        assert server.client.text(sid).endswith("done: hi")

        assert await server.prompt(sid, "bash rm -rf nothing") == "end_turn"
        assert len(server.client.permission_requests) == 1  # a denied call is not asked
        assert "done: rm" not in server.client.text(sid)
        assert await server.prompt(sid, "bash ls") == "end_turn"  # no rule: auto mode runs it
        assert len(server.client.permission_requests) == 1
        ruled = [e["data"] for e in server.log(sid) if e["type"] == "permission/ruled"]
        assert [(r["decision"], r["rules"], r.get("answer")) for r in ruled] == [
            ("ask", ["Bash(echo:*)"], "allow"),
            ("deny", ["Bash(rm:*)"], None),
        ]


async def test_an_allow_rule_is_not_asked_in_ask_mode(tmp_path: Path) -> None:
    async with serving(tmp_path, "--allow", "Bash(echo:*)") as server:
        sid = await server.new_session()
        assert await server.prompt(sid, "bash echo fine") == "end_turn"
        assert server.client.permission_requests == []
        assert await server.prompt(sid, "bash ls") == "end_turn"  # ask mode asks the rest
        assert len(server.client.permission_requests) == 1
