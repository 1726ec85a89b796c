"""User hooks behind ``tether web``: a ``Stop`` hook keeps a page's turn going, and a
``UserPromptSubmit`` hook sees the prompt, with real hook processes."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_hook_events import asking_hook, on, read, recording_hook
from tests.web.server import read_stream, served
from tests.web.test_api import _create, _prompt


async def test_a_stop_hook_keeps_a_web_turn_going_once(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    said = "{'decision': 'block', 'reason': '$ echo from-the-hook'}"
    stop = recording_hook(tmp_path, "stop", f"if calls == 0:\n    print(json.dumps({said}))\n")
    prompt = recording_hook(tmp_path, "prompt")
    hooks = {**on("Stop", stop), **on("UserPromptSubmit", prompt)}
    overlay = {"plugins": [{"id": "hooks", "config": {"hooks": hooks}}]}
    async with served(tmp_path / "data", overlays=[overlay]) as web:
        session_id = await _create(web, tmp_path / "work")
        await _prompt(web, session_id, "$ echo from-the-page")
        got = await read_stream(web.client, session_id)
    results = [str(r["data"]) for r in got.records if r["type"] == "tool/result"]
    assert len(results) == 2
    assert "from-the-page" in results[0] and "from-the-hook" in results[1]
    assert [r["data"]["reason"]["kind"] for r in got.records if r["type"] == "turn/end"] == [  # type: ignore[index]
        "completed"
    ]
    assert [e["stop_hook_active"] for e in read(tmp_path, "stop")] == [False, True]
    assert [e["prompt"] for e in read(tmp_path, "prompt")] == ["$ echo from-the-page"]


async def test_a_hook_that_asks_is_named_with_its_reason_in_the_pages_question(
    tmp_path: Path,
) -> None:
    (tmp_path / "work").mkdir()
    ask = asking_hook(tmp_path)
    hooks = on("PreToolUse", ask, matcher="Bash")
    overlay = {"plugins": [{"id": "hooks", "config": {"hooks": hooks}}]}
    async with served(tmp_path / "data", overlays=[overlay]) as web:
        session_id = await _create(web, tmp_path / "work")
        await _prompt(web, session_id, "$ touch asked")
        asked = await read_stream(web.client, session_id, until=None, until_state=True)
        (question,) = asked.states[-1]["questions"]  # type: ignore[misc]
        wanted = f"asked by the PreToolUse hook {ask!r}: touching needs a look"
        assert question["asked_by"] == wanted
        await web.client.post(
            f"/api/sessions/{session_id}/questions/{question['id']}", json={"allow": True}
        )
        await read_stream(web.client, session_id)
    assert (tmp_path / "work" / "asked").exists()
