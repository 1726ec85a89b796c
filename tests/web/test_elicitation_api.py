"""A server's request for input over the web API: shown in the ``state`` messages, answered
with ``POST /api/sessions/{id}/elicitations/{eid}``, checked against its form first."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.mcp_client.support import HERE

from .server import read_stream, served
from .test_api import _create, _prompt

ASKING_SERVER = str(HERE / "asking_server.py")


async def test_an_answer_is_checked_against_the_form_before_it_reaches_the_server(
    tmp_path: Path,
) -> None:
    asking = {"ask": {"command": sys.executable, "args": [ASKING_SERVER]}}
    overlay = {"plugins": [{"id": "mcp", "config": {"servers": asking}}]}
    async with served(tmp_path / "data", overlays=[overlay]) as web:
        session_id = await _create(web, tmp_path)
        await _prompt(web, session_id, "/tool mcp__ask__deploy {}")
        asked = await read_stream(web.client, session_id, until=None, until_state=True)
        (open_,) = asked.states[-1]["elicitations"]  # type: ignore[misc]
        assert open_["server"] == "ask" and open_["mode"] == "form"
        region = open_["fields"][0]
        assert region["name"] == "region" and region["required"]
        assert [o["value"] for o in region["options"]] == ["eu", "us"]
        url = f"/api/sessions/{session_id}/elicitations/{open_['id']}"
        wrong = {"region": "mars", "replicas": 2, "confirm": True, "api_token": "t"}
        refused = await web.client.post(url, json={"action": "accept", "content": wrong})
        assert refused.status_code == 400 and "one of eu, us" in refused.json()["error"]
        unknown = await web.client.post(url, json={"action": "maybe"})
        assert unknown.status_code == 400
        filled = {**wrong, "region": "eu"}
        answered = await web.client.post(url, json={"action": "accept", "content": filled})
        assert answered.status_code == 200
        again = await web.client.post(url, json={"action": "decline"})
        assert again.status_code == 404  # answered: no longer open
        got = await read_stream(web.client, session_id)
    (result,) = [r["data"] for r in got.records if r["type"] == "tool/result"]
    assert json.loads(str(result["content"]).removeprefix("accept ")) == filled  # type: ignore[index]
