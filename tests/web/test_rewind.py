"""Rewind, fork and diff of a turn from the web page's API: a real `tether web` app on the
offline model, real files and real git."""

from __future__ import annotations

import asyncio
from pathlib import Path

from .server import Served, served
from .test_api import _until


async def _turn(web: Served, session_id: str, text: str) -> None:
    """Prompt ``text`` and return once its turn ended."""
    agent = web.hub.live_agent(session_id)
    before = 0 if agent is None else agent.session.last_turn
    response = await web.client.post(f"/api/sessions/{session_id}/prompt", json={"text": text})
    assert response.status_code == 202, response.text
    async with asyncio.timeout(20):
        while True:
            agent = web.hub.live_agent(session_id)
            session = None if agent is None else agent.session
            if session is not None and session.last_turn > before and session.open_turn is None:
                return
            await asyncio.sleep(0.01)


async def test_turns_diff_and_a_rewind_that_asks_before_overwriting_an_outside_change(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text("value = 1\n")
    async with served(tmp_path / "home") as web:
        created = await web.client.post("/api/sessions", json={"cwd": str(work)})
        sid = created.json()["id"]
        await _turn(web, sid, "$ sed -i s/1/2/ app.py && echo made > made.txt")
        base = f"/api/sessions/{sid}"

        turns = (await web.client.get(f"{base}/turns")).json()
        assert turns["snapshots"] is True
        assert [(t["turn"], t["snapshot"]) for t in turns["turns"]] == [(1, True)]
        assert turns["turns"][0]["prompt"].startswith("$ sed -i")

        diff = (await web.client.get(f"{base}/diff", params={"turn": 1})).json()
        assert "-value = 1" in diff["patch"] and "+made" in diff["patch"]
        missing = await web.client.get(f"{base}/diff", params={"turn": 7})
        assert missing.status_code == 400 and "no turn 7" in missing.json()["error"]

        (work / "made.txt").write_text("edited by hand\n")
        asked = await web.client.post(f"{base}/rewind", json={"turn": 1, "what": "code"})
        assert asked.status_code == 409
        assert asked.json()["outside"] == ["made.txt"]
        assert (work / "app.py").read_text() == "value = 2\n"

        forced = await web.client.post(
            f"{base}/rewind", json={"turn": 1, "what": "code", "force": True}
        )
        assert forced.status_code == 200, forced.text
        done = forced.json()
        assert done["branch"] is None and done["overwritten"] == ["made.txt"]
        assert sorted(done["written"] + done["deleted"]) == ["app.py", "made.txt"]
        assert (work / "app.py").read_text() == "value = 1\n"
        assert not (work / "made.txt").exists()

        bad = await web.client.post(f"{base}/rewind", json={"turn": 0})
        assert bad.status_code == 400 and "turn must be" in bad.json()["error"]
        odd = await web.client.post(f"{base}/rewind", json={"turn": 1, "what": "all"})
        assert odd.status_code == 400


async def test_rewind_both_and_fork_store_branches_the_parent_keeps_every_event(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with served(tmp_path / "home") as web:
        sid = (await web.client.post("/api/sessions", json={"cwd": str(work)})).json()["id"]
        await _turn(web, sid, "$ echo one > one.txt")
        await _turn(web, sid, "$ echo two > two.txt")
        base = f"/api/sessions/{sid}"
        events = (await web.client.get(base)).json()["events"]

        both = await web.client.post(f"{base}/rewind", json={"turn": 2})
        assert both.status_code == 200, both.text
        branch = both.json()["branch"]
        assert branch and branch != sid
        assert (work / "one.txt").exists() and not (work / "two.txt").exists()
        shown = (await web.client.get(f"/api/sessions/{branch}")).json()
        assert shown["id"] == branch
        assert (await web.client.get(base)).json()["events"] == events  # the branch logs it

        forked = await web.client.post(f"{base}/fork", json={"turn": 1})
        assert forked.status_code == 201, forked.text
        fork_id = forked.json()["id"]
        assert f"a branch of {sid} before turn 1" in forked.json()["lines"][0]
        turns = (await web.client.get(f"/api/sessions/{fork_id}/turns")).json()["turns"]
        assert turns == []  # made before turn 1: no turn copied
        gone = await web.client.post("/api/sessions/nosuchsession/fork", json={})
        assert gone.status_code == 404


async def test_a_rewind_while_a_turn_runs_is_refused_and_touches_nothing(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with served(tmp_path / "home") as web:
        sid = (await web.client.post("/api/sessions", json={"cwd": str(work)})).json()["id"]
        await _turn(web, sid, "$ echo one > one.txt")
        base = f"/api/sessions/{sid}"
        prompted = await web.client.post(f"{base}/prompt", json={"text": "$ sleep 30"})
        assert prompted.status_code == 202
        agent = web.hub.live_agent(sid)
        assert agent is not None
        await _until(lambda: agent.session.open_turn == 2)  # the sleep runs
        refused = await web.client.post(f"{base}/rewind", json={"turn": 1, "what": "code"})
        assert refused.status_code == 409 and "a turn is running" in refused.json()["error"]
        assert (work / "one.txt").exists()
        assert (await web.client.post(f"{base}/cancel")).status_code == 202
