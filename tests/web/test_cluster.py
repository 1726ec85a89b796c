"""`tether web` on PostgreSQL beside another tether host: a session live on that host is
listed with its holder, refused a prompt naming the host, followed live from storage
to its end, and stopped there by the page's Stop (the cross-host cancel)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests import postgres
from tests.persist.test_cluster import Cluster, cluster  # noqa: F401

from .server import read_stream, served


async def test_a_session_live_on_another_host_is_shown_refused_followed_and_stopped_there(
    cluster: Cluster,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in {
        "TETHER_DATABASE_URL": postgres.URL,
        "TETHER_DATABASE_SCHEMA": cluster.schema,
        "TETHER_HOST_ID": "webhost",
    }.items():
        monkeypatch.setenv(name, value)
    process, sid = await asyncio.to_thread(cluster.slow_turn, "hostA")
    try:
        holder = {"host": "hostA", "pid": process.pid}
        shown = await asyncio.to_thread(cluster.run, "hostB", "sessions", "show", sid)
        assert f"session {sid} is open on host hostA (pid {process.pid})" in shown.stderr
        async with served(tmp_path / "web") as web:
            rows = (await web.client.get("/api/sessions")).json()["sessions"]
            (row,) = [r for r in rows if r["id"] == sid]
            assert row["live"] == "elsewhere" and row["holder"] == holder
            info = (await web.client.get(f"/api/sessions/{sid}")).json()
            assert info["live"] == "elsewhere" and info["holder"] == holder

            refused = await web.client.post(f"/api/sessions/{sid}/prompt", json={"text": "hi"})
            assert refused.status_code == 409
            assert refused.json()["holder"] == holder
            assert "live on host hostA" in refused.json()["error"]

            following = asyncio.ensure_future(read_stream(web.client, sid))
            while web.hub.follows.followers(sid) != 1:  # state outside the log
                assert not following.done(), following
                await asyncio.sleep(0.01)
            stops = await asyncio.gather(
                *(web.client.post(f"/api/sessions/{sid}/cancel") for _ in range(5))
            )
            assert {s.status_code for s in stops} == {202}
            sent = [s.json() for s in stops if s.json()["cancelled"]]
            assert sent == [{"cancelled": True, "holder": holder}]  # one cancel sent

            got = await asyncio.wait_for(following, 30)
            assert [r["seq"] for r in got.records] == list(range(len(got.records)))
            assert got.records[-1]["type"] == "turn/end"
            assert got.records[-1]["data"]["reason"] == {"kind": "aborted", "cause": "user"}  # type: ignore[index]
            # The log's records as stored; what the page adds (an answer's html, a turn's
            # outcome) is beside them.
            logged = [{k: r[k] for k in ("type", "seq", "time", "data")} for r in got.records]
            assert logged == cluster.records(sid)[: len(got.records)]
        await asyncio.to_thread(process.communicate, timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            await asyncio.to_thread(process.communicate, timeout=30)
