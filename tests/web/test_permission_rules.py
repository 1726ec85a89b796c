"""Permission rules behind ``tether web``: an ask rule is a question card in auto mode, and
"always allow" keeps the rule its button names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.web.server import read_stream, served
from tests.web.test_api import _create, _prompt

RULES = {
    "plugins": [{"id": "permissions", "config": {"ask": ["Bash(echo:*)"], "deny": ["Bash(rm:*)"]}}]
}


async def test_an_ask_rule_is_a_question_in_auto_mode_and_a_deny_rule_is_not_asked(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, mode="auto", overlays=[RULES]) as web:
        session_id = await _create(web, tmp_path, mode="auto")
        await _prompt(web, session_id, "$ echo ruled-run")
        asked = await read_stream(web.client, session_id, until=None, until_state=True)
        (question,) = asked.states[-1]["questions"]  # type: ignore[misc]
        assert question["tool"] == "bash" and question["always"] is None
        answered = await web.client.post(
            f"/api/sessions/{session_id}/questions/{question['id']}", json={"allow": True}
        )
        assert answered.status_code == 200
        got = await read_stream(web.client, session_id)
        (result,) = [r for r in got.records if r["type"] == "tool/result"]
        assert "ruled-run" in str(result["data"]) and not result["data"]["is_error"]  # type: ignore[index]

        (tmp_path / "keep").write_text("kept\n")
        await _prompt(web, session_id, "$ rm keep")
        got = await read_stream(web.client, session_id, after=got.ids[-1])
        (result,) = [r for r in got.records if r["type"] == "tool/result"]
        assert "denies this call (Bash(rm:*))" in str(result["data"])
        assert (tmp_path / "keep").exists()
        ruled = [r["data"] for r in got.records if r["type"] == "permission/ruled"]
        assert ruled == [
            {"call": ruled[0]["call"], "tool": "bash", "decision": "deny", "rules": ["Bash(rm:*)"]}
        ]


async def _question(web: Any, session_id: str, after: str | None) -> dict[str, Any]:
    """The one question open in the session's page once a state after ``after`` shows it."""
    asked = await read_stream(web.client, session_id, until=None, until_state=True, after=after)
    (question,) = asked.states[-1]["questions"]  # type: ignore[misc]
    return question  # type: ignore[no-any-return]


async def test_always_keeps_the_rule_its_button_names_and_a_hidden_command_gets_none(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, mode="ask") as web:
        session_id = await _create(web, tmp_path, mode="ask")
        base = f"/api/sessions/{session_id}/questions"
        await _prompt(web, session_id, "$ echo one")
        question = await _question(web, session_id, None)
        assert question["always"] == "Always allow Bash(echo:*)"
        await web.client.post(f"{base}/{question['id']}", json={"allow": True, "always": True})
        got = await read_stream(web.client, session_id)
        # A line adding a command the rule does not cover is asked, naming that rule only.
        await _prompt(web, session_id, "$ echo two; ls")
        question = await _question(web, session_id, got.ids[-1])
        assert question["always_rules"] == ["Bash(ls:*)"]
        await web.client.post(f"{base}/{question['id']}", json={"allow": False})
        got = await read_stream(web.client, session_id, after=got.ids[-1])
        # A line holding $( … ) offers no "always" and says why; asking for it is refused.
        await _prompt(web, session_id, "$ echo $(id)")
        question = await _question(web, session_id, got.ids[-1])
        assert question["always"] is None and question["always_rules"] == []
        assert "cannot be judged by a rule" in question["not_always"]
        url = f"{base}/{question['id']}"
        refused = await web.client.post(url, json={"allow": True, "always": True})
        assert refused.status_code == 400
        assert (await web.client.post(url, json={"allow": False})).status_code == 200
        records = (await read_stream(web.client, session_id)).records
        grants = [r["data"] for r in records if r["type"] == "permission/granted"]
        assert grants == [{"rule": "Bash(echo:*)"}]
