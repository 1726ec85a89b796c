"""User hooks in ``tether acp``: configured in the user's ``tether.yml``, run as real
processes for an editor's session (``SessionStart``, ``Stop``, ``SessionEnd``)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.acp.harness import serving
from tests.cli.test_hook_events import asking_hook, on, read, recording_hook


async def test_an_editor_session_runs_its_start_stop_and_end_hooks(tmp_path: Path) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    start = recording_hook(tmp_path, "start", "print('remember the style guide')\n")
    body = "if calls == 0:\n    print('bash echo continued', file=sys.stderr)\n    sys.exit(2)\n"
    stop = recording_hook(tmp_path, "stop", body)
    end = recording_hook(tmp_path, "end")
    hooks = {**on("SessionStart", start), **on("Stop", stop), **on("SessionEnd", end)}
    row = {"id": "hooks", "config": {"hooks": hooks}}
    (home / "tether.yml").write_text(json.dumps({"plugins": [row]}))
    async with serving(tmp_path, home=home) as server:
        sid = await server.new_session(cwd=work)
        assert [e["source"] for e in read(tmp_path, "start")] == ["startup"]
        assert await server.prompt(sid, "bash echo first") == "end_turn"
        # The Stop hook's reason was the model's next input: the turn went on.
        assert server.client.text(sid).endswith("done: continued")
        assert [e["stop_hook_active"] for e in read(tmp_path, "stop")] == [False, True]
        fed = [e["data"] for e in server.log(sid) if e["type"] == "user/message"]
        assert "remember the style guide" in json.dumps(fed[0]["content"])
        assert [m.get("source") for m in fed] == ["hook", "user", "hook"]
        assert read(tmp_path, "end") == []
        await server.close_stdin()
    (ended,) = read(tmp_path, "end")
    assert ended["session_id"] == sid and ended["hook_event_name"] == "SessionEnd"
    assert ended["reason"] == "other"  # an editor that goes away: no Claude Code reason fits


async def test_a_hook_that_asks_is_named_with_its_reason_in_the_editors_question(
    tmp_path: Path,
) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    ask = asking_hook(tmp_path)
    row = {"id": "hooks", "config": {"hooks": on("PreToolUse", ask, matcher="Bash")}}
    (home / "tether.yml").write_text(json.dumps({"plugins": [row]}))
    async with serving(tmp_path, home=home) as server:
        sid = await server.new_session(cwd=work)
        assert await server.prompt(sid, "bash touch asked") == "end_turn"
        ((_, call, _),) = server.client.permission_requests
        first = (call.content or [])[0]
        text = getattr(first.content, "text", "")
        assert f"asked by the PreToolUse hook {ask!r}: touching needs a look" in text
    assert (work / "asked").exists()  # the editor allowed it once
