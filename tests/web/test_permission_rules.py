"""Permission rules behind ``tether web``: an ask rule is a question card in auto mode."""

from __future__ import annotations

from pathlib import Path

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
