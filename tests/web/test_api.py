"""The HTTP API of `tether web`, over a real loopback server: auth, CSRF, CSP, every
endpoint, and every kind of bad input."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.mounts import fill, tmpfs
from tether.agent import UserMessage
from tether.agent.events import CANCEL_REQUESTED
from tether.session.store import SESSIONS
from tether.tools.execute import ToolInvocation
from tether.tools.preview import ToolPreview
from tether.web.app import MAX_PROMPT_BYTES
from tether.web.security import CSP

from .server import TOKEN, Served, read_stream, served

API_ROUTES = [
    ("GET", "/api/models"),
    ("GET", "/api/sessions"),
    ("POST", "/api/sessions"),
    ("GET", "/api/sessions/{session_id}"),
    ("GET", "/api/sessions/{session_id}/events"),
    ("GET", "/api/sessions/{session_id}/usage"),
    ("POST", "/api/sessions/{session_id}/prompt"),
    ("GET", "/api/sessions/{session_id}/commands"),
    ("GET", "/api/sessions/{session_id}/resources"),
    ("POST", "/api/sessions/{session_id}/cancel"),
    ("POST", "/api/sessions/{session_id}/config"),
    ("GET", "/api/sessions/{session_id}/questions"),
    ("POST", "/api/sessions/{session_id}/questions/{question_id}"),
    ("POST", "/api/sessions/{session_id}/elicitations/{elicitation_id}"),
    ("GET", "/api/sessions/{session_id}/turns"),
    ("GET", "/api/sessions/{session_id}/diff"),
    ("POST", "/api/sessions/{session_id}/rewind"),
    ("POST", "/api/sessions/{session_id}/fork"),
    ("GET", "/api/sessions/{session_id}/tasks"),
    ("GET", "/api/sessions/{session_id}/tasks/{task_id}"),
    ("POST", "/api/sessions/{session_id}/tasks/{task_id}/kill"),
    ("POST", "/api/runs"),
    ("GET", "/api/runs/{session_id}"),
]


async def _create(web: Served, cwd: Path, **extra: object) -> str:
    response = await web.client.post("/api/sessions", json={"cwd": str(cwd), **extra})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def _prompt(web: Served, session_id: str, text: str, **extra: object) -> None:
    response = await web.client.post(
        f"/api/sessions/{session_id}/prompt", json={"text": text, **extra}
    )
    assert response.status_code == 202, response.text


async def _until(condition: object, within: float = 10.0) -> None:
    """Wait (bounded) for ``condition()`` to hold: state outside the log, seen from here."""
    deadline = asyncio.get_running_loop().time() + within
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


STATE_CHANGES = [(method, path) for method, path in API_ROUTES if method == "POST"]


def _paths(routes: list[tuple[str, str]], session_id: str) -> list[tuple[str, str]]:
    return [
        (
            method,
            path.format(
                session_id=session_id, question_id="q1", elicitation_id="e1", task_id="bash-1"
            ),
        )
        for method, path in routes
    ]


async def test_every_request_without_the_right_token_is_401_and_says_nothing(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as web:
        session_id = await _create(web, tmp_path)
        async with httpx.AsyncClient(base_url=web.base) as anonymous:
            paths = [*_paths(API_ROUTES, session_id), ("GET", "/api/openapi.json")]
            wrong_query = {"token": "wrong"}
            for bad in ({}, {"Authorization": "Bearer wrong"}):
                for method, path in paths:
                    response = await anonymous.request(method, path, headers=bad)
                    assert response.status_code == 401, (method, path, bad)
                    assert session_id not in response.text
                    assert response.headers["content-security-policy"] == CSP
                    with_query = await anonymous.request(method, path, params=wrong_query)
                    assert with_query.status_code == 401, (method, path)
            assert (await anonymous.get("/?token=wrong")).status_code == 401


async def test_a_cookie_never_carries_the_token_and_opens_nothing(tmp_path: Path) -> None:
    """Browsers send a host's cookies to every port of it: a server beside this one
    would receive them. So no cookie is set, and none is a credential."""
    async with served(tmp_path) as web, httpx.AsyncClient(base_url=web.base) as browser:
        session_id = await _create(web, tmp_path)
        before = (await web.client.get(f"/api/sessions/{session_id}")).json()["events"]
        entered = await browser.get(f"/s/{session_id}?token={TOKEN}&keep=1")
        assert entered.status_code == 200 and "set-cookie" not in entered.headers
        assert not browser.cookies
        port = web.base.rpartition(":")[2]
        # Everything a server on another port of this host could have received
        # from the browser before: the token cookie and the CSRF cookie.
        stolen = f"tether_token_{port}={TOKEN}; tether_csrf_{port}=c; tether_token={TOKEN}"
        headers = {"Cookie": stolen, "X-Tether-CSRF": "c", "Origin": web.base}
        for method, path in _paths(API_ROUTES, session_id):
            response = await browser.request(method, path, headers=headers, json={"text": "x"})
            assert response.status_code == 401, (method, path)
        shown = await web.client.get(f"/api/sessions/{session_id}")
        assert shown.json()["events"] == before  # no prompt ran


async def test_a_state_change_from_another_origin_is_refused_on_every_endpoint(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as web:
        session_id = await _create(web, tmp_path)
        before = (await web.client.get(f"/api/sessions/{session_id}")).json()["events"]
        port = int(web.base.rpartition(":")[2])
        for origin in ("http://evil.example", f"http://127.0.0.1:{port + 1}", "null"):
            for method, path in _paths(STATE_CHANGES, session_id):
                response = await web.client.request(
                    method, path, headers={"Origin": origin}, json={"cwd": str(tmp_path)}
                )
                assert response.status_code == 403, (origin, method, path)
                assert response.json() == {"error": "forbidden: cross-origin request refused"}
        shown = await web.client.get(f"/api/sessions/{session_id}")
        assert shown.json()["events"] == before
        same = await web.client.post(
            "/api/sessions", json={"cwd": str(tmp_path)}, headers={"Origin": web.base}
        )
        assert same.status_code == 201


def _raw_get(base: str, target: str) -> tuple[int, str | None]:
    """``GET target`` sent as it is (no client normalises it): the status and ``Location``."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", target)
        response = connection.getresponse()
        response.read()
        return response.status, response.getheader("location")
    finally:
        connection.close()


async def test_entering_with_the_token_never_redirects_anywhere(tmp_path: Path) -> None:
    async with served(tmp_path) as web:
        for target in (
            f"//evil.example/?token={TOKEN}",
            f"/\\evil.example/?token={TOKEN}",
            f"/%2F%2Fevil.example?token={TOKEN}",
            f"https://evil.example/?token={TOKEN}",
            f"/?token={TOKEN}&next=//evil.example",
            f"/?next=https://evil.example&token={TOKEN}",
        ):
            status, location = await asyncio.to_thread(_raw_get, web.base, target)
            assert location is None and status in (200, 404), (target, status, location)


async def test_the_pages_and_their_files_are_served_without_a_credential(
    tmp_path: Path,
) -> None:
    """They hold no data (the API does): the page's script sends the token."""
    async with served(tmp_path) as web, httpx.AsyncClient(base_url=web.base) as browser:
        page = await browser.get("/")
        assert page.status_code == 200
        assert '<script src="/static/sessions.js"' in page.text
        assert "<script>" not in page.text  # no inline script: the CSP forbids it
        assert page.headers["content-security-policy"] == CSP
        assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP
        static = await browser.get("/static/session.js")
        assert static.status_code == 200
        assert static.headers["content-security-policy"] == CSP
        assert (await browser.get("/s/x1")).status_code == 200


async def test_create_prompt_and_stream_a_bash_turn_then_list_and_show_it(tmp_path: Path) -> None:
    async with served(tmp_path) as web:
        models = (await web.client.get("/api/models")).json()
        assert "offline" in models["providers"] and models["modes"] == ["ask", "auto"]
        session_id = await _create(web, tmp_path, model="offline", mode="auto")
        await _prompt(web, session_id, "$ echo streamed-out")
        got = await read_stream(web.client, session_id)
        results = [r for r in got.records if r["type"] == "tool/result"]
        assert results and "streamed-out" in str(results[0]["data"])
        assert got.records[-1]["type"] == "turn/end"
        assert [r["seq"] for r in got.records] == list(range(len(got.records)))
        assert got.ids == sorted(got.ids) and got.ids[-1] == got.records[-1]["seq"]
        assert (got.states[0]["live"], got.states[0]["questions"]) == (True, [])
        listed = (await web.client.get("/api/sessions", params={"q": "streamed"})).json()
        assert [row["id"] for row in listed["sessions"]] == [session_id]
        assert listed["sessions"][0]["live"] == "here"
        assert listed["sessions"][0]["model"] == "offline"
        nothing = (await web.client.get("/api/sessions", params={"q": "nothing-like-it"})).json()
        assert (nothing["sessions"], nothing["total"]) == ([], 0)
        (used,) = (await web.client.get(f"/api/sessions/{session_id}/usage")).json()["turns"]
        assert used["turn"] == 1 and used["input_tokens"] > 0 and used["output_tokens"] > 0
        assert used["cost"] is None  # the offline model has no prices
        shown = (await web.client.get(f"/api/sessions/{session_id}")).json()
        assert shown["cwd"] == str(tmp_path) and shown["mode"] == "auto"
        assert shown["live"] == "here" and shown["holder"] == {"host": None, "pid": os.getpid()}


async def test_a_reconnect_with_last_event_id_continues_with_no_gap_and_no_duplicate(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as web:
        session_id = await _create(web, tmp_path)
        await _prompt(web, session_id, "$ echo one; echo two")
        whole = await read_stream(web.client, session_id)
        last = int(whole.records[-1]["seq"])  # type: ignore[call-overload]
        cut = last // 2
        rest = await read_stream(web.client, session_id, headers={"Last-Event-ID": str(cut)})
        assert [r["seq"] for r in rest.records] == list(range(cut + 1, last + 1))
        by_query = await read_stream(web.client, session_id, after=cut)
        assert by_query.records == rest.records
        # Connected at the end, then live: the next turn arrives whole, nothing twice.
        live = asyncio.ensure_future(
            read_stream(web.client, session_id, headers={"Last-Event-ID": str(last)})
        )
        await _until(lambda: web.hub.follows.followers(session_id) == 1)
        await _prompt(web, session_id, "$ echo three")
        got = await live
        seqs = [r["seq"] for r in got.records]
        assert seqs[0] == last + 1 and seqs == list(range(last + 1, last + 1 + len(seqs)))
        assert got.records[-1]["type"] == "turn/end"
        bad = await web.client.get(
            f"/api/sessions/{session_id}/events", headers={"Last-Event-ID": "x"}
        )
        assert bad.status_code == 400


async def test_unknown_sessions_are_404_and_ids_that_are_not_ids_are_400(tmp_path: Path) -> None:
    async with served(tmp_path) as web:
        session_id = await _create(web, tmp_path)
        for method, path in API_ROUTES:
            if "{session_id}" not in path:
                continue
            unknown = path.format(
                session_id="no-such-session", question_id="q1", elicitation_id="e1", task_id="t1"
            )
            response = await web.client.request(method, unknown, json={"text": "x", "allow": True})
            assert response.status_code == 404, (method, unknown, response.text)
            assert "error" in response.json()
            for bad_id in ("..", ".hidden", "a" * 200, "x%00y"):
                bad = path.format(
                    session_id=bad_id, question_id="q1", elicitation_id="e1", task_id="t1"
                )
                response = await web.client.request(method, bad, json={"text": "x"})
                assert response.status_code in (400, 404), (method, bad)
                assert "Traceback" not in response.text
        traversal = await web.client.get("/api/sessions/..%2F..%2Fetc%2Fpasswd")
        assert traversal.status_code == 404
        dots = await web.client.get("/api/sessions/..")
        assert dots.status_code in (400, 404)
        task = await web.client.get(f"/api/sessions/{session_id}/tasks/.hidden")
        assert task.status_code == 400
        no_question = await web.client.post(
            f"/api/sessions/{session_id}/questions/q99", json={"allow": True}
        )
        assert no_question.status_code == 404
        bad_cwd = await web.client.post("/api/sessions", json={"cwd": "relative/dir"})
        assert bad_cwd.status_code == 400
        bad_model = await web.client.post(
            "/api/sessions", json={"cwd": str(tmp_path), "model": "nowhere:x"}
        )
        assert bad_model.status_code == 400 and "nowhere" in bad_model.json()["error"]
        bad_mode = await web.client.post("/api/sessions", json={"cwd": str(tmp_path), "mode": "x"})
        assert bad_mode.status_code == 400
        not_json = await web.client.post(f"/api/sessions/{session_id}/prompt", content=b"{")
        assert not_json.status_code == 400


async def test_an_oversized_prompt_is_413_and_queues_nothing(tmp_path: Path) -> None:
    async with served(tmp_path) as web:
        session_id = await _create(web, tmp_path)
        events_before = len(web.hub.live_agent(session_id).session.events)  # type: ignore[union-attr]
        huge = "x" * (MAX_PROMPT_BYTES + 1)
        response = await web.client.post(f"/api/sessions/{session_id}/prompt", json={"text": huge})
        assert response.status_code == 413

        async def chunked() -> object:
            yield b'{"text": "'
            for _ in range(MAX_PROMPT_BYTES // 1024 + 1):
                yield b"y" * 1024
            yield b'"}'

        streamed = await web.client.post(f"/api/sessions/{session_id}/prompt", content=chunked())
        assert streamed.status_code == 413
        agent = web.hub.live_agent(session_id)
        assert agent is not None and len(agent.session.events) == events_before


def _tether_run(data_dir: Path, task: str, *options: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tether.cli.main",
            "--data-dir",
            str(data_dir),
            "run",
            *options,
            task,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TETHER_MODEL": "offline"},
    )


async def test_a_session_live_in_another_process_is_409_naming_it_followed_live_to_its_end(
    tmp_path: Path,
) -> None:
    finished = _tether_run(tmp_path, "$ echo earlier")
    await asyncio.to_thread(finished.communicate, timeout=30)
    gate = tmp_path / "gate"
    async with served(tmp_path) as web:
        (stored,) = (await web.client.get("/api/sessions")).json()["sessions"]
        assert stored["live"] is None
        other = _tether_run(
            tmp_path, f"$ while [ ! -e {gate} ]; do sleep 0.02; done; echo released-elsewhere"
        )
        try:

            async def other_live() -> str | None:
                rows = (await web.client.get("/api/sessions")).json()["sessions"]
                live = [r for r in rows if r["live"] == "elsewhere"]
                return str(live[0]["id"]) if live else None

            deadline = asyncio.get_running_loop().time() + 20
            held = await other_live()
            while held is None:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.05)
                held = await other_live()
            elsewhere = (
                await web.client.get("/api/sessions", params={"state": "elsewhere"})
            ).json()
            assert [row["id"] for row in elsewhere["sessions"]] == [held]
            refused = await web.client.post(f"/api/sessions/{held}/prompt", json={"text": "hi"})
            assert refused.status_code == 409
            assert refused.json()["holder"] == {"host": None, "pid": other.pid}
            assert f"live in process {other.pid}" in refused.json()["error"]
            stop = await web.client.post(f"/api/sessions/{held}/cancel")
            assert stop.status_code == 409  # no cross-host cancel without PostgreSQL
            # The stream follows the other process's session from its log, live, to its end.
            following = asyncio.ensure_future(read_stream(web.client, held))
            await _until(lambda: web.hub.follows.followers(held) == 1)
            gate.touch()
            got = await asyncio.wait_for(following, 30)
            assert [r["seq"] for r in got.records] == list(range(len(got.records)))
            results = [r for r in got.records if r["type"] == "tool/result"]
            assert "released-elsewhere" in str(results[-1]["data"])
            assert got.records[-1]["data"]["reason"] == {"kind": "completed"}  # type: ignore[index]
            assert got.ids[-1] == got.records[-1]["seq"]
        finally:
            gate.touch()
            other.terminate()
            await asyncio.to_thread(other.communicate, timeout=30)
        await _prompt(web, str(stored["id"]), "$ echo resumed-here")
        got = await read_stream(web.client, str(stored["id"]), after=0)
        turn_ends = [r for r in got.records if r["type"] == "turn/end"]
        assert turn_ends  # the first turn's end, from the stored log
        assert web.hub.owns(str(stored["id"]))


async def test_a_tab_on_an_idle_stored_session_follows_another_process_that_opens_it_later(
    tmp_path: Path,
) -> None:
    finished = _tether_run(tmp_path, "$ echo earlier")
    await asyncio.to_thread(finished.communicate, timeout=30)
    async with served(tmp_path) as web:
        (stored,) = (await web.client.get("/api/sessions")).json()["sessions"]
        session_id = str(stored["id"])
        before = await read_stream(web.client, session_id)
        last = before.records[-1]["seq"]
        following = asyncio.ensure_future(read_stream(web.client, session_id, after=last))
        await _until(lambda: web.hub.follows.followers(session_id) == 1)
        other = _tether_run(tmp_path, "$ echo opened-elsewhere", "--resume", session_id)
        _out, err = await asyncio.to_thread(other.communicate, timeout=30)
        assert other.returncode == 0, err
        got = await asyncio.wait_for(following, 30)  # the same stream, no reconnect
        assert [r["seq"] for r in got.records] == list(range(last + 1, last + 1 + len(got.records)))
        assert "opened-elsewhere" in str(got.records)
        assert got.records[-1]["data"]["reason"] == {"kind": "completed"}  # type: ignore[index]


async def test_a_tab_on_a_session_that_leaves_this_process_follows_it_in_storage(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as web:
        handle = await web.tether.agents.create(cwd=str(tmp_path))  # live here, not the app's
        session_id = handle.agent.id
        handle.agent.followup(UserMessage.text("$ echo here"))
        await handle.agent.when_idle()
        last = handle.agent.session.events[-1].seq
        following = asyncio.ensure_future(read_stream(web.client, session_id, after=last))
        await _until(lambda: web.hub.follows.followers(session_id) == 1)
        await handle.dispose()  # it leaves this process; the tab stays open
        other = _tether_run(tmp_path, "$ echo then-elsewhere", "--resume", session_id)
        _out, err = await asyncio.to_thread(other.communicate, timeout=30)
        assert other.returncode == 0, err
        got = await asyncio.wait_for(following, 30)
        assert [r["seq"] for r in got.records] == list(range(last + 1, last + 1 + len(got.records)))
        assert "then-elsewhere" in str(got.records)


async def test_a_client_gone_mid_stream_leaves_no_follower_and_the_turn_goes_on(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as web:
        session_id = await _create(web, tmp_path)
        await _prompt(web, session_id, "$ sleep 0.5; echo finished-anyway")
        first = await read_stream(web.client, session_id, until="tool/call")
        assert first.records
        await _until(lambda: web.hub.follows.followers(session_id) == 0)
        agent = web.hub.live_agent(session_id)
        assert agent is not None
        await agent.when_idle()
        end = agent.session.events[-1]
        assert end.type == "turn/end" and end.to_record()["data"]["reason"]["kind"] == "completed"  # type: ignore[index]
        assert "finished-anyway" in str([e.to_record() for e in agent.session.events])
        # A tab closed while its session is idle (nothing more to write) is gone too.
        idle = await read_stream(web.client, session_id)
        assert idle.records[-1]["type"] == "turn/end"
        await _until(lambda: web.hub.follows.followers(session_id) == 0)


async def test_a_hundred_stop_clicks_are_one_cancel_and_the_receipt_is_logged(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as web:
        session_id = await _create(web, tmp_path)
        cancels: list[object] = []
        web.tether.runtime.ctx.on(CANCEL_REQUESTED, lambda agent, cause: cancels.append(cause))
        await _prompt(web, session_id, "$ sleep 30")
        await read_stream(web.client, session_id, until="tool/call")
        answers = await asyncio.gather(
            *(web.client.post(f"/api/sessions/{session_id}/cancel") for _ in range(100))
        )
        assert {a.status_code for a in answers} == {202}
        assert sum(a.json()["cancelled"] for a in answers) == 1
        got = await read_stream(web.client, session_id)
        types = [r["type"] for r in got.records]
        assert "tool/stopped" in types
        receipt = got.records[types.index("tool/stopped")]["data"]
        assert receipt["cause"] == "user" and receipt["stopped"]  # type: ignore[index]
        assert got.records[-1]["data"]["reason"] == {"kind": "aborted", "cause": "user"}  # type: ignore[index]
        assert [str(c) for c in cancels] == ["user"]


async def test_background_tasks_are_shown_and_killed_only_for_their_session(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as web:
        owner = await _create(web, tmp_path)
        other = await _create(web, tmp_path)
        await _prompt(web, owner, "& echo tail-line; sleep 30")
        await read_stream(web.client, owner)
        (task,) = (await web.client.get(f"/api/sessions/{owner}/tasks")).json()["tasks"]
        assert task["status"] == "running" and "sleep 30" in task["command"]
        assert (await web.client.get(f"/api/sessions/{other}/tasks")).json() == {"tasks": []}
        task_id = task["id"]
        assert (await web.client.get(f"/api/sessions/{other}/tasks/{task_id}")).status_code == 404
        stolen = await web.client.post(f"/api/sessions/{other}/tasks/{task_id}/kill")
        assert stolen.status_code == 404
        assert (await web.client.get(f"/api/sessions/{owner}/tasks")).json()["tasks"][0][
            "status"
        ] == "running"

        async def tail() -> str:
            shown = await web.client.get(f"/api/sessions/{owner}/tasks/{task_id}")
            return str(shown.json()["stdout"])

        deadline = asyncio.get_running_loop().time() + 10
        while "tail-line" not in await tail():
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.02)
        killed = await web.client.post(f"/api/sessions/{owner}/tasks/{task_id}/kill")
        assert killed.status_code == 200
        assert killed.json()["task"]["status"] == "killed"
        assert killed.json()["task"]["stop"]["signals"]


async def test_an_asked_calls_preview_is_made_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    previewed: list[str] = []
    preview = ToolInvocation.preview

    async def counted(invocation: ToolInvocation) -> ToolPreview | None:
        if not invocation.previewed.holds(invocation.args, invocation.exec.cwd):
            previewed.append(invocation.tool_name)  # made now, not read from the memo
        return await preview(invocation)

    monkeypatch.setattr(ToolInvocation, "preview", counted)
    async with served(tmp_path, mode="ask") as web:
        session_id = await _create(web, tmp_path, mode="ask")
        await _prompt(web, session_id, "$ echo previewed-once")
        asked = await read_stream(web.client, session_id, until=None, until_state=True)
        (question,) = asked.states[-1]["questions"]  # type: ignore[misc]
        await web.client.post(
            f"/api/sessions/{session_id}/questions/{question['id']}", json={"allow": True}
        )
        await read_stream(web.client, session_id)
    assert previewed == ["bash"]


async def test_a_permission_question_is_answered_from_the_api(tmp_path: Path) -> None:
    async with served(tmp_path, mode="ask") as web:
        session_id = await _create(web, tmp_path, mode="ask")
        await _prompt(web, session_id, "$ echo allowed-run")
        asked = await read_stream(web.client, session_id, until=None, until_state=True)
        (question,) = asked.states[-1]["questions"]  # type: ignore[misc]
        assert question["tool"] == "bash" and question["arguments"]["command"] == "echo allowed-run"
        listed = (await web.client.get(f"/api/sessions/{session_id}/questions")).json()
        assert [q["id"] for q in listed["questions"]] == [question["id"]]
        bad = await web.client.post(
            f"/api/sessions/{session_id}/questions/{question['id']}", json={"allow": "yes"}
        )
        assert bad.status_code == 400
        answered = await web.client.post(
            f"/api/sessions/{session_id}/questions/{question['id']}", json={"allow": True}
        )
        assert answered.status_code == 200
        got = await read_stream(web.client, session_id)
        results = [r for r in got.records if r["type"] == "tool/result"]
        assert "allowed-run" in str(results[0]["data"])
        await _prompt(web, session_id, "$ echo refused-run")
        asked = await read_stream(
            web.client, session_id, until=None, until_state=True, after=got.ids[-1]
        )
        (question,) = asked.states[-1]["questions"]  # type: ignore[misc]
        await web.client.post(
            f"/api/sessions/{session_id}/questions/{question['id']}", json={"allow": False}
        )
        got = await read_stream(web.client, session_id, after=got.ids[-1])
        (result,) = [r for r in got.records if r["type"] == "tool/result"]
        assert result["data"]["is_error"] and "did not allow" in result["data"]["content"]  # type: ignore[index]


async def test_always_allow_keeps_a_rule_and_a_command_it_covers_then_runs_unasked(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, mode="ask") as web:
        session_id = await _create(web, tmp_path, mode="ask")
        await _prompt(web, session_id, "$ echo first-run")
        asked = await read_stream(web.client, session_id, until=None, until_state=True)
        (question,) = asked.states[-1]["questions"]  # type: ignore[misc]
        assert question["always"] == "Always allow Bash(echo:*)"
        assert question["always_rules"] == ["Bash(echo:*)"] and question["not_always"] is None
        url = f"/api/sessions/{session_id}/questions/{question['id']}"
        assert (await web.client.post(url, json={"allow": True, "always": 1})).status_code == 400
        answered = await web.client.post(url, json={"allow": True, "always": True})
        assert answered.status_code == 200
        got = await read_stream(web.client, session_id)
        grants = [r for r in got.records if r["type"] == "permission/granted"]
        assert [g["data"] for g in grants] == [{"rule": "Bash(echo:*)"}]
        (result,) = [r for r in got.records if r["type"] == "tool/result"]
        assert grants[0]["seq"] < result["seq"] and "first-run" in str(result["data"])
        await _prompt(web, session_id, "$ echo second-run")
        again = await read_stream(web.client, session_id, after=got.ids[-1])
        assert not any(state["questions"] for state in again.states)
        (result,) = [r for r in again.records if r["type"] == "tool/result"]
        assert "second-run" in str(result["data"]) and not result["data"]["is_error"]  # type: ignore[index]


async def test_the_openapi_document_describes_every_api_route(tmp_path: Path) -> None:
    async with served(tmp_path) as web:
        spec = (await web.client.get("/api/openapi.json")).json()
        assert spec["openapi"].startswith("3.")
        documented = {
            (method.upper(), path)
            for path, operations in spec["paths"].items()
            for method in operations
        }
        assert documented == set(API_ROUTES)
        for operations in spec["paths"].values():
            for operation in operations.values():
                assert operation["summary"] and operation["responses"]
        from tether.web.app import build_app

        app = build_app(web.tether.runtime.ctx, web.hub, "t", default_model=None)
        routes = {
            (method, route.path)
            for route in app._app.routes  # type: ignore[attr-defined]
            if getattr(route, "path", "").startswith("/api/") and route.path != "/api/openapi.json"
            for method in (route.methods or ()) - {"HEAD"}
        }
        assert routes == set(API_ROUTES)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_loopback_hosts_are_not_warned_about(host: str) -> None:
    from tether.cli.web import is_loopback

    assert is_loopback(host)
    assert not is_loopback("0.0.0.0")
    assert not is_loopback("192.0.2.1")


def test_a_port_in_use_is_one_line_and_exit_1(tmp_path: Path) -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        command = ["tether.cli.main", "--data-dir", str(tmp_path), "web", "--port", str(port)]
        done = subprocess.run(
            [sys.executable, "-m", *command],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and f"cannot listen on 127.0.0.1:{port}" in done.stderr


async def test_a_steered_prompt_joins_the_running_turn(tmp_path: Path) -> None:
    async with served(tmp_path) as web:
        session_id = await _create(web, tmp_path)
        await _prompt(web, session_id, "$ sleep 0.5; echo first")
        await read_stream(web.client, session_id, until="tool/call")
        await _prompt(web, session_id, "steered words", steer=True)
        got = await read_stream(web.client, session_id)  # up to the first turn's end
        prompts = [r for r in got.records if r["type"] == "user/message"]
        assert len(prompts) == 2 and "steered words" in str(prompts[1]["data"])


async def test_a_damaged_log_is_one_line_on_the_page_and_ends_its_stream(tmp_path: Path) -> None:
    from tests.persist.factory import event, header
    from tether.persist.backends import JsonlBackend

    async with served(tmp_path) as web:
        backend = JsonlBackend(tmp_path)
        backend.write(header("damaged"), [event(0), event(1), event(2)])
        path = backend.path("damaged")
        lines = path.read_bytes().split(b"\n")
        lines[2] = b'{"type":"assistant/chunk","seq":1,'  # cut short before the last line
        path.write_bytes(b"\n".join(lines))

        answer = await web.client.get("/api/sessions/damaged")
        assert answer.status_code == 500
        assert answer.json()["error"].startswith("session damaged cannot be read: ")
        assert "Traceback" not in answer.text
        url = "/api/sessions/damaged/events"
        async with web.client.stream("GET", url) as response:
            body = (await response.aread()).decode()
        # The stream says why once and ends, so the page stops reconnecting.
        assert "event: failed\n" in body and "cannot be read" in body
        assert "Traceback" not in body


async def test_a_prompt_the_page_was_told_failed_never_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with tmpfs(tmp_path / "home", size="512k") as home:
        async with served(home) as web:
            session_id = await _create(web, tmp_path)
            filler = fill(home)
            refused_text = "refused " + "x" * 20_000
            refused = await web.client.post(
                f"/api/sessions/{session_id}/prompt", json={"text": refused_text}
            )
            assert refused.status_code == 503, refused.text
            assert refused.json() == {
                "error": f"session {session_id}: the prompt could not be stored: "
                "No space left on device"
            }
            filler.unlink()
            await _prompt(web, session_id, "accepted")
            agent = web.hub.live_agent(session_id)
            assert agent is not None
            await agent.when_idle()
            await agent.ctx.service(SESSIONS).flush(agent.session)
        stored = [json.loads(line) for line in (home / "sessions" / f"{session_id}.jsonl").open()]
    prompts = [json.dumps(r["data"]) for r in stored if r.get("type") == "user/message"]
    assert len(prompts) == 1 and "accepted" in prompts[0]  # the refused one never ran
    answers = [json.dumps(r["data"]) for r in stored if r.get("type") == "assistant/message"]
    assert answers and not any("refused" in answer for answer in answers)
    # No turn was opened for it: the one turn is the accepted prompt's, and it completed.
    ends = [r["data"]["reason"] for r in stored if r.get("type") == "turn/end"]
    assert ends == [{"kind": "completed"}]
    # It was withdrawn in the log, so a resume does not run it either.
    splices = [r["data"] for r in stored if r.get("type") == "agent/inbox/spliced"]
    assert [s["op"] for s in splices] == ["insert", "discard", "insert", "claim"]
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


async def test_the_stream_shows_a_running_command_s_time_and_latest_output(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as web:
        session_id = await _create(web, tmp_path, model="offline", mode="auto")
        reading = asyncio.ensure_future(read_stream(web.client, session_id))
        await _until(lambda: web.hub.follows.followers(session_id) > 0)
        await _prompt(web, session_id, "$ for n in 1 2 3 4 5 6; do echo line-$n; sleep 0.5; done")
        got = await reading
        again = await read_stream(web.client, session_id, until=None, stop_at_seq=0)
    assert again.states[0]["progress"] == []  # its result ended the call's progress
    running = [p for state in got.states for p in state["progress"]]  # type: ignore[attr-defined]
    tails = ["\n".join(p["tail"]) for p in running]
    # While it ran: its latest lines (not all of them yet) and how long it had run.
    assert any("line-2" in tail and "line-6" not in tail for tail in tails), tails
    assert {p["name"] for p in running} == {"bash"}
    assert max(p["elapsed"] for p in running) >= 1
    assert len(running) <= 3 * 4 + 2  # about three seconds, at most four a second


def _mcp_overlay(timeout_ms: int = 60_000, **servers: list[str]) -> dict[str, object]:
    """The ``mcp`` plugin with stdio servers ``name=[script, *args]`` (Python scripts).
    They start with each session: a loaded machine starts Python and the SDK slowly."""
    config = {name: {"command": sys.executable, "args": argv} for name, argv in servers.items()}
    settings = {"servers": config, "startup_timeout_ms": timeout_ms}
    return {"plugins": [{"id": "mcp", "config": settings}]}


def _user_texts(records: list[dict[str, object]]) -> list[str]:
    return [
        str(block["text"])
        for record in records
        if record["type"] == "user/message"
        for block in record["data"]["content"]  # type: ignore[index]
    ]


async def test_a_servers_prompt_typed_as_a_slash_command_queues_what_the_server_answers(
    tmp_path: Path,
) -> None:
    from tests.mcp_client.support import SDK_SERVER

    async with served(tmp_path / "data", overlays=[_mcp_overlay(t=[SDK_SERVER])]) as web:
        session_id = await _create(web, tmp_path)
        url = f"/api/sessions/{session_id}/prompt"
        missing = await web.client.post(url, json={"text": "/mcp__t__review tone=dry"})
        assert missing.status_code == 400, missing.text
        assert missing.json()["error"] == "prompt 'review' needs topic"
        ran = await web.client.post(url, json={"text": "/mcp__t__review build tone=dry"})
        assert ran.status_code == 200, ran.text
        assert ran.json() == {
            "command": "mcp__t__review",
            "answer": "Sent prompt 'review' of MCP server 't' (1 message(s)).",
        }
        got = await read_stream(web.client, session_id)
    assert _user_texts(got.records) == ["Review build in a dry tone."]


async def test_a_mention_attaches_the_resource_and_one_that_cannot_be_refuses_the_prompt(
    tmp_path: Path,
) -> None:
    from tests.mcp_client.support import SDK_SERVER

    async with served(tmp_path / "data", overlays=[_mcp_overlay(t=[SDK_SERVER])]) as web:
        session_id = await _create(web, tmp_path)
        url = f"/api/sessions/{session_id}/prompt"
        refused = await web.client.post(url, json={"text": "look at @t:notes://logo"})
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"] == "@t:notes://logo not attached: not text (image/png)"
        sent = await web.client.post(url, json={"text": "what is in @t:notes://today?"})
        assert sent.status_code == 202, sent.text
        assert sent.json()["attached"] == ["attached @t:notes://today (1 line)"]
        got = await read_stream(web.client, session_id)
    assert _user_texts(got.records) == [
        "what is in @t:notes://today?",
        '<resource uri="notes://today">\nbuy milk\n</resource>',
    ]


async def test_the_commands_offer_a_servers_prompts_with_their_arguments(tmp_path: Path) -> None:
    from tests.mcp_client.support import SDK_SERVER

    async with served(tmp_path / "data", overlays=[_mcp_overlay(t=[SDK_SERVER])]) as web:
        session_id = await _create(web, tmp_path)
        answer = await web.client.get(f"/api/sessions/{session_id}/commands")
        assert answer.status_code == 200, answer.text
        commands = {c["name"]: c for c in answer.json()["commands"]}
        review = commands["mcp__t__review"]
        assert review["description"] == "Ask for a review of a topic."
        assert review["hint"] == "topic=… [tone=…]"
        assert [(a["name"], a["required"]) for a in review["arguments"]] == [
            ("topic", True),
            ("tone", False),
        ]
        unknown = await web.client.get("/api/sessions/no-such-session/commands")
        assert unknown.status_code == 404


async def test_resources_are_listed_by_server_and_a_server_that_fails_gives_its_error(
    tmp_path: Path,
) -> None:
    from tests.mcp_client.support import RAW_SERVER, SDK_SERVER

    overlay = _mcp_overlay(t=[SDK_SERVER], raw=[RAW_SERVER, "--resources"], plain=[RAW_SERVER])
    async with served(tmp_path / "data", overlays=[overlay]) as web:
        session_id = await _create(web, tmp_path)
        answer = await web.client.get(f"/api/sessions/{session_id}/resources")
        assert answer.status_code == 200, answer.text
        servers = answer.json()["servers"]
        assert [s["server"] for s in servers] == ["raw", "t"]  # plain offers no resources
        raw, t = servers
        assert raw["resources"] == [] and "Method not found: resources/list" in raw["error"]
        assert t["error"] is None
        by_uri = {r["uri"]: r for r in t["resources"]}
        assert set(by_uri) == {"notes://today", "notes://logo"}
        assert by_uri["notes://today"]["description"] == "Today's notes."
        assert by_uri["notes://today"]["mime_type"] == "text/plain"


async def test_a_server_that_does_not_answer_its_resource_listing_gives_that_as_its_error(
    tmp_path: Path,
) -> None:
    from tests.mcp_client.support import RAW_SERVER

    overlay = _mcp_overlay(1_000, stuck=[RAW_SERVER, "--stuck-resources", "--good"])
    async with served(tmp_path / "data", overlays=[overlay]) as web:
        session_id = await _create(web, tmp_path)
        answer = await web.client.get(f"/api/sessions/{session_id}/resources")
        assert answer.status_code == 200, answer.text
        assert answer.json()["servers"] == [
            {
                "server": "stuck",
                "resources": [],
                "error": "it did not answer resources/list within 1 s",
            }
        ]
