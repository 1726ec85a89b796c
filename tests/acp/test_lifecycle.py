"""Disconnect: every session the bridge opened is disposed, durably, and the process exits.

The ledger plugin (:mod:`tests.acp.ledger`) writes what was live when the
bridge's teardown completed: it must be nothing.
"""

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from tests.acp.harness import AcpProcess, processes_in_session, serving

EXIT_BOUND = 5.0
"""Seconds the server may take to exit here (the benchmark measures it closely)."""


def assert_all_disposed(server: AcpProcess, *session_ids: str) -> None:
    ledger = server.ledger()
    assert ledger[-1] == "closed agents= sessions=", ledger
    for sid in session_ids:
        assert f"created {sid}" in ledger and f"disposed {sid}" in ledger, ledger


def assert_balanced(server: AcpProcess, sid: str) -> dict[str, object]:
    """The session's log ends with its last turn's ``turn/end``; returns its reason."""
    events = server.log(sid)
    starts = [e for e in events if e["type"] == "turn/start"]
    ends = [e for e in events if e["type"] == "turn/end"]
    assert len(starts) == len(ends) and events[-1]["type"] == "turn/end", events[-3:]
    reason = events[-1]["data"]["reason"]
    assert isinstance(reason, dict)
    return reason


async def test_disconnect_mid_prompt_disposes_everything_and_exits(tmp_path: Path) -> None:
    async with serving(tmp_path, "--mode", "auto") as server:
        talking = await server.new_session()
        running = await server.new_session()
        held = server.start_prompt(talking, "hold")
        started = tmp_path / "started"
        os.mkfifo(started)
        # "started" is written once the background child runs sleep (not still bash).
        exec_seen = 'until read -r c < /proc/$!/comm && [ "$c" = sleep ]; do :; done'
        command = f"bash sleep 30 & {exec_seen}; echo started > {started}; wait"
        sleeping = server.start_prompt(running, command)
        await server.client.wait_for(server.client.saw_text(talking, "holding"))
        # Reading the FIFO returns once the command has written to it.
        assert await asyncio.to_thread(started.read_text) == "started\n"
        assert any(p.endswith(" sleep") for p in processes_in_session(server.process.pid))
        seconds = await server.close_stdin(EXIT_BOUND)
        assert server.process.returncode == 0, server.stderr()
        assert seconds < EXIT_BOUND
        assert processes_in_session(server.process.pid) == []
        assert_all_disposed(server, talking, running)
        assert assert_balanced(server, talking) == {"kind": "aborted", "cause": "disposed"}
        assert assert_balanced(server, running) == {"kind": "aborted", "cause": "disposed"}
        for prompt in (held, sleeping):
            prompt.cancel()


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
async def test_sigterm_and_sighup_cancel_like_ctrl_c_then_tear_down(
    tmp_path: Path, signum: signal.Signals, status: int
) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        held = server.start_prompt(sid, "hold")
        await server.client.wait_for(server.client.saw_text(sid, "holding"))
        server.process.send_signal(signum)
        # The pending prompt is answered before the process goes.
        assert await held == "cancelled"
        async with asyncio.timeout(EXIT_BOUND):
            assert await server.process.wait() == status
        assert_all_disposed(server, sid)
        assert assert_balanced(server, sid) == {"kind": "aborted", "cause": "user"}


async def request_then_hang_up(server: AcpProcess, method: str, params: dict[str, object]) -> None:
    """Send one request (id = ``method``) and close stdin right behind it; wait for the exit."""
    await server.conn.list_sessions()  # tether is up
    frame = {"jsonrpc": "2.0", "id": method, "method": method, "params": params}
    server.write_raw(json.dumps(frame).encode() + b"\n")
    await server.close_stdin(EXIT_BOUND)
    assert server.process.returncode == 0, server.stderr()


async def test_a_new_session_racing_the_disconnect_leaves_nothing(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        await request_then_hang_up(
            server, "session/new", {"cwd": str(server.home), "mcpServers": []}
        )
        ledger = server.ledger()
        assert ledger[-1] == "closed agents= sessions=", ledger
        created = [line.split()[1] for line in ledger if line.startswith("created")]
        assert all(f"disposed {sid}" in ledger for sid in created), ledger


async def test_a_load_racing_the_disconnect_disposes_its_own_session(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sid = await server.new_session()
        assert await server.prompt(sid, "something to load") == "end_turn"
    async with serving(tmp_path) as server:
        params = {"cwd": str(server.home), "sessionId": sid, "mcpServers": []}
        await request_then_hang_up(server, "session/load", params)
        # Either the load lost the race (its answer says so) or it won and
        # the teardown disposed the session; nothing stays registered.
        answer = await server.frame(lambda f: f.get("id") == "session/load")
        assert "result" in answer or "was opening" in answer["error"]["message"], answer
        assert_all_disposed(server, sid)
        assert assert_balanced(server, sid) == {"kind": "completed"}
