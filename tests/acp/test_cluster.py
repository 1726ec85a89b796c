"""``tether acp`` as one host of several on PostgreSQL: a cancel from another host
answers the editor's pending prompt ``cancelled``, and everything lands in the database."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from acp.exceptions import RequestError

from tests import postgres
from tests.acp.harness import ROOT, AcpProcess, env_for, serving
from tether.persist.backends.lease import Lease, SessionLeasedError
from tether.persist.backends.postgres import PostgresBackend


async def test_a_cancel_from_another_host_answers_the_editors_prompt_cancelled(
    tmp_path: Path,
) -> None:
    schema = postgres.new_schema()
    cluster = {
        "TETHER_DATABASE_URL": postgres.URL,
        "TETHER_DATABASE_SCHEMA": schema,
        "TETHER_LEASE_TTL": "2",
    }
    db = PostgresBackend(postgres.URL, schema=schema, host_id="observer")
    try:
        async with serving(tmp_path, env={**cluster, "TETHER_HOST_ID": "editor-host"}) as server:
            sid = await server.new_session()
            assert db.exists(sid)  # session/new is answered once the session is stored
            prompt = server.start_prompt(sid, "hold")
            await server.client.wait_for(server.client.saw_text(sid, "holding"))
            other = tmp_path / "other"
            other.mkdir()
            cancel = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "tether.cli.main", "sessions", "cancel", sid),
                env={**env_for(other), **cluster, "TETHER_HOST_ID": "other-host"},
                cwd=str(ROOT),
                stderr=asyncio.subprocess.PIPE,
            )
            _out, err = await cancel.communicate()
            assert cancel.returncode == 0, err
            assert b"sent to host editor-host" in err
            assert await prompt == "cancelled"
            assert await server.prompt(sid, "again") == "end_turn"
            await server.close_stdin()
        ends = [
            event.data_object()["reason"]
            for event in db.load(sid).events
            if event.type == "turn/end"
        ]
        assert ends == [{"kind": "aborted", "cause": "user"}, {"kind": "completed"}]
        assert db.lease_holder(sid) is None  # given up when the editor left
    finally:
        db.close()
        postgres.drop(schema)


async def take_over(db: PostgresBackend, sid: str) -> Lease:
    """Take the session's lease as soon as its holder's has expired."""
    async with asyncio.timeout(10):
        while True:
            try:
                return db.acquire_lease(sid)
            except SessionLeasedError:
                await asyncio.sleep(0.05)


@dataclass
class Fenced:
    """An ACP server whose session another host took over while it was paused."""

    server: AcpProcess
    sid: str
    db: PostgresBackend
    """The taker's backend."""
    lease: Lease
    """The taker's lease of the session."""
    stored: int
    """How many events were stored when the taker took the session over."""
    refused: RequestError
    """What the editor's prompt in flight got."""


@asynccontextmanager
async def fenced(
    tmp_path: Path, capabilities: dict[str, object] | None = None
) -> AsyncIterator[Fenced]:
    """A server paused past its TTL with a prompt in flight, while another host took
    its session over; once it runs again and its prompt was answered. The client
    advertises ``capabilities`` (JSON) when given."""
    schema = postgres.new_schema()
    cluster = {
        "TETHER_DATABASE_URL": postgres.URL,
        "TETHER_DATABASE_SCHEMA": schema,
        "TETHER_LEASE_TTL": "1",
        "TETHER_HOST_ID": "paused-host",
    }
    db = PostgresBackend(postgres.URL, schema=schema, host_id="taker")
    try:
        async with serving(tmp_path, env=cluster, initialize=capabilities is None) as server:
            if capabilities is not None:
                await server.initialize_json(capabilities)
            sid = await server.new_session()
            prompt = server.start_prompt(sid, "hold")
            await server.client.wait_for(server.client.saw_text(sid, "holding"))
            server.process.send_signal(signal.SIGSTOP)
            try:
                lease = await take_over(db, sid)
                stored = len(db.load(sid).events)
            finally:
                server.process.send_signal(signal.SIGCONT)
            with pytest.raises(RequestError) as refused:
                await prompt
            yield Fenced(server, sid, db, lease, stored, refused.value)
    finally:
        db.close()
        postgres.drop(schema)


async def test_a_fenced_host_says_once_per_session_that_it_was_taken_over(
    tmp_path: Path,
) -> None:
    """A host paused past its TTL, whose session another host took over, stops that
    session's agent when it runs again: its editor's prompt gets the takeover error,
    its stderr one line for the session, no error, no traceback, and nothing of it
    is stored after the takeover."""
    async with fenced(tmp_path) as case:
        sid = case.sid
        assert str(case.refused) == f"session {sid} was taken over by host taker"
        await case.server.close_stdin()
        lines = case.server.stderr().splitlines()
        assert lines == [
            f"tether: session {sid} was taken over by host taker; its agent stops here"
        ]
        assert len(case.db.load(sid).events) == case.stored
        case.lease.release()


async def test_a_client_that_shows_notices_is_told_its_session_was_taken_over(
    tmp_path: Path,
) -> None:
    async with fenced(tmp_path, {"session": {"notices": {}}}) as case:
        notices = [
            f["params"]
            for f in case.server.frames
            if f.get("method") == "session/update"
            and f["params"]["update"]["sessionUpdate"] == "notice"
        ]
        assert notices == [
            {
                "sessionId": case.sid,
                "update": {
                    "sessionUpdate": "notice",
                    "severity": "error",
                    "title": "Session taken over",
                    "description": f"session {case.sid} was taken over by host taker",
                },
            }
        ]
        case.lease.release()


async def test_a_fenced_host_takes_its_session_back_once_the_taker_lets_it_go(
    tmp_path: Path,
) -> None:
    """After a takeover, the fenced host forgets the lease it lost: once the editor
    has closed the fenced session and the taker has let it go, the same process
    loads it again and works on it, and nothing the fenced agent held in memory
    is stored."""
    async with fenced(tmp_path) as case:
        server, sid, db = case.server, case.sid, case.db
        assert len(db.load(sid).events) == case.stored
        await server.conn.close_session(session_id=sid)
        case.lease.release()
        await server.conn.load_session(cwd=str(server.home), session_id=sid, mcp_servers=[])
        assert await server.prompt(sid, "again") == "end_turn"
        await server.close_stdin()
        events = db.load(sid).events
        assert [e.seq for e in events] == list(range(len(events)))
        prompts = [e.data_object()["content"] for e in events if e.type == "user/message"]
        # The fenced turn's prompt is in the log only if its batch was stored before the
        # pause, under the lease; nothing of it is stored after the takeover.
        stored = events[: case.stored]
        before = [e.data_object()["content"] for e in stored if e.type == "user/message"]
        assert before in ([], [[{"type": "text", "text": "hold"}]])
        assert prompts == [*before, [{"type": "text", "text": "again"}]]
        ends = [e.data_object()["reason"] for e in events if e.type == "turn/end"]
        # The fenced turn closes interrupted if its start was stored before the pause.
        assert ends[-1] == {"kind": "completed"}
        assert all(end == {"kind": "interrupted"} for end in ends[:-1]), ends
        assert db.lease_holder(sid) is None
