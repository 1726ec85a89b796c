"""Exactly one of two processes creating the same session id succeeds, on every backend.

Each creator is a real process (``create_racer.py``) on one data directory or
one database. The loser is refused with ``AgentConflictError`` whatever the
winner does next, and the stored log holds the winner's work only: nothing
of one process is ever spliced onto the other's log.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import postgres
from tests.persist.factory import event, events, header, records, user_message
from tests.persist.test_persistence_service import World, live, prompt, world  # noqa: F401
from tether import AgentHandle, Tether
from tether.agent import AgentConflictError
from tether.persist.backends import JsonlBackend, LogBackend, SqliteBackend
from tether.persist.backends.errors import StoreConflictError
from tether.persist.backends.postgres import PostgresBackend
from tether.session import Session
from tether.session.log import SessionHeader

RACER = Path(__file__).with_name("create_racer.py")

SQLITE = "plugins:\n  - id: persistence\n    plugin: tether.persist.sqlite\n"


class Racers:
    """Creator processes on one store; ``backend`` reads what they stored."""

    def __init__(self, tmp_path: Path, kind: str) -> None:
        self.data_dir = tmp_path / "data"
        self.overlay = ""
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        self.env.pop("TETHER_DATABASE_URL", None)
        self.backend: LogBackend
        if kind == "sqlite":
            path = tmp_path / "sqlite.yml"
            path.write_text(SQLITE)
            self.overlay = str(path)
            self.backend = SqliteBackend(self.data_dir)
        elif kind == "postgres":
            schema = postgres.new_schema()
            self.env.update(
                TETHER_DATABASE_URL=postgres.URL,
                TETHER_DATABASE_SCHEMA=schema,
                TETHER_LEASE_TTL="1",
            )
            self.backend = PostgresBackend(postgres.URL, schema=schema, host_id="observer")
        else:
            self.backend = JsonlBackend(self.data_dir)
        self.processes: list[subprocess.Popen[str]] = []

    def start(self, name: str, session_id: str = "shared") -> tuple[subprocess.Popen[str], str]:
        """Start a creator; return it with its first line (``created`` or ``refused …``)."""
        process = subprocess.Popen(
            [sys.executable, str(RACER), self.overlay, str(self.data_dir), session_id, name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )
        self.processes.append(process)
        assert process.stdout is not None
        return process, process.stdout.readline().strip()

    @staticmethod
    def finish(process: subprocess.Popen[str]) -> str:
        """Let a created one prompt and end; its last line (``stored`` or ``failed …``)."""
        out, err = process.communicate("go\n", timeout=60)
        assert process.returncode == 0, err
        return out.strip().splitlines()[-1]

    def prompts(self, session_id: str = "shared") -> list[str]:
        """The text of every user message stored in the session, in order."""
        return [
            str(event.to_record()["data"]["content"][0]["text"])  # type: ignore[index]
            for event in self.backend.load(session_id).events
            if event.type == "user/message"
        ]

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
        self.backend.close()


@pytest.fixture(params=["jsonl", "sqlite", "postgres"])
def racers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Racers]:
    racers = Racers(tmp_path, request.param)
    try:
        yield racers
    finally:
        racers.close()


def test_two_processes_creating_one_id_exactly_one_wins(racers: Racers) -> None:
    first, said_first = racers.start("A")
    assert said_first == "created"
    # The first creator holds the id, not yet written: the second is refused at once.
    second, said_second = racers.start("B")
    assert said_second.startswith("refused AgentConflictError: session shared is open "), (
        said_second
    )
    assert second.wait(timeout=30) == 0
    assert racers.finish(first) == "stored"
    assert racers.prompts() == ["from A"]


def test_a_process_creating_a_stored_id_is_refused_and_splices_nothing(racers: Racers) -> None:
    first, said = racers.start("A")
    assert said == "created"
    assert racers.finish(first) == "stored"
    _second, said_second = racers.start("B")
    assert said_second == (
        "refused AgentConflictError: session 'shared' is already stored: resume it instead "
        "of creating a new session over it"
    )
    assert racers.prompts() == ["from A"]


async def test_a_new_sessions_first_write_never_continues_a_stored_log(world: World) -> None:  # noqa: F811
    # Stored by another process, which let the session go since.
    elsewhere = world.other_backend()
    try:
        elsewhere.write(header("taken", cwd="/elsewhere"), events(0, 3))
        stored = records(elsewhere.load("taken"))
    finally:
        elsewhere.close()
    session = live(world.store, "taken")
    prompt(session, "mine")
    with pytest.raises(ExceptionGroup) as failed:  # the flush event's listeners
        await world.store.flush(session)
    assert [repr(error) for error in failed.value.exceptions] == [
        repr(StoreConflictError("session taken is already stored"))
    ]
    world.store.detach(session)
    assert records(world.other_backend().load("taken")) == stored


async def test_racing_resumes_in_one_process_lose_with_agent_conflict_error(
    tmp_path: Path,
) -> None:
    backend = JsonlBackend(tmp_path)
    # A crashed session: its last turn never closed, so a resume repairs it.
    opened = [
        event(0, "turn/start", data={"turn": 1}),
        event(1, "step/start", data={"turn": 1, "step": 1}),
        user_message(2, "left open"),
    ]
    backend.write(header("crashed"), opened)
    backend.close()
    async with Tether(data_dir=tmp_path, model="offline") as tether:
        results = await asyncio.gather(
            *(tether.agents.resume("crashed") for _ in range(3)), return_exceptions=True
        )
        winners = [r for r in results if isinstance(r, AgentHandle)]
        losers = [r for r in results if not isinstance(r, AgentHandle)]
        assert len(winners) == 1, results
        assert [type(loser) for loser in losers] == [AgentConflictError] * 2, losers
        await winners[0].dispose()
        ends = [
            e.to_record()["data"] for e in winners[0].agent.session.events if e.type == "turn/end"
        ]
        assert ends == [{"turn": 1, "reason": {"kind": "interrupted"}}]


def test_a_create_of_a_stored_id_is_refused_and_stores_nothing(
    open_backend: Callable[[], LogBackend],
) -> None:
    first, second = open_backend(), open_backend()
    first.create(header("s1", cwd="/first"), events(0, 2))
    for batch in ([], events(0, 1)):
        with pytest.raises(StoreConflictError, match="session s1 is already stored"):
            second.create(header("s1", cwd="/second"), batch)
    assert records(second.load("s1")) == events(0, 2)
    assert second.load("s1").header["cwd"] == "/first"
    second.create(header("s2"), [])
    assert second.exists("s2") and second.next_seq("s2") == 0


async def test_a_claim_cancelled_while_it_takes_the_lease_gives_the_lease_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Tether(data_dir=tmp_path, model="offline") as tether:
        persistence = tether.persistence
        entered, go = threading.Event(), threading.Event()
        exists = persistence._backend.exists

        def held_exists(session_id: str) -> bool:
            entered.set()
            go.wait(timeout=30)
            return exists(session_id)

        monkeypatch.setattr(persistence._backend, "exists", held_exists)
        session = Session(SessionHeader(id="chosen", created_at=0.0, cwd="/"))
        claiming = asyncio.create_task(persistence.claim(session))
        await asyncio.to_thread(entered.wait, 30)  # the lease is taken; the check runs
        claiming.cancel()
        go.set()
        with pytest.raises(asyncio.CancelledError):
            await claiming
        assert await persistence.holder("chosen") is None
