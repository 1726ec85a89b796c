"""The cluster budget as hosts meet it: four ``tether run`` processes, each its own host
(own home, own host id), share one PostgreSQL database and one day's limit.

A fake OpenAI-compatible server on 127.0.0.1 answers every request with a tool
call (so each turn would go on) and counts the requests it received. One
request is held at the server and its host SIGKILLed while its reservation is
open; the session is then taken over by another process. Once the day's limit
is reached every host's turn ends ``budget``, and:

* every request the server received had a granted reservation, and a refused
  reservation sent nothing (0 requests after exhaustion; a fresh host sends none);
* what the day spent passes the limit by at most one request's reservation;
* the killed host's reservation does not stay reserved: the takeover settled it
  (at its worst case, since the request may have been paid for).

A session killed mid-request and then resumed twice, on two other hosts, has its
worst case settled once, in its log and in the day's figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests import postgres
from tests.adapters.fake_server import FakeServer, Recorded, Reply, stream, until_client_leaves
from tests.adapters.support import call, delta, text_answer, usage
from tests.cli.test_budget import config
from tests.cli.test_commands import env_for, session_id
from tests.cli.test_session_model import _MODEL_VARIABLES, tether, user_config

LIMIT = 80_000
"""Tokens all hosts may spend today: room for a few dozen requests."""

HELD = 3
"""The request held at the server while its host is killed (1-based)."""


def calling_until_held(server: FakeServer, held: asyncio.Future[int]) -> None:
    """Answer each request with a call of a tool that does not exist (the turn goes on),
    except request :data:`HELD`: held until its client is gone, the number of the host
    that sent it (its prompt says) set in ``held``."""

    async def script(request: Recorded, reply: Reply) -> None:
        server.queue(script)
        number = len(server.requests)
        if number == HELD:
            found = re.search(rb"loop (\d)", request.body)
            assert found is not None
            held.set_result(int(found[1]))
            await reply.client_gone.wait()
            return
        events = [
            delta(calls=[call(0, "{}", id=f"call-{number}", name="no_such_tool")]),
            delta(finish="tool_calls"),
            usage(3000, 20),
            "[DONE]",
        ]
        await stream(events)(request, reply)

    server.queue(*[script] * 4)


class Host:
    """One tether host: its own home and host id, the shared schema."""

    def __init__(self, tmp_path: Path, name: str, url: str) -> None:
        self.name = name
        self.home = tmp_path / name
        user_config(self.home, config(url, prices=False) + postgres.persistence_row(tmp_path))

    def env(self) -> dict[str, str]:
        clean = {k: v for k, v in env_for(self.home).items() if k not in _MODEL_VARIABLES}
        return {**clean, "TETHER_HOST_ID": self.name}

    async def start(self, *args: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "tether.cli.main", "run", *args),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env(),
            cwd=self.home,
        )

    async def run(self, *args: str) -> tuple[int, str, str]:
        return await tether(self.home, "run", *args, env={"TETHER_HOST_ID": self.name})


FLAGS = ("--max-cluster-day-tokens", str(LIMIT), "--output-format", "json")


async def run_to_end(process: asyncio.subprocess.Process) -> tuple[int, str, str]:
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def take_over(host: Host, session: str) -> tuple[int, str, str]:
    """Resume ``session`` on ``host`` once the killed holder's lease (1 s) expired."""
    for _ in range(20):
        code, out, err = await host.run(*FLAGS, "--resume", session, "go on")
        if "is open on host" not in err:
            return code, out, err
        await asyncio.sleep(0.2)
    raise AssertionError("the killed host's lease never expired")


def table(schema: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(postgres.URL, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        return conn.execute(query).fetchall()  # type: ignore[arg-type]


@pytest.mark.timeout(120)
async def test_four_hosts_share_the_cluster_budget_and_none_sends_after_it(
    tmp_path: Path,
) -> None:
    schema = postgres.schema_of(tmp_path)
    async with FakeServer() as server:
        held: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        calling_until_held(server, held)
        hosts = [Host(tmp_path, f"host{n}", server.url) for n in range(4)]
        processes = [await host.start(*FLAGS, f"loop {n}") for n, host in enumerate(hosts)]
        try:
            victim = await asyncio.wait_for(held, 60)
            processes[victim].send_signal(signal.SIGKILL)
            _, killed_err = await processes[victim].communicate()
            assert processes[victim].returncode == -signal.SIGKILL
            runs = [await run_to_end(process) for n, process in enumerate(processes) if n != victim]
        finally:
            for process in processes:
                if process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                    await process.wait()
        taken = await take_over(hosts[(victim + 1) % 4], session_id(killed_err.decode()))
        sent = len(server.requests)
        fresh = await Host(tmp_path, "fresh", server.url).run(*FLAGS, "one more")
        assert len(server.requests) == sent  # exhausted: a fresh host sends nothing

    for code, out, err in [*runs, taken, fresh]:
        assert code == 1, err
        result = json.loads(out.splitlines()[-1])
        assert result["stop_reason"] == "budget", err
        assert result["budget"]["budget"] == "cluster"
        assert "all hosts' daily" in err
    receipt = json.loads(fresh[1].splitlines()[-1])["budget"]
    assert receipt["spent"] + receipt["reserving"] > LIMIT

    events = table(schema, "SELECT type, data FROM events WHERE type LIKE 'budget/%'")
    reserved = [data for kind, data in events if kind == "budget/reserved"]
    refused = [data for kind, data in events if kind == "budget/exhausted"]
    assert all(data["cluster"]["tokens"] == LIMIT for data in reserved)
    # Each refusal was a reservation the database refused; every other one was sent.
    assert sent == len(reserved) - len(refused)
    ((spent, still_reserved),) = table(
        schema, "SELECT spent_tokens, reserved_tokens FROM budget_days"
    )
    assert still_reserved == 0  # the killed host's reservation was settled at the takeover
    assert table(schema, "SELECT count(*) FROM budget_reservations") == [(0,)]
    largest = max(data["tokens"] for data in reserved)
    assert spent <= LIMIT + largest
    print(f"{sent} requests sent by 4 hosts (one killed), spent {spent} of {LIMIT} tokens")


async def test_a_cluster_budget_without_postgresql_refuses_to_start_in_one_line(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    async with FakeServer() as server:
        user_config(home, config(server.url, prices=False))
        code, _, err = await tether(home, "run", "--max-cluster-day-tokens", "1000", "hi")
        assert not server.requests
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "a cluster budget (cluster_day_usd, cluster_day_tokens) needs sessions stored" in line


@pytest.mark.timeout(60)
async def test_a_killed_hosts_worst_case_is_settled_once_however_often_it_is_resumed(
    tmp_path: Path,
) -> None:
    schema = postgres.schema_of(tmp_path)
    async with FakeServer() as server:
        reached = asyncio.Event()
        answer = stream(text_answer("done here"))
        server.queue(until_client_leaves([], reached), *[answer] * 4)
        first, second, third = (Host(tmp_path, f"host{n}", server.url) for n in range(3))
        process = await first.start(*FLAGS, "hello")
        try:
            await asyncio.wait_for(reached.wait(), 30)
            process.send_signal(signal.SIGKILL)
            _, killed_err = await process.communicate()
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        assert process.returncode == -signal.SIGKILL
        session = session_id(killed_err.decode())
        for host in (second, third):  # resumed on one host, then on another
            code, _out, err = await take_over(host, session)
            assert code == 0, err

    events = table(
        schema,
        "SELECT type, data FROM events WHERE type LIKE 'budget/%' ORDER BY seq",
    )
    reserved = [data for kind, data in events if kind == "budget/reserved"]
    settled = [data for kind, data in events if kind == "budget/settled"]
    held = reserved[0]
    assert [s["id"] for s in settled].count(held["id"]) == 1
    (worst,) = [s for s in settled if s["id"] == held["id"]]
    assert worst["tokens"] == held["tokens"]  # the killed request counts in full
    ((spent, still_reserved),) = table(
        schema, "SELECT spent_tokens, reserved_tokens FROM budget_days"
    )
    assert still_reserved == 0
    assert table(schema, "SELECT count(*) FROM budget_reservations") == [(0,)]
    assert spent == sum(s["tokens"] for s in settled)
