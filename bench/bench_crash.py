"""Crash benchmark: SIGKILL ``tether acp`` at random points; count what acknowledged work is lost.

Usage: python bench/bench_crash.py [--kills N] [--backend jsonl|sqlite] [--sessions N] [--seed S]

Each round starts ``tether acp`` on one ``TETHER_HOME`` (the scripted test
model and the test ``bash`` tool), opens a few sessions — new ones, and
sessions earlier rounds left behind (``session/load``, which repairs what the
last kill left open) — and has every session prompt in a loop, streaming and
calling tools. The process is then killed with SIGKILL: after a random delay,
or (every third round) the instant an answer arrives.

Afterwards every session ever acknowledged is read back with the core event
registry only. Two figures, both of which must be 0:

* acknowledged turns lost: a prompt whose answer the client received whose
  turn is not stored, closed, in its session's log;
* unloadable sessions: a session whose log no longer loads as a session.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from acp.core import connect_to_agent  # noqa: E402
from acp.exceptions import RequestError  # noqa: E402
from acp.helpers import text_block  # noqa: E402
from tests.acp.harness import SCRIPTED, SQLITE  # noqa: E402

from tether.persist.backends import JsonlBackend, LogBackend, SqliteBackend  # noqa: E402
from tether.session import (  # noqa: E402
    EventRegistry,
    Session,
    SessionHeader,
    UserMessageEvent,
)

BACKENDS: dict[str, tuple[str, Callable[[Path], LogBackend]]] = {
    "jsonl": (SCRIPTED, JsonlBackend),
    "sqlite": (SQLITE, SqliteBackend),
}


class Client:
    async def session_update(self, session_id: str, update: Any, **_meta: Any) -> None:
        pass

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the benchmark runs in auto mode")


class Round:
    """One ``tether acp`` process, prompting in several sessions until it is killed."""

    def __init__(self, home: Path, overlay: Path, rng: random.Random, number: int) -> None:
        self.home = home
        self.overlay = overlay
        self.rng = rng
        self.number = number
        self.acknowledged: list[tuple[str, str]] = []
        self.killed = asyncio.Event()
        self.process: asyncio.subprocess.Process | None = None

    def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
        self.killed.set()

    async def run(self, stored: list[str], sessions: int, at_answer: bool) -> list[str]:
        """Prompt until killed; return the ids of sessions opened (acknowledged)."""
        self.process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "tether.cli.main", "--config", str(self.overlay)),
            *("acp", "--model", "scripted", "--mode", "auto"),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={
                **os.environ,
                "TETHER_HOME": str(self.home),
                "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
            },
            cwd=str(ROOT),
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        conn = connect_to_agent(Client(), self.process.stdin, self.process.stdout)
        opened: list[str] = []
        try:
            await conn.initialize(protocol_version=1)
            for sid in self.rng.sample(stored, min(len(stored), sessions // 2)):
                await conn.load_session(cwd=str(self.home), session_id=sid, mcp_servers=[])
                opened.append(sid)
            while len(opened) < sessions:
                opened.append(
                    (await conn.new_session(cwd=str(self.home), mcp_servers=[])).session_id
                )
            kill_after = None if at_answer else self.rng.uniform(0.0, 0.4)
            workers = [self._prompting(conn, sid, at_answer) for sid in opened]
            if kill_after is not None:
                workers.append(self._kill_after(kill_after))
            await asyncio.gather(*workers, return_exceptions=True)
        except (ConnectionError, RequestError, asyncio.IncompleteReadError):
            pass
        finally:
            self.kill()
            await self.process.wait()
            # A request being sent as the process died fails its closing too.
            with contextlib.suppress(ConnectionError):
                await conn.close()
        return opened

    async def _kill_after(self, delay: float) -> None:
        await asyncio.sleep(delay)
        self.kill()

    async def _prompting(self, conn: Any, sid: str, at_answer: bool) -> None:
        index = 0
        while not self.killed.is_set():
            index += 1
            text = f"r{self.number} {sid[-8:]} {index}"
            prompt = f"bash echo {text}" if index % 2 else text
            try:
                await conn.prompt(session_id=sid, prompt=[text_block(prompt)])
            except Exception:
                return
            if self.killed.is_set():
                return
            # Acknowledged: counted before anything else can run.
            self.acknowledged.append((sid, prompt))
            if at_answer and len(self.acknowledged) >= 2 and self.rng.random() < 0.5:
                self.kill()
                return


def check(home: Path, backend: str, acknowledged: dict[str, set[str]]) -> tuple[int, int]:
    """(acknowledged turns lost, unloadable sessions), read with the core registry only."""
    log = BACKENDS[backend][1](home)
    lost = unloadable = 0
    try:
        for sid, prompts in acknowledged.items():
            try:
                registry = EventRegistry()
                stored = log.load_events(sid, registry)
                session = Session.restore(
                    SessionHeader.from_record(stored.header),
                    stored.events,
                    registry=registry,
                    decoded=True,
                )
            except Exception as exc:
                print(f"  unloadable {sid}: {exc}")
                unloadable += 1
                lost += len(prompts)
                continue
            closed = closed_prompts(session)
            missing = prompts - closed
            if missing:
                print(f"  lost in {sid}: {sorted(missing)}")
            lost += len(missing)
    finally:
        log.close()
    return lost, unloadable


def closed_prompts(session: Session) -> set[str]:
    """The prompts whose turn has its ``turn/end`` in the log."""
    found: set[str] = set()
    pending: list[str] = []
    for event in session.events:
        if event.type == "turn/start":
            pending = []
        elif isinstance(event.payload, UserMessageEvent):
            pending.extend(block.text for block in event.payload.content if hasattr(block, "text"))
        elif event.type == "turn/end":
            found.update(pending)
    return found


async def main(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    overlay_text, _open = BACKENDS[args.backend]
    acknowledged: dict[str, set[str]] = {}
    total = 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as directory:
        base = Path(directory)
        home = base / "home"
        home.mkdir()
        overlay = base / "overlay.yml"
        overlay.write_text(overlay_text.format(ledger='"' + str(base / "ledger.txt") + '"'))
        for number in range(args.kills):
            round_ = Round(home, overlay, rng, number)
            opened = await round_.run(
                sorted(acknowledged), args.sessions, at_answer=number % 3 == 0
            )
            for sid in opened:
                acknowledged.setdefault(sid, set())
            for sid, prompt in round_.acknowledged:
                acknowledged[sid].add(prompt)
            total += len(round_.acknowledged)
        lost, unloadable = check(home, args.backend, acknowledged)
    elapsed = time.perf_counter() - started
    print(
        f"{args.backend}: {args.kills} SIGKILLs of tether acp ({args.sessions} sessions each, "
        f"streaming and calling tools; every third at an answer) in {elapsed:.0f} s"
    )
    print(f"    acknowledged turns: {total}; sessions: {len(acknowledged)}")
    print(f"    acknowledged turns lost: {lost}   (target 0)")
    print(f"    unloadable sessions: {unloadable}   (target 0)")
    if lost or unloadable:
        sys.exit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--backend", choices=sorted(BACKENDS), default="jsonl")
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--seed", type=int, default=None)
    asyncio.run(main(parser.parse_args()))
