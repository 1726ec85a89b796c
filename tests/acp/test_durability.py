"""ACP acknowledges only what is durable, one process owns a session, a full disk is survived.

Real ``tether acp`` processes, killed with SIGKILL at the instant an answer
arrives, or run side by side on one ``TETHER_HOME``.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from acp.exceptions import RequestError
from acp.schema import AgentMessageChunk

from tests import postgres
from tests.acp.harness import RETRYING, SCRIPTED, SQLITE, AcpProcess, env_for, serving
from tests.mounts import fill, tmpfs
from tests.persist.factory import records
from tether.persist.backends import JsonlBackend, LogBackend, SqliteBackend
from tether.persist.backends.postgres import PostgresBackend
from tether.session import BUILTIN_PAYLOADS, Event, EventRegistry

BACKENDS: dict[str, tuple[Callable[[Path], str], Callable[[Path], LogBackend]]] = {
    "jsonl": (lambda _home: SCRIPTED, JsonlBackend),
    "sqlite": (lambda _home: SQLITE, SqliteBackend),
    "postgres": (
        lambda home: SCRIPTED + postgres.persistence_row(home),
        lambda home: PostgresBackend(postgres.URL, schema=postgres.schema_of(home)),
    ),
}
"""Each backend: the overlay that selects it for a home, and the backend that reads that home."""


def stored(home: Path, backend: str, session_id: str) -> list[dict[str, Any]]:
    log = BACKENDS[backend][1](home)
    try:
        return records(log.load(session_id))
    finally:
        log.close()


async def until_free(home: Path, backend: str, session_id: str) -> None:
    """Return once no process holds the session's lease (a killed holder's lease
    is gone with it, or, on PostgreSQL, once its TTL ran out)."""
    log = BACKENDS[backend][1](home)
    try:
        async with asyncio.timeout(10):
            while True:
                if log.lease_holder(session_id) is None:
                    return
                await asyncio.sleep(0.05)
    finally:
        log.close()


def prompts(events: list[dict[str, Any]]) -> list[str]:
    return [
        block["text"]
        for event in events
        if event["type"] == "user/message"
        for block in event["data"]["content"]
    ]


LARGE = "while full " + "x" * 8000


async def kill(server: AcpProcess) -> None:
    server.process.kill()
    await server.process.wait()


@pytest.mark.parametrize("backend", sorted(BACKENDS))
async def test_an_answered_prompt_survives_a_sigkill_the_instant_the_answer_arrives(
    tmp_path: Path, backend: str
) -> None:
    overlay = BACKENDS[backend][0](tmp_path / "home")
    for attempt in range(3):
        async with serving(tmp_path, overlay=overlay) as server:
            sid = await server.new_session()
            assert await server.prompt(sid, f"attempt {attempt}") == "end_turn"
            await kill(server)
        events = stored(tmp_path / "home", backend, sid)
        assert prompts(events) == [f"attempt {attempt}"]
        assert events[-1]["type"] == "turn/end"
        assert events[-1]["data"]["reason"] == {"kind": "completed"}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
async def test_a_created_session_killed_before_any_prompt_loads_in_a_new_process(
    tmp_path: Path, backend: str
) -> None:
    overlay = BACKENDS[backend][0](tmp_path / "home")
    async with serving(tmp_path, overlay=overlay) as server:
        sid = await server.new_session()
        await kill(server)
    await until_free(tmp_path / "home", backend, sid)
    async with serving(tmp_path, overlay=overlay) as server:
        await server.conn.load_session(cwd=str(server.home), session_id=sid, mcp_servers=[])
        assert await server.prompt(sid, "now") == "end_turn"
    assert prompts(stored(tmp_path / "home", backend, sid)) == ["now"]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
async def test_a_second_process_is_refused_a_session_that_is_open(
    tmp_path: Path, backend: str
) -> None:
    home = tmp_path / "home"
    overlay = BACKENDS[backend][0](home)
    async with serving(tmp_path / "one", overlay=overlay, home=home) as first:
        sid = await first.new_session()
        assert await first.prompt(sid, "mine") == "end_turn"
        async with serving(tmp_path / "two", overlay=overlay, home=home) as second:
            with pytest.raises(RequestError) as refused:
                await second.conn.load_session(cwd=str(home), session_id=sid, mcp_servers=[])
            where = "on host" if backend == "postgres" else "in another process"
            assert f"session {sid} is open {where} " in str(refused.value)
            assert f"(pid {first.process.pid})" in str(refused.value)
        # The owner's turn was never touched by the refused reader.
        assert await first.prompt(sid, "still mine") == "end_turn"
    async with serving(tmp_path / "three", overlay=overlay, home=home) as third:
        await third.conn.load_session(cwd=str(home), session_id=sid, mcp_servers=[])
        assert await third.prompt(sid, "handed over") == "end_turn"
    events = stored(home, backend, sid)
    assert prompts(events) == ["mine", "still mine", "handed over"]
    reasons = [e["data"]["reason"]["kind"] for e in events if e["type"] == "turn/end"]
    assert reasons == ["completed"] * 3


async def test_with_the_disk_full_a_prompt_is_answered_with_an_error_and_writing_resumes(
    tmp_path: Path,
) -> None:
    with tmpfs(tmp_path / "home", size="1m") as home:
        async with serving(tmp_path) as server:
            sid = await server.new_session()
            assert await server.prompt(sid, "before") == "end_turn"
            filler = fill(home)
            # Longer than the page the log's end may still have room in.
            with pytest.raises(RequestError) as failed:
                await server.prompt(sid, LARGE)
            assert "could not be stored: [Errno 28] No space left on device" in str(
                failed.value.args
            )
            filler.unlink()
            assert await server.prompt(sid, "after") == "end_turn"
        events = server.log(sid)
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert prompts(events) == ["before", LARGE, "after"]
    reasons = [e["data"]["reason"]["kind"] for e in events if e["type"] == "turn/end"]
    assert reasons == ["completed"] * 3
    assert "Traceback" not in server.stderr()


async def test_a_queued_prompt_refused_on_a_full_disk_never_runs(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "home", size="1m") as home:
        async with serving(tmp_path) as server:
            sid = await server.new_session()
            assert await server.prompt(sid, "before") == "end_turn"
            filler = fill(home)
            prompt = [{"type": "text", "text": LARGE}]
            with pytest.raises(RequestError) as refused:
                await server.conn.ext_method("tether/queue", {"sessionId": sid, "prompt": prompt})
            assert f"session {sid}: the prompt could not be stored: No space left on device" in (
                str(refused.value.args)
            )
            filler.unlink()
            assert await server.prompt(sid, "after") == "end_turn"
        events = server.log(sid)
    # Told it failed, it never ran: no turn for it, and the log withdraws it.
    assert prompts(events) == ["before", "after"]
    reasons = [e["data"]["reason"]["kind"] for e in events if e["type"] == "turn/end"]
    assert reasons == ["completed"] * 2
    ops = [e["data"]["op"] for e in events if e["type"] == "agent/inbox/spliced"]
    assert ops == ["insert", "claim", "insert", "discard", "insert", "claim"]
    assert "Traceback" not in server.stderr()


async def test_a_retried_request_is_announced_live_and_replayed_without_the_abandoned_text(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, overlay=RETRYING) as server:
        sid = await server.new_session()
        assert await server.prompt(sid, "flaky") == "end_turn"
        live = server.client.text(sid)
    assert live.startswith("Hello\n[retrying: 529 overloaded, attempt 2/4]\nHello, world!")
    async with serving(tmp_path, overlay=RETRYING) as server:
        await server.conn.load_session(cwd=str(server.home), session_id=sid, mcp_servers=[])
        replayed = [
            u.content.text for u in server.client.of(sid) if isinstance(u, AgentMessageChunk)
        ]
    assert "".join(replayed) == "Hello, world!"
    assert [e["type"] for e in server.log(sid)].count("llm/retry") == 1


async def test_a_log_of_every_event_type_loads_with_only_the_core_registry(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, "--mode", "auto", overlay=RETRYING) as server:
        sid = await server.new_session()
        for prompt in ("flaky", "think hard", "bash echo hi", "long", "decline", "fail"):
            with contextlib.suppress(RequestError):
                await server.prompt(sid, prompt)
        held = server.start_prompt(sid, "hold")
        await server.client.wait_for(server.client.saw_text(sid, "holding"))
        await server.conn.cancel(session_id=sid)
        assert await held == "cancelled"
    records = server.log(sid)
    written = {record["type"] for record in records}
    assert {cls.type for cls in BUILTIN_PAYLOADS} <= written
    core = EventRegistry()
    assert [Event.from_record(r, core).type for r in records] == [r["type"] for r in records]
    # The command line loads it with no retry plugin mounted.
    shown = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tether.cli.main", "sessions", "show", sid],
        capture_output=True,
        text=True,
        env=env_for(server.home),
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert "assistant: Hello, world!" in shown.stdout
