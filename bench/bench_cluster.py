"""Several tether hosts on one PostgreSQL database: throughput, latency, takeover; prints figures.

Usage: python bench/bench_cluster.py [--only NAME ...] [--events N] [--prompts N]
                                     [--hosts N] [--sessions N] [--rounds N]
                                     [--commits N] [--vs OTHER_TREE/src]

Figures (targets from the scale-out issue):

* ``drivers``: raw batched append (one transaction per batch of 100 events) with
  psycopg 3 and, when it is installed, asyncpg, interleaved;
* ``append``: durable append through the persistence service (write-behind
  batching, a flush, i.e. an acknowledgement, every 200 events of a session),
  one host process, then four host processes at once (>= 20,000 and
  >= 50,000 events/s), with the CPU time per event of the hosts and of the
  server processes serving them (read from ``/proc``: a server on this
  machine), and the rate that CPU cost allows on all of this machine's cores;
* ``commits``: small durable commits (a flush after every event of a session)
  from 1, 4 and 8 host processes at once: commits/s (= events/s) of the
  cluster. PostgreSQL serializes the commits of transactions that ran
  ``NOTIFY``; tether rings its doorbell after commit, coalesced per host;
* ``notify``: the commit lock alone: 8 and 32 connections commit one-event
  batches through the append function with the ``NOTIFY`` inside the
  transaction (schema 2) and without it (schema 3), interleaved;
* ``tail``: append on host A -> read on host B, woken by the doorbell;
* ``effects`` (only when named: it takes long): the tool-effects chaos test with
  ``--effects`` turns per backend (default 1,000): duplicate effects and
  unreported unknown outcomes (both 0);
* ``acp``: ``tether acp`` per-prompt median, PostgreSQL against JSONL, runs
  interleaved (<= 1.5x);
* ``cancel``: a cancel requested on host B (a NOTIFY, as ``sessions cancel``
  sends it) until host A's ``turn/end {aborted}`` is durable, seen from B
  (<= 100 ms median);
* ``takeover``: SIGKILL of the host holding a streaming session until another
  host holds its lease (<= TTL + 1 s; TTL 2 s here);
* ``scale``: N ``tether acp`` hosts x S sessions x P prompts at once, then the
  database is checked: acknowledged turns lost, duplicate seqs;
* ``fencing``: a host with sessions mid-turn is paused past its TTL, another
  loads (takes over) and prompts them, the paused host is let go on: events
  it stored after the takeover are fencing violations.

With ``--vs OTHER/src`` (e.g. ``git archive main src | tar -x -C /tmp/main``),
``commits``, ``tail`` and ``cancel`` run that tree's hosts too, a run of each
in turn, and print both.

The server is ``$TETHER_BENCH_DATABASE_URL`` (default: the local one); each
part uses a schema of its own, dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import psycopg  # noqa: E402
from acp.helpers import text_block  # noqa: E402
from psycopg import sql  # noqa: E402
from tests.adapters.fake_server import FakeServer, stream, until_client_leaves  # noqa: E402
from tests.adapters.support import delta, text_answer  # noqa: E402

import bench_acp  # noqa: E402
from tether.persist.backends.channels import CONTROL_CHANNEL, EVENTS_CHANNEL, channel  # noqa: E402
from tether.persist.backends.postgres import PostgresBackend  # noqa: E402

URL = bench_acp.DATABASE_URL
CHUNKS_PER_FLUSH = 200


def drop(schema: str) -> None:
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def rate(events: int, seconds: float) -> str:
    return f"{events / seconds:,.0f} events/s ({events:,} events in {seconds:.2f} s)"


# -- drivers ------------------------------------------------------------------------

INSERT = (
    "INSERT INTO events (session_id, seq, type, time, data)"
    " SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::float8[], $5::jsonb[])"
)
DATA = '{"kind":"text","delta":"a chunk of streamed text"}'


def psycopg_append(schema: str, batches: int, size: int) -> float:
    backend = PostgresBackend(URL, schema=schema)
    backend.write({"id": "d", "created_at": 1.0, "cwd": "/", "lineage": None, "meta": {}}, [])
    backend.close()
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        query = INSERT.replace("$1", "%s").replace("$2", "%s").replace("$3", "%s")
        query = query.replace("$4", "%s").replace("$5", "%s")
        start = time.perf_counter()
        for batch in range(batches):
            seqs = list(range(batch * size, (batch + 1) * size))
            with conn.transaction():
                conn.execute(
                    query, ("d", seqs, ["assistant/chunk"] * size, [1.0] * size, [DATA] * size)
                )
        return time.perf_counter() - start


def backend_append(schema: str, batches: int, size: int) -> float:
    """The same batches through :class:`PostgresBackend` (one JSON document, one call)."""
    import msgspec

    backend = PostgresBackend(URL, schema=schema)
    head = {"id": "b", "created_at": 1.0, "cwd": "/", "lineage": None, "meta": {}}
    data = msgspec.Raw(DATA.encode())
    try:
        backend.write(head, [])
        start = time.perf_counter()
        for batch in range(batches):
            backend.write(
                head,
                [
                    {"type": "assistant/chunk", "seq": seq, "time": 1.0, "data": data}
                    for seq in range(batch * size, (batch + 1) * size)
                ],
            )
        return time.perf_counter() - start
    finally:
        backend.close()


async def asyncpg_append(schema: str, batches: int, size: int) -> float:
    import asyncpg  # type: ignore[import-not-found]

    conn = await asyncpg.connect(URL, server_settings={"search_path": schema})
    try:
        await conn.execute("DELETE FROM events")
        start = time.perf_counter()
        for batch in range(batches):
            seqs = list(range(batch * size, (batch + 1) * size))
            async with conn.transaction():
                await conn.execute(
                    INSERT, "d", seqs, ["assistant/chunk"] * size, [1.0] * size, [DATA] * size
                )
        return time.perf_counter() - start
    finally:
        await conn.close()


async def drivers(rounds: int) -> None:
    try:
        import asyncpg  # noqa: F401
    except ImportError:
        have_asyncpg = False
    else:
        have_asyncpg = True
    batches, size = 300, 100
    figures: dict[str, list[float]] = {
        "psycopg, text arrays": [],
        "asyncpg, arrays": [],
        "psycopg, the backend's batch function": [],
    }
    for round_ in range(rounds):
        schema = f"bench_drivers_{os.getpid()}_{round_}"
        try:
            figures["psycopg, text arrays"].append(psycopg_append(schema, batches, size))
            if have_asyncpg:
                figures["asyncpg, arrays"].append(await asyncpg_append(schema, batches, size))
            figures["psycopg, the backend's batch function"].append(
                backend_append(schema, batches, size)
            )
        finally:
            drop(schema)
    for name, times in figures.items():
        if times:
            rates = sorted(batches * size / t for t in times)
            print(
                f"drivers: {name}, {batches} batches of {size} events, one transaction each: "
                f"{rates[0]:,.0f}-{rates[-1]:,.0f} events/s over {len(rates)} runs"
            )
    if not have_asyncpg:
        print("drivers: asyncpg is not installed; only psycopg was measured")


# -- durable append through the persistence service ---------------------------------

HOST_APPEND = """
import asyncio, sys, time
from tether.content import TextBlock
from tether.persist import postgres
from tether.runtime import Runtime
from tether.session import AssistantChunk, StepEnd, StepStart, TurnEnd, TurnStart
from tether.session import UserMessageEvent, Completed
from tether.session.store import SESSIONS
from tether.session.store import apply as store_plugin

async def main(url, schema, host, sessions, events):
    async with Runtime() as runtime:
        await runtime.ctx.plugin(store_plugin)
        await runtime.ctx.plugin(postgres, {"url": url, "db_schema": schema, "host_id": host})
        store = runtime.ctx.get(SESSIONS)
        per_session = events // sessions
        async def one(n):
            session = store.prepare(f"{host}-{n}", cwd="/bench")
            store.enter(session)
            session.append(TurnStart(turn=1))
            session.append(StepStart(turn=1, step=1))
            session.append(UserMessageEvent(id="u", source="user", content=(TextBlock("go"),)))
            for index in range(per_session):
                session.append(AssistantChunk(kind="text", delta="a chunk of streamed text"))
                if index % CHUNKS == CHUNKS - 1:
                    await store.flush(session)
            session.append(StepEnd(turn=1, step=1))
            session.append(TurnEnd(turn=1, reason=Completed()))
            await store.flush(session)
            return len(session.events)
        sys.stdout.write("ready\\n"); sys.stdout.flush()
        sys.stdin.readline()
        start = time.perf_counter()
        counts = await asyncio.gather(*(one(n) for n in range(sessions)))
        print(sum(counts), time.perf_counter() - start, flush=True)
        sys.stdin.readline()  # its server processes stay until the CPU times are read

CHUNKS = int(sys.argv[6])
asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
"""


class Appended(NamedTuple):
    """A durable append run: events, wall seconds from the start signal to the last flush,
    and the CPU seconds meanwhile of the hosts' server backends and of the hosts."""

    events: int
    seconds: float
    server_cpu: float
    host_cpu: float


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) process ``pid`` of this machine has used; 0 if unknown
    (gone, or not visible: a server on another machine)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backends(schema: str) -> list[int]:
    """The pids of the server processes serving the hosts on ``schema``."""
    with psycopg.connect(URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            (f"tether {schema}"[:63],),
        ).fetchall()
    return [row[0] for row in rows]


def tree_env(tree: str | None) -> dict[str, str]:
    """The environment of a host process running ``tree`` (a ``src`` directory; ``None``:
    this one)."""
    path = [str(ROOT), *sys.path] if tree is None else [tree, str(ROOT), *sys.path]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def host_append(
    hosts: int,
    sessions: int,
    events: int,
    *,
    per_flush: int = CHUNKS_PER_FLUSH,
    tree: str | None = None,
) -> Appended:
    """``hosts`` processes append ``events`` each over ``sessions`` sessions, started
    together, a flush every ``per_flush`` events of a session; ``tree`` as :func:`tree_env`.

    Each host migrates the schema as it opens (under the migration lock), before the clock
    starts, with the code of the tree it runs."""
    schema = f"bench_append_{os.getpid()}_{hosts}"
    env = tree_env(tree)
    processes = [
        subprocess.Popen(
            [
                *(sys.executable, "-c", HOST_APPEND, URL, schema, f"h{n}"),
                *(str(sessions), str(events), str(per_flush)),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in range(hosts)
    ]
    try:
        for process in processes:
            assert process.stdout is not None and process.stdout.readline() == "ready\n"
        server_before = {pid: cpu_seconds(pid) for pid in backends(schema)}
        hosts_before = {p.pid: cpu_seconds(p.pid) for p in processes}
        start = time.perf_counter()
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        total = 0
        for process in processes:
            assert process.stdout is not None
            total += int(process.stdout.readline().split()[0])
        elapsed = time.perf_counter() - start
        # Read before the hosts exit, while their server backends still run.
        server_cpu = sum(cpu_seconds(pid) - server_before.get(pid, 0.0) for pid in backends(schema))
        host_cpu = sum(cpu_seconds(p.pid) - hosts_before[p.pid] for p in processes)
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("done\n")
            process.stdin.flush()
        for process in processes:
            process.wait(timeout=60)
        return Appended(total, elapsed, server_cpu, host_cpu)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
        drop(schema)


def append(rounds: int, events: int) -> None:
    for hosts in (1, 4):
        figures = [host_append(hosts, 20, events) for _ in range(rounds)]
        rates = sorted(run.events / run.seconds for run in figures)
        target = "20,000" if hosts == 1 else "50,000"
        print(
            f"durable append, {hosts} host(s) x 20 sessions, a flush every "
            f"{CHUNKS_PER_FLUSH} events of a session: {rates[0]:,.0f}-{rates[-1]:,.0f} events/s "
            f"over {rounds} runs (target >= {target})"
        )
        server = sorted(run.server_cpu / run.events * 1e6 for run in figures)
        host = sorted(run.host_cpu / run.events * 1e6 for run in figures)
        both = sorted((run.server_cpu + run.host_cpu) / run.events * 1e6 for run in figures)
        cores = os.cpu_count() or 1
        if server[-1] > 0:
            print(
                f"  CPU per durable event: server {server[0]:.1f}-{server[-1]:.1f} us, "
                f"hosts {host[0]:.1f}-{host[-1]:.1f} us; all {cores} cores doing only this: "
                f"{cores / both[-1] * 1e6:,.0f}-{cores / both[0] * 1e6:,.0f} events/s"
            )


def commits(rounds: int, events: int, tree: str | None) -> None:
    """Small durable commits (a flush after every event of a session, as acknowledged
    turns make them) from 1, 4 and 8 hosts at once: the rate the cluster commits at.
    With ``tree``, each run of this tree is followed by one of ``tree``, same load."""
    trees: dict[str, str | None] = {"this tree": None}
    if tree is not None:
        trees[tree] = tree
    for hosts in (1, 4, 8):
        figures: dict[str, list[Appended]] = {name: [] for name in trees}
        for _ in range(rounds):
            for name, src in trees.items():
                figures[name].append(
                    host_append(hosts, COMMIT_SESSIONS, events // hosts, per_flush=1, tree=src)
                )
        for name, runs in figures.items():
            rates = sorted(run.events / run.seconds for run in runs)
            print(
                f"commits, {hosts} host(s) x {COMMIT_SESSIONS} sessions, a flush after every "
                f"event, {name}: {rates[0]:,.0f}-{rates[-1]:,.0f} commits/s "
                f"(= events/s) over {rounds} runs",
                flush=True,
            )


def notify_lock(rounds: int, seconds: float = 3.0) -> None:
    """The mechanism alone, without tether's hosts: 8 and 32 connections commit one-event
    batches through ``append_batch`` as fast as they can, each its own session, with the
    ``NOTIFY`` inside the transaction (how schema 2 rang) and without it (schema 3: the
    host rings after commit), interleaved."""
    import threading

    for connections in (8, 32):
        figures: dict[str, list[float]] = {"NOTIFY in the transaction": [], "after commit": []}
        for round_ in range(rounds):
            for name, rates in figures.items():
                schema = f"bench_notify_{os.getpid()}_{round_}"
                PostgresBackend(URL, schema=schema).close()
                ring = channel(schema, EVENTS_CHANNEL) if "in the" in name else None
                counts = [0] * connections
                stop = threading.Event()
                threads = [
                    threading.Thread(target=commit_batches, args=(schema, n, ring, stop, counts))
                    for n in range(connections)
                ]
                for thread in threads:
                    thread.start()
                time.sleep(seconds)
                stop.set()
                for thread in threads:
                    thread.join()
                rates.append(sum(counts) / seconds)
                drop(schema)
        for name, rates in figures.items():
            rates.sort()
            print(
                f"commit lock, {connections} connections committing one-event batches, "
                f"{name}: {rates[0]:,.0f}-{rates[-1]:,.0f} commits/s over {rounds} runs",
                flush=True,
            )


def commit_batches(schema: str, index: int, ring: str | None, stop: Any, counts: list[int]) -> None:
    """One-event batches of session ``n<index>``, one transaction each, until ``stop``;
    how many in ``counts[index]``. ``ring``: the channel the transaction notifies."""
    from tether.persist.backends.postgres_writes import APPEND_CALL

    sid = f"n{index}"
    head = json.dumps({"id": sid, "created_at": 1.0, "cwd": "/", "lineage": None, "meta": {}})
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        seq = 0
        while not stop.is_set():
            batch = json.dumps(
                [{"type": "assistant/chunk", "seq": seq, "time": 1.0, "data": {"delta": "x"}}]
            )
            conn.execute(
                APPEND_CALL, (sid, None, head, 1.0, batch, seq, 1, 0, 1.0, None, ring, False)
            )
            seq += 1
        counts[index] = seq


COMMIT_SESSIONS = 10
"""Sessions per host in :func:`commits`."""


# -- ACP per-prompt latency, PostgreSQL against JSONL --------------------------------


async def acp(rounds: int, prompts: int) -> None:
    medians: dict[str, list[float]] = {"jsonl": [], "postgres": []}
    async with FakeServer() as server:
        for _ in range(rounds):
            for backend in ("jsonl", "postgres"):
                bench_acp.BACKEND["name"] = backend
                with tempfile.TemporaryDirectory() as home:
                    latencies = await bench_acp.prompt_latency(server, prompts, Path(home))
                medians[backend].append(statistics.median(latencies))
    drop(bench_acp.BACKEND["schema"])
    for backend, values in medians.items():
        print(
            f"acp per-prompt median, {backend}: "
            + ", ".join(f"{v * 1000:.2f}" for v in values)
            + " ms"
        )
    ratios = sorted(p / j for p, j in zip(medians["postgres"], medians["jsonl"], strict=True))
    print(
        f"acp per-prompt median, postgres / jsonl (same round): "
        f"{ratios[0]:.2f}-{ratios[-1]:.2f}x (target <= 1.5x)"
    )


# -- cross-host cancel and takeover ---------------------------------------------------


class Observer:
    """Host B of the latency parts, in plain SQL: it reads and signals whatever schema
    version the host under test made (it never migrates it)."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.conn = psycopg.connect(URL, autocommit=True)
        self.conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))

    def holder(self, sid: str) -> str | None:
        row = self.conn.execute(
            "SELECT host FROM leases WHERE session_id = %s AND expires_at > clock_timestamp()",
            (sid,),
        ).fetchone()
        return None if row is None else str(row[0])

    def after(self, sid: str, seq: int) -> list[tuple[int, str, float, Any]]:
        return self.conn.execute(
            "SELECT seq, type, time, data FROM events WHERE session_id = %s AND seq > %s"
            " ORDER BY seq",
            (sid, seq),
        ).fetchall()

    def cancel(self, sid: str) -> None:
        self.conn.execute(
            "SELECT pg_notify(%s, %s)", (channel(self.schema, CONTROL_CHANNEL), f"cancel {sid}")
        )

    def close(self) -> None:
        self.conn.close()


async def doorbell(schema: str) -> psycopg.AsyncConnection[Any]:
    listener = await psycopg.AsyncConnection.connect(URL, autocommit=True)
    await listener.execute(
        sql.SQL("LISTEN {}").format(sql.Identifier(channel(schema, EVENTS_CHANNEL)))
    )
    return listener


async def wait_durable_end(
    db: Observer, listener: psycopg.AsyncConnection[Any], sid: str, after: int
) -> tuple[int, Any]:
    """Wait (on the events doorbell) until a ``turn/end`` of ``sid`` past ``after`` is stored;
    its seq and data."""
    while True:
        for seq, kind, _time, data in await asyncio.to_thread(db.after, sid, after):
            after = seq
            if kind == "turn/end":
                return seq, data
        async for _notice in listener.notifies(timeout=1.0, stop_after=1):
            break


async def cancel_once(rounds: int, tree: str | None) -> list[float]:
    """``rounds`` cross-host cancels of a streaming turn of a host running ``tree``."""
    schema = f"bench_cancel_{os.getpid()}"
    bench_acp.BACKEND.update(name="postgres", schema=schema)
    bench_acp.SOURCE["pythonpath"] = tree_env(tree)["PYTHONPATH"]
    os.environ["TETHER_HOST_ID"] = "hostA"
    db = Observer(schema)
    listener = await doorbell(schema)
    latencies = []
    try:
        async with FakeServer() as server:
            with tempfile.TemporaryDirectory() as home:
                async with bench_acp.spawned(server, Path(home)) as (_p, conn, client, _r):
                    sid = (await conn.new_session(cwd=home, mcp_servers=[])).session_id
                    after = -1
                    for _ in range(rounds):
                        prompt = await bench_acp.streaming_prompt(server, conn, client, sid)
                        # The request, as `tether sessions cancel` makes it on host B.
                        start = time.perf_counter()
                        assert await asyncio.to_thread(db.holder, sid) == "hostA"
                        await asyncio.to_thread(db.cancel, sid)
                        after, data = await wait_durable_end(db, listener, sid, after)
                        latencies.append(time.perf_counter() - start)
                        answer = await prompt
                        assert answer.stop_reason == "cancelled", answer
                        assert data["reason"] == {"kind": "aborted", "cause": "user"}
    finally:
        await listener.close()
        db.close()
        drop(schema)
        os.environ.pop("TETHER_HOST_ID", None)
        bench_acp.SOURCE["pythonpath"] = None
    return latencies


async def cancel(rounds: int, tree: str | None) -> None:
    trees: dict[str, str | None] = {"this tree": None}
    if tree is not None:
        trees[tree] = tree
    figures: dict[str, list[list[float]]] = {name: [] for name in trees}
    for _ in range(max(1, rounds // 10)):
        for name, src in trees.items():
            figures[name].append(await cancel_once(10, src))
    for name, runs in figures.items():
        latencies = [latency for run in runs for latency in run]
        medians = ", ".join(f"{statistics.median(run) * 1000:.1f}" for run in runs)
        print(
            f"cross-host cancel, {name}, request on B -> turn/end aborted durable by A, seen "
            f"on B: {bench_acp.ms(latencies)} over {len(latencies)} cancels "
            f"(median per round of 10: {medians} ms; target <= 100 ms median)",
            flush=True,
        )


HOST_TAIL = """
import asyncio, sys, time
from tether.persist import postgres
from tether.runtime import Runtime
from tether.session import AssistantChunk, StepStart, TurnStart
from tether.session.store import SESSIONS
from tether.session.store import apply as store_plugin

async def main(url, schema, sessions, events, pause):
    async with Runtime() as runtime:
        await runtime.ctx.plugin(store_plugin)
        await runtime.ctx.plugin(postgres, {"url": url, "db_schema": schema, "host_id": "A"})
        store = runtime.ctx.get(SESSIONS)
        async def one(n):
            session = store.prepare(f"t{n}", cwd="/bench")
            store.enter(session)
            session.append(TurnStart(turn=1))
            session.append(StepStart(turn=1, step=1))
            await store.flush(session)
            for _ in range(events):
                await asyncio.sleep(pause)
                session.append(AssistantChunk(kind="text", delta="x"))
                await store.flush(session)
        sys.stdout.write("ready\\n"); sys.stdout.flush()
        sys.stdin.readline()
        await asyncio.gather(*(one(n) for n in range(sessions)))
        print("done", flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])))
"""


def start_tail_host(
    schema: str, sessions: int, events: int, tree: str | None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", HOST_TAIL, URL, schema, str(sessions), str(events), "0.02"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=tree_env(tree),
    )


async def tail_once(sessions: int, events: int, tree: str | None) -> list[float]:
    """Host A (running ``tree``) appends to ``sessions`` sessions, an event every 20 ms
    each, flushed; host B wakes on the doorbell and reads by seq. Per event: the time
    from its append on A (its logged time) until B has read it."""
    schema = f"bench_tail_{os.getpid()}"
    process = start_tail_host(schema, sessions, events, tree)
    latencies: list[float] = []
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        db = Observer(schema)
        listener = await doorbell(schema)
        try:
            last = {f"t{n}": -1 for n in range(sessions)}
            events += 1  # after turn/start and step/start
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
            while min(last.values()) < events:  # the last seq
                async for notice in listener.notifies(timeout=5.0):
                    for line in notice.payload.split("\n"):
                        sid = line.rpartition(" ")[0]
                        rows = await asyncio.to_thread(db.after, sid, last[sid])
                        now = time.time()
                        for seq, kind, stamp, _data in rows:
                            last[sid] = seq
                            if kind == "assistant/chunk":
                                latencies.append(now - stamp)
                    if min(last.values()) >= events:
                        break
                else:
                    raise AssertionError(f"no doorbell for 5 s: a wake-up was lost ({last})")
        finally:
            await listener.close()
            db.close()
        process.stdout.readline()
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        drop(schema)
    return latencies


async def tail(rounds: int, tree: str | None) -> None:
    trees: dict[str, str | None] = {"this tree": None}
    if tree is not None:
        trees[tree] = tree
    figures: dict[str, list[list[float]]] = {name: [] for name in trees}
    for _ in range(rounds):
        for name, src in trees.items():
            figures[name].append(await tail_once(20, 25, src))
    for name, runs in figures.items():
        latencies = [latency for run in runs for latency in run]
        medians = ", ".join(f"{statistics.median(run) * 1000:.1f}" for run in runs)
        print(
            f"cross-host tail, {name}, 20 sessions appending on A, an event every 20 ms "
            f"each: append on A -> read on B {bench_acp.ms(latencies)} over "
            f"{len(latencies)} events (median per round: {medians} ms)",
            flush=True,
        )


async def takeover(rounds: int, ttl: float = 2.0) -> None:
    schema = f"bench_takeover_{os.getpid()}"
    bench_acp.BACKEND.update(name="postgres", schema=schema)
    os.environ.update(TETHER_HOST_ID="hostA", TETHER_LEASE_TTL=str(ttl))
    b = PostgresBackend(URL, schema=schema, host_id="hostB")
    times = []
    try:
        async with FakeServer() as server:
            for _ in range(rounds):
                with tempfile.TemporaryDirectory() as home:
                    async with bench_acp.spawned(server, Path(home)) as (process, conn, client, _r):
                        sid = (await conn.new_session(cwd=home, mcp_servers=[])).session_id
                        streaming = client.streaming[sid] = asyncio.Event()
                        server.queue(until_client_leaves([delta("thinking")]))
                        prompt = asyncio.ensure_future(
                            conn.prompt(session_id=sid, prompt=[text_block("think long")])
                        )
                        await streaming.wait()
                        for _ in range(1000):  # the lease is taken by the first write
                            if (info := b.lease_info(sid)) is not None and info.live:
                                break
                            await asyncio.sleep(0.01)
                        process.send_signal(signal.SIGKILL)
                        await process.wait()
                        killed = time.perf_counter()
                        while True:
                            try:
                                b.acquire_lease(sid).release()
                                break
                            except Exception:
                                await asyncio.sleep(0.01)
                        times.append(time.perf_counter() - killed)
                        prompt.cancel()
    finally:
        b.close()
        drop(schema)
        for name in ("TETHER_HOST_ID", "TETHER_LEASE_TTL"):
            os.environ.pop(name, None)
    print(
        f"takeover after SIGKILL (TTL {ttl:g} s): "
        + ", ".join(f"{t:.2f}" for t in times)
        + f" s (target <= TTL + 1 s = {ttl + 1:g} s)"
    )


# -- hosts x sessions x prompts --------------------------------------------------------


async def scale(hosts: int, sessions: int, prompts: int) -> None:
    schema = f"bench_scale_{os.getpid()}"
    bench_acp.BACKEND.update(name="postgres", schema=schema)
    acknowledged: dict[str, int] = {}

    async def host(server: FakeServer, n: int) -> None:
        os.environ["TETHER_HOST_ID"] = f"host{n}"
        with tempfile.TemporaryDirectory() as home:
            async with bench_acp.spawned(server, Path(home)) as (_p, conn, _client, _r):
                sids = [
                    (await conn.new_session(cwd=home, mcp_servers=[])).session_id
                    for _ in range(sessions)
                ]

                async def run(sid: str) -> None:
                    for index in range(prompts):
                        server.queue(stream(text_answer("an answer")))
                        answer = await conn.prompt(session_id=sid, prompt=[text_block(f"p{index}")])
                        if answer.stop_reason == "end_turn":
                            acknowledged[sid] = acknowledged.get(sid, 0) + 1

                await asyncio.gather(*(run(sid) for sid in sids))

    start = time.perf_counter()
    try:
        async with FakeServer() as server:
            await asyncio.gather(*(host(server, n) for n in range(hosts)))
        elapsed = time.perf_counter() - start
        lost = duplicates = 0
        with psycopg.connect(URL, autocommit=True) as pg:
            pg.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            rows = pg.execute(
                "SELECT session_id, count(*), count(DISTINCT seq), max(seq),"
                " count(*) FILTER (WHERE type = 'turn/end'"
                "   AND data->'reason'->>'kind' = 'completed')"
                " FROM events GROUP BY session_id"
            ).fetchall()
        stored = {row[0]: row for row in rows}
        for sid, count in acknowledged.items():
            row = stored.get(sid)
            completed = row[4] if row else 0
            lost += max(0, count - completed)
        for _sid, total, distinct, top, _completed in rows:
            duplicates += total - distinct
            assert top == total - 1, "a gap in seq"
    finally:
        drop(schema)
        os.environ.pop("TETHER_HOST_ID", None)
    turns = sum(acknowledged.values())
    print(
        f"scale: {hosts} hosts x {sessions} sessions x {prompts} prompts at once: "
        f"{turns} acknowledged turns in {elapsed:.1f} s; acknowledged turns lost {lost}, "
        f"duplicate seqs {duplicates} (no takeover in this run: see fencing)"
    )


async def fencing(sessions: int, ttl: float = 1.0) -> None:
    """A host with ``sessions`` sessions mid-turn is paused past its TTL; another host
    loads (takes over) each of them and prompts it; the paused host is let go on. Counted:
    events of the paused host stored after the takeover (a fencing violation)."""
    schema = f"bench_fencing_{os.getpid()}"
    bench_acp.BACKEND.update(name="postgres", schema=schema)
    os.environ["TETHER_LEASE_TTL"] = str(ttl)
    db = PostgresBackend(URL, schema=schema, host_id="observer")
    violations = fenced_answers = 0
    try:
        async with FakeServer() as server:
            with (
                tempfile.TemporaryDirectory() as home_a,
                tempfile.TemporaryDirectory() as home_b,
                tempfile.TemporaryDirectory() as work,
            ):
                os.environ["TETHER_HOST_ID"] = "paused"
                async with bench_acp.spawned(server, Path(home_a)) as (a, conn_a, client_a, _r):
                    sids = [
                        (await conn_a.new_session(cwd=work, mcp_servers=[])).session_id
                        for _ in range(sessions)
                    ]
                    prompts = []
                    for sid in sids:
                        client_a.streaming[sid] = asyncio.Event()
                        server.queue(until_client_leaves([delta("from the paused host")]))
                        prompts.append(
                            asyncio.ensure_future(
                                conn_a.prompt(session_id=sid, prompt=[text_block("hold")])
                            )
                        )
                    for sid in sids:
                        await client_a.streaming[sid].wait()
                    a.send_signal(signal.SIGSTOP)
                    try:
                        for sid in sids:
                            for _ in range(int(ttl * 100) + 100):  # until the lease expires
                                if (info := db.lease_info(sid)) is None or not info.live:
                                    break
                                await asyncio.sleep(0.01)
                        os.environ["TETHER_HOST_ID"] = "taker"
                        async with bench_acp.spawned(server, Path(home_b)) as (_b, conn_b, _c, _r):
                            for sid in sids:
                                await conn_b.load_session(cwd=work, session_id=sid, mcp_servers=[])
                            taken = {sid: len(db.load(sid).events) for sid in sids}
                            a.send_signal(signal.SIGCONT)
                            for sid in sids:
                                server.queue(stream(text_answer("an answer")))
                                answer = await conn_b.prompt(
                                    session_id=sid, prompt=[text_block("from the taker")]
                                )
                                assert answer.stop_reason == "end_turn", answer
                            for prompt in prompts:
                                try:
                                    await prompt
                                except Exception:
                                    fenced_answers += 1
                    finally:
                        a.send_signal(signal.SIGCONT)
        for sid in sids:
            after = db.load(sid).events[taken[sid] :]
            for event in after:
                data = event.data_object()
                texts = [b.get("text") for b in data.get("content", []) if isinstance(b, dict)]
                aborted = event.type == "turn/end" and data["reason"]["kind"] != "completed"
                prompted = event.type == "user/message" and texts != ["from the taker"]
                violations += aborted or prompted
    finally:
        db.close()
        drop(schema)
        for name in ("TETHER_HOST_ID", "TETHER_LEASE_TTL"):
            os.environ.pop(name, None)
    print(
        f"fencing: {sessions} sessions mid-turn on a host paused past its TTL (1 s), taken "
        f"over and prompted by another host, the paused host let go on: its prompts answered "
        f"with an error {fenced_answers}/{sessions}; its events stored after the takeover "
        f"(fencing violations): {violations}"
    )


PARTS = (
    "drivers",
    "append",
    "commits",
    "notify",
    "tail",
    "acp",
    "cancel",
    "takeover",
    "scale",
    "fencing",
    "effects",
)


def effects(processes: int) -> None:
    """The tool-effects chaos test at scale: ``processes`` ``tether run`` processes (a
    turn each) on JSONL and on PostgreSQL, SIGKILLed at random and right after a tool's
    effect, resumed or taken over; it prints what it counted and fails on a duplicate
    effect or an unreported unknown outcome."""
    subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider"),
            "tests/persist/test_tool_effects_chaos.py",
        ],
        env={**os.environ, "TETHER_CHAOS_PROCESSES": str(processes)},
        cwd=ROOT,
        check=True,
    )


async def main(args: argparse.Namespace) -> None:
    only = set(args.only or (part for part in PARTS if part != "effects"))  # effects: long
    if "drivers" in only:
        await drivers(args.rounds)
    if "append" in only:
        append(args.rounds, args.events)
    if "commits" in only:
        commits(args.rounds, args.commits, args.vs)
    if "notify" in only:
        notify_lock(args.rounds)
    if "tail" in only:
        await tail(args.rounds, args.vs)
    if "cancel" in only:
        await cancel(args.cancels, args.vs)
    if "acp" in only:
        await acp(args.rounds, args.prompts)
    if "takeover" in only:
        await takeover(3)
    if "scale" in only:
        await scale(args.hosts, args.sessions, args.scale_prompts)
    if "fencing" in only:
        await fencing(10)
    if "effects" in only:
        effects(args.effects)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=PARTS)
    parser.add_argument(
        "--vs",
        default=None,
        help="another tree's src: commits, tail and cancel run it too, interleaved",
    )
    parser.add_argument("--commits", type=int, default=8_000, help="in all, per commits run")
    parser.add_argument("--cancels", type=int, default=20, help="per tree, for cancel")
    parser.add_argument(
        "--effects", type=int, default=1_000, help="processes (turns) per backend, for effects"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=40_000, help="per host, for append")
    parser.add_argument("--prompts", type=int, default=100, help="per ACP latency run")
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=10, help="per host, for scale")
    parser.add_argument("--scale-prompts", type=int, default=10, help="per session, for scale")
    asyncio.run(main(parser.parse_args()))
