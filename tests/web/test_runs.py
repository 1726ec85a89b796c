"""``POST /api/runs`` of `tether web`: submit a run to the PostgreSQL queue over HTTP.

A real ``tether worker`` process runs what the web app queued; the request
needs the access token like the rest of the API.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import postgres
from tests.persist.test_run_queue import Fleet, stop

from .server import served


@pytest.fixture(name="fleet")
def _fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fleet]:
    fleet = Fleet(tmp_path)
    monkeypatch.setenv("TETHER_DATABASE_URL", postgres.URL)
    monkeypatch.setenv("TETHER_DATABASE_SCHEMA", postgres.schema_of(tmp_path))
    monkeypatch.setenv("TETHER_HOST_ID", "webhost")
    try:
        yield fleet
    finally:
        fleet.db.close()


@pytest.mark.timeout(120)
async def test_a_run_submitted_over_http_is_run_by_a_worker(fleet: Fleet, tmp_path: Path) -> None:
    async with served(tmp_path / "web") as web:
        body = {"task": "append a line", "cwd": str(tmp_path), "model": "effect", "priority": 2}
        answer = await web.client.post("/api/runs", json=body)
        assert answer.status_code == 201, answer.text
        sid = answer.json()["id"]
        assert answer.json() == {"id": sid, "state": "queued"}
        stored = fleet.run(sid)
        assert (stored.task, stored.cwd, stored.priority, stored.model) == (
            "append a line",
            str(tmp_path),
            2,
            "effect",
        )
        worker = await asyncio.to_thread(fleet.worker, "w1")
        try:
            while True:
                run = (await web.client.get(f"/api/runs/{sid}")).json()
                if run["state"] == "done":
                    break
                await asyncio.sleep(0.05)
        finally:
            await asyncio.to_thread(stop, worker)
        assert (run["id"], run["worker"], run["outcome"]) == (sid, f"w1:{worker.pid}", "completed")
        session = (await web.client.get(f"/api/sessions/{sid}")).json()
        assert session["id"] == sid


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"cwd": "/"}, "task must be a non-empty string"),
        ({"task": "x", "cwd": "rel"}, "cwd must be an absolute path, got 'rel'"),
        ({"task": "x", "cwd": "/", "priority": "high"}, "priority must be a whole number"),
        ({"task": "x", "cwd": "/", "priority": 2**40}, "priority must be a whole number"),
        ({"task": "x", "cwd": "/", "max_attempts": 0}, "max_attempts must be a whole number"),
        ({"task": "x", "cwd": "/", "queue": ""}, "queue must be a non-empty string"),
    ],
)
async def test_a_bad_run_request_is_refused_in_one_line_and_nothing_is_queued(
    fleet: Fleet, tmp_path: Path, body: dict[str, object], error: str
) -> None:
    async with served(tmp_path / "web") as web:
        answer = await web.client.post("/api/runs", json=body)
        assert answer.status_code == 400
        assert answer.json()["error"].startswith(error)
        assert (await web.client.get("/api/runs/20261206-000000-00000000")).status_code == 404
        async with httpx.AsyncClient(base_url=web.base) as stranger:
            unauthorized = await stranger.post("/api/runs", json={"task": "x", "cwd": "/"})
        assert unauthorized.status_code == 401
    assert fleet.db.runs.list(["queued", "running"]) == []


async def test_without_postgresql_there_is_no_run_queue(tmp_path: Path) -> None:
    async with served(tmp_path / "web") as web:
        answer = await web.client.post("/api/runs", json={"task": "x", "cwd": "/"})
        assert answer.status_code == 404
        assert answer.json()["error"].startswith("no run queue here: it lives in PostgreSQL")
