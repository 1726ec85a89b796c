"""What a big session costs in memory: loading it, listing it, and running it; prints its figures.

Usage: python bench/bench_memory.py [--size-mb N] [--mix answers|tools]
                                    [--backend jsonl|sqlite] [--prompts N ...]
                                    [--delivery submit|followup ...]
                                    [--only load,list,web,replay,live]

- **load** and **list**: a session log of ``--size-mb`` (default 1024) is
  written once, then loaded (`Persistence` does what `_load` does: decode,
  then restore) and listed, each in a fresh process. Printed: the peak
  resident memory the call added (``VmHWM`` after it, less ``VmRSS`` before
  it, the high-water mark reset first) divided by the log's size, and what
  stays resident once it returned (the loaded session).
- **web** and **replay**: the same log opened as a view opens it, measured
  the same way: ``web`` is `tether web`'s event stream catching up (the
  follower's batches, each encoded as the page gets it, then dropped);
  ``replay`` is ``session/load`` (the load, then its replay's updates, each
  encoded as a frame, then dropped).
  ``answers`` is a log of prompts and answers streamed in small chunks (most
  of its events are ``assistant/chunk``); ``tools`` adds a tool call and a
  result of a few KB to each turn.
- **live**: one agent on the offline model answers ``--prompts`` prompts
  (default 10,000 and 20,000) in one session (JSONL), each in a fresh
  process; printed is the growth of the process's resident memory next to
  the growth of the session's log. ``submit`` delivers each prompt
  acknowledged (stored before it runs) and waits until its turn is stored;
  ``followup`` queues it unacknowledged and waits until the agent is idle.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from tether.content import TextBlock, ToolCallBlock
from tether.persist.backends import JsonlBackend, LogBackend, SqliteBackend
from tether.session import (
    AssistantChunk,
    AssistantMessageEvent,
    Completed,
    EventPayload,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)
from tether.session.events import Event
from tether.session.log import SessionHeader

ENCODE = msgspec.json.Encoder().encode

BACKENDS: dict[str, type[JsonlBackend] | type[SqliteBackend]] = {
    "jsonl": JsonlBackend,
    "sqlite": SqliteBackend,
}


def rss(field: str = "VmRSS") -> int:
    """This process's resident memory (or another ``/proc/self/status`` field), in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def turn(number: int, mix: str, rnd: random.Random) -> list[EventPayload]:
    """The events of one turn: a prompt, an answer streamed in chunks of a word,
    and with ``tools`` a call of ``read`` and its result first."""
    prompt = f"question {number} " + "about this code " * rnd.randint(1, 30)
    events: list[EventPayload] = [
        TurnStart(turn=number),
        StepStart(turn=number, step=1),
        UserMessageEvent(id=f"u{number}", source="user", content=(TextBlock(prompt),)),
    ]
    step = 1
    if mix == "tools":
        arguments = {"path": f"src/module{number}.py"}
        text = "".join(f"    value_{i} = {rnd.random()!r}\n" for i in range(rnd.randint(20, 200)))
        events += [
            AssistantMessageEvent(
                content=(ToolCallBlock(id=f"c{number}", name="read", arguments=arguments),),
                finish="tool-calls",
                interrupted=False,
            ),
            ToolCallEvent(id=f"c{number}", name="read", arguments=arguments),
            ToolResultEvent(id=f"c{number}", name="read", content=text, is_error=False),
            StepEnd(turn=number, step=1),
            StepStart(turn=number, step=2),
        ]
        step = 2
    words = [f"word{i} " for i in range(rnd.randint(10, 60))]
    events += [AssistantChunk(kind="text", delta=word) for word in words]
    events += [
        AssistantMessageEvent(
            content=(TextBlock("".join(words)),), finish="stop", interrupted=False
        ),
        StepEnd(turn=number, step=step),
        TurnEnd(turn=number, reason=Completed()),
    ]
    return events


def write_log(backend: LogBackend, session_id: str, size: int, mix: str) -> int:
    """Write a session of about ``size`` bytes of event lines, a turn per batch,
    holding none of it; return the bytes of its event lines."""
    header = SessionHeader(id=session_id, created_at=time.time(), cwd="/").to_record()
    backend.write(header, [])
    rnd = random.Random(1)
    seq, number, written = 0, 0, 0
    while written < size:
        number += 1
        batch = []
        for payload in turn(number, mix, rnd):
            record = Event.from_payload(payload, seq=seq, time=time.time()).to_stored_record()
            batch.append(record)
            written += len(ENCODE(record)) + 1
            seq += 1
        backend.write(header, batch)
    return written


def measure(backend_name: str, root: str, session_id: str, what: str) -> dict[str, float]:
    """Load or list ``session_id`` in this process; its memory figures in bytes."""
    from tether.persist.service import _load

    backend = BACKENDS[backend_name](root)
    gc.collect()
    before = rss()
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # resets VmHWM to VmRSS
    start = time.perf_counter()
    if what == "load":
        kept: object = _load(backend, session_id)
    elif what == "list":
        kept = backend.list()
    else:
        kept = asyncio.run(OPENERS[what](backend, session_id))
    elapsed = time.perf_counter() - start
    return {"peak": rss("VmHWM") - before, "held": rss() - before, "seconds": elapsed}
    del kept


async def open_web(backend: LogBackend, session_id: str) -> None:
    """Read ``session_id`` as `tether web`'s event stream does, from its first event."""
    from tether.front.follow import SessionViews
    from tether.persist.service import _load
    from tether.web.app import EncodedLogs

    total: list[int] = []

    class Stored:
        async def load(self, session_id: str) -> object:
            session, _ = _load(backend, session_id)
            total.append(len(session.events))
            return session

    class NoneLive:
        def get(self, session_id: str) -> None:
            return None

    follows = SessionViews(NoneLive(), Stored())  # type: ignore[arg-type]
    encoded = EncodedLogs()
    encoded.enter(session_id)
    follow = follows.follow(session_id)
    async for batch in follow:
        encoded.message(session_id, batch)
        if batch[-1].seq == total[0] - 1:
            break
    await follow.aclose()


async def open_replay(backend: LogBackend, session_id: str) -> None:
    """Replay ``session_id`` as ``session/load`` does, each update encoded as a frame."""
    from tether.acp.replay import replay
    from tether.acp.transport import encode_frame
    from tether.persist.service import _load

    session, _ = _load(backend, session_id)
    for update in replay(session.events, stop=len(session.events)):
        encode_frame({"jsonrpc": "2.0", "method": "session/update", "params": {"update": update}})


OPENERS = {"web": open_web, "replay": open_replay}


async def live(prompts: int, delivery: str) -> tuple[int, int]:
    """Resident memory and log growth over ``prompts`` prompts of one session,
    each delivered by ``delivery`` (``submit`` or ``followup``)."""
    from tether.agent import UserMessage
    from tether.host import Tether

    with tempfile.TemporaryDirectory() as tmp:
        async with Tether(data_dir=Path(tmp)) as tether:
            handle = await tether.agents.create(cwd="/")
            agent = handle.agent
            path = Path(tmp) / "sessions" / f"{agent.session.id}.jsonl"

            async def ask(count: int) -> None:
                for index in range(count):
                    message = UserMessage.text(f"prompt {index}")
                    if delivery == "submit":
                        await (await agent.submit(message)).durable()
                    else:
                        agent.followup(message)
                        await agent.when_idle()

            await ask(100)  # warm: the first requests build what every one reuses
            gc.collect()
            memory, size = rss(), path.stat().st_size
            await ask(prompts)
            gc.collect()
            grown = rss() - memory, path.stat().st_size - size
            await handle.dispose()
    return grown


def child(argv: list[str]) -> None:
    """``--child BACKEND ROOT ID load|list|web|replay``: measure one call, print its
    figures; ``--child live PROMPTS DELIVERY``: run one session, print its growth."""
    if argv[0] == "live":
        grown, logged = asyncio.run(live(int(argv[1]), argv[2]))
        print(json.dumps({"grown": grown, "logged": logged}))
        return
    backend, root, session_id, what = argv
    print(json.dumps(measure(backend, root, session_id, what)))


def in_child(*argv: str) -> dict[str, float]:
    """The figures ``--child ARGV…`` prints, measured in a fresh process."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", *argv], check=True, capture_output=True, text=True
    ).stdout
    figures: dict[str, float] = json.loads(out)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--mix", choices=("answers", "tools"), action="append")
    parser.add_argument("--backend", choices=sorted(BACKENDS), action="append")
    parser.add_argument("--prompts", type=int, action="append")
    parser.add_argument("--delivery", choices=("submit", "followup"), action="append")
    parser.add_argument("--only", default="load,list,web,replay,live")
    args = parser.parse_args()
    only = set(args.only.split(","))
    views = {"load", "list", "web", "replay"}
    if only & views:
        for name in args.backend or ["jsonl"]:
            for mix in args.mix or ["answers", "tools"]:
                with tempfile.TemporaryDirectory() as root:
                    backend = BACKENDS[name](root)
                    size = write_log(backend, "big", args.size_mb << 20, mix)
                    backend.close()
                    for what in sorted(only & views):
                        got = in_child(name, root, "big", what)
                        peak, held = got["peak"], got["held"]
                        print(
                            f"{name} {mix} {what}: log {size / 1e6:.0f} MB,"
                            f" peak +{peak / 1e6:.0f} MB = {peak / size:.2f}x the log,"
                            f" held after +{held / 1e6:.0f} MB = {held / size:.2f}x,"
                            f" {got['seconds']:.1f} s"
                        )
    if "live" in only:
        for prompts in args.prompts or [10_000, 20_000]:
            for delivery in args.delivery or ["submit", "followup"]:
                got = in_child("live", str(prompts), delivery)
                grown, logged = got["grown"], got["logged"]
                print(
                    f"live {delivery}, {prompts} prompts in one session:"
                    f" resident +{grown / 1e6:.1f} MB, log +{logged / 1e6:.1f} MB"
                    f" = {grown / logged:.2f}x the log"
                )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2:])
    else:
        main()
