"""The sessions listing: search in prompts, filters by directory and state, sorts, and each
session's context and cost, folded once per change of its log."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.cli.test_commands import session_id, tether
from tests.web.server import Served, read_stream, served
from tests.web.test_api import _create, _prompt

PRICED = {
    "plugins": [
        {
            "id": "llm",
            "config": {
                "models": {
                    "offline": {
                        "name": "Offline",
                        "context_window": 100_000,
                        "prices": {"input": 2.0, "output": 10.0},
                    }
                }
            },
        }
    ]
}
"""Prices and a context window for the offline model."""


async def _listed(web: Served, **params: str) -> dict[str, Any]:
    response = await web.client.get("/api/sessions", params=params)
    assert response.status_code == 200, response.text
    listing: dict[str, Any] = response.json()
    return listing


async def _turn(web: Served, session_id: str, text: str) -> None:
    await _prompt(web, session_id, text)
    await read_stream(web.client, session_id, until="turn/end", after=-1)


async def test_a_listing_filters_by_directory_state_and_a_prompt_and_sorts_by_cost(
    tmp_path: Path,
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    async with served(tmp_path / "data", overlays=[PRICED]) as web:
        small = await _create(web, one)
        await _turn(web, small, "$ echo small")
        large = await _create(web, two)
        await _turn(web, large, "$ echo large")
        await _turn(web, large, "a later prompt about pelicans " + "word " * 400)
        listing = await _listed(web)
        assert listing["pending"] == 0 and listing["total"] == 2
        assert listing["directories"] == sorted([str(one), str(two)])
        rows = {row["id"]: row for row in listing["sessions"]}
        assert rows[large]["cost"] > rows[small]["cost"] > 0
        assert rows[large]["currency"] == "USD"
        context = rows[large]["context"]
        assert context["window"] == 100_000 and context["used"] > rows[small]["context"]["used"]
        assert [r["state"] for r in listing["sessions"]] == ["live", "live"]

        found = await _listed(web, q="PELICANS")  # a prompt, not the title
        assert [row["id"] for row in found["sessions"]] == [large]
        assert [r["id"] for r in (await _listed(web, cwd=str(one)))["sessions"]] == [small]
        by_cost = await _listed(web, sort="cost")
        assert [row["id"] for row in by_cost["sessions"]] == [large, small]
        recent = await _listed(web, sort="activity")
        assert [row["id"] for row in recent["sessions"]] == [large, small]
        await _turn(web, small, "$ echo again")  # now the most recent, still the cheapest
        assert [r["id"] for r in (await _listed(web))["sessions"]] == [small, large]
        assert [r["id"] for r in (await _listed(web, sort="cost"))["sessions"]] == [large, small]
        assert (await _listed(web, state="idle"))["sessions"] == []
        assert len((await _listed(web, state="live"))["sessions"]) == 2
        limited = await _listed(web, limit="1")
        assert (len(limited["sessions"]), limited["total"]) == (1, 2)
        for bad in ({"state": "asleep"}, {"sort": "size"}, {"limit": "0"}):
            response = await web.client.get("/api/sessions", params=bad)
            assert response.status_code == 400 and "error" in response.json()


async def test_a_stored_session_is_listed_idle_with_the_figures_of_its_log(
    tmp_path: Path,
) -> None:
    async with served(tmp_path / "data", overlays=[PRICED]) as web:
        session_id = await _create(web, tmp_path)
        await _turn(web, session_id, "$ echo stored")
        live = (await _listed(web))["sessions"][0]
    async with served(tmp_path / "data", overlays=[PRICED]) as web:
        listing = await _listed(web)
        (row,) = listing["sessions"]
        assert row["state"] == "idle" and row["live"] is None
        assert (row["cost"], row["context"]) == (live["cost"], live["context"])
        assert (await _listed(web, q="echo stored"))["total"] == 1
        assert (await _listed(web, state="idle"))["total"] == 1
        assert (await _listed(web, state="elsewhere"))["total"] == 0


async def test_the_model_and_the_mode_are_switched_logged_and_obeyed(tmp_path: Path) -> None:
    async with served(tmp_path / "data", overlays=[PRICED]) as web:
        session_id = await _create(web, tmp_path, mode="auto")
        config = f"/api/sessions/{session_id}/config"
        switched = await web.client.post(config, json={"option": "mode", "value": "ask"})
        sandbox = {"mode": "workspace-write", "network": "network off"}
        answer = {"model": "offline", "mode": "ask", "sandbox": sandbox, "changed": True}
        assert switched.json() == answer
        again = await web.client.post(config, json={"option": "mode", "value": "ask"})
        assert again.json()["changed"] is False  # logged once
        await _prompt(web, session_id, "$ echo asked-now")
        asked = await read_stream(web.client, session_id, until=None, until_state=True)
        (question,) = asked.states[-1]["questions"]  # type: ignore[misc]
        assert question["tool"] == "bash"  # ask mode: the call waits for an answer
        # The state with the question may come before the records: they are read anew.
        logged = await read_stream(web.client, session_id, until="turn/start")
        configs = [r["data"] for r in logged.records if r["type"] == "session/config"]
        assert {"option": "mode", "value": "ask"} in configs
        await web.client.post(
            f"/api/sessions/{session_id}/questions/{question['id']}", json={"allow": True}
        )
        await read_stream(web.client, session_id, until="turn/end")

        usage = (await web.client.get(f"/api/sessions/{session_id}/usage")).json()
        assert usage["context"]["window"] == 100_000 and usage["context"]["used"] > 0
        assert usage["cost"] > 0 and usage["currency"] == "USD"
        model = await web.client.post(config, json={"option": "model", "value": "offline:second"})
        assert model.json()["model"] == "offline:second"
        shown = (await web.client.get(f"/api/sessions/{session_id}")).json()
        assert (shown["model"], shown["mode"]) == ("offline:second", "ask")
        usage = (await web.client.get(f"/api/sessions/{session_id}/usage")).json()
        assert usage["context"]["window"] is None  # the new model's: the settings give none
        for bad in (
            {"option": "mode", "value": "reckless"},
            {"option": "model", "value": "nowhere:model"},
            {"option": "sandbox", "value": "wide-open"},
            {"option": "sandbox"},
            {"option": "model", "value": 3},
            {"option": "colour", "value": "blue"},
        ):
            refused = await web.client.post(config, json=bad)
            assert refused.status_code == 400 and "error" in refused.json(), bad
        narrowed = await web.client.post(config, json={"option": "sandbox", "value": "read-only"})
        assert narrowed.json()["sandbox"]["mode"] == "read-only"
        shown = (await web.client.get(f"/api/sessions/{session_id}")).json()
        assert shown["sandbox"]["mode"] == "read-only"
        unknown = await web.client.post(
            "/api/sessions/no-such/config", json={"option": "mode", "value": "ask"}
        )
        assert unknown.status_code == 404


async def test_the_listing_follows_appends_forks_and_deletes_made_by_other_processes(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"

    async def cli(*args: str) -> str:
        done = await asyncio.to_thread(tether, home, *args, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return done.stderr

    async with served(home, overlays=[PRICED]) as web:
        first = session_id(await cli("run", "the first prompt"))
        (row,) = (await _listed(web))["sessions"]
        assert (row["id"], row["turns"]) == (first, 1) and row["cost"] > 0
        await cli("run", "--resume", first, "a later prompt about pelicans " + "word " * 200)
        (again,) = (await _listed(web))["sessions"]  # appended elsewhere: folded again
        assert again["turns"] == 2 and again["cost"] > row["cost"]
        assert again["context"]["used"] > row["context"]["used"]
        assert [r["id"] for r in (await _listed(web, q="pelicans"))["sessions"]] == [first]
        fork = session_id(await cli("run", "--fork", f"{first}", "a branch about herons"))
        rows = {r["id"]: r for r in (await _listed(web))["sessions"]}
        assert set(rows) == {first, fork}
        assert (rows[first]["turns"], rows[first]["cost"]) == (2, again["cost"])
        assert rows[fork]["turns"] == 3 and rows[fork]["cost"] > again["cost"]
        assert [r["id"] for r in (await _listed(web, q="herons"))["sessions"]] == [fork]
        await cli("sessions", "delete", first)
        listing = await _listed(web)
        assert [r["id"] for r in listing["sessions"]] == [fork] and listing["total"] == 1
        assert [r["id"] for r in (await _listed(web, q="pelicans"))["sessions"]] == [fork]
        await cli("sessions", "delete", fork)
        assert (await _listed(web))["sessions"] == []
        assert (await _listed(web, q="pelicans"))["total"] == 0
