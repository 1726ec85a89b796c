"""Permission rules in ``tether acp``: an ask rule reaches the editor whatever the mode, and
"allow always" keeps a rule named in its option."""

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


async def test_allow_always_keeps_the_rule_its_option_names_and_only_that(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        client = server.client
        sid = await server.new_session()
        client.answer = "allow-always"
        assert await server.prompt(sid, "bash echo hi") == "end_turn"
        [(_, _, options)] = client.permission_requests
        assert [(o.kind, o.name) for o in options] == [
            ("allow_once", "Allow"),
            ("allow_always", "Always allow Bash(echo:*)"),
            ("reject_once", "Reject"),
        ]
        # Covered: runs unasked. Not covered: asked, naming its own rule.
        assert await server.prompt(sid, "bash echo again -n") == "end_turn"
        assert len(client.permission_requests) == 1
        client.answer = "reject-once"
        assert await server.prompt(sid, "bash echo a; ls") == "end_turn"
        [*_, (_, _, options)] = client.permission_requests
        assert "Always allow Bash(ls:*)" in [o.name for o in options]
        # A line no rule may allow offers no "always", and says why.
        assert await server.prompt(sid, "bash echo $(id)") == "end_turn"
        [*_, (_, _, options)] = client.permission_requests
        assert "allow_always" not in {o.kind for o in options}
        assert options[0].name.startswith("Allow once (not always: the command line cannot")
        log = server.log(sid)
        granted = [e["data"] for e in log if e["type"] == "permission/granted"]
        assert granted == [{"rule": "Bash(echo:*)"}]
        ruled = [e["data"] for e in log if e["type"] == "permission/ruled"]
        assert [(r["decision"], r["rules"]) for r in ruled] == [("allow", ["Bash(echo:*)"])]
        assert client.text(sid).count("did not allow") == 2
