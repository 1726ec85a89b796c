"""What the context-size check costs a request that stays under the threshold.

Usage: python bench/bench_compaction.py [--turns N] [--requests N] [--runs N]

A session of ``--turns`` turns (a prompt, a tool call and its result, an
answer streamed in 20 chunks) is built in memory. Then ``--requests`` more
steps are appended one at a time and, after each, what the loop does before
a request is timed:

* ``history``: ``History.messages()``, the incremental derive (it now also
  estimates the size of each new message);
* ``check``: the size estimate and the threshold test
  (``Compaction.request_tokens`` and ``Compaction.due``), on top of it.

Run it on the base commit too, interleaved, to compare the history figure
(``PYTHONPATH=/tmp/old/src python bench/bench_compaction.py``): there the
check does not exist and ``history`` is the derive alone. The target: the
check adds at most 0.1 ms a request.
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace
from typing import Any

from tether.llm import TextBlock, ToolCallBlock
from tether.llm.request import ToolSpec
from tether.loop.history import History
from tether.session import (
    AssistantChunk,
    AssistantMessageEvent,
    Completed,
    Session,
    SessionHeader,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)

SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
TOOLS = tuple(ToolSpec(f"tool{i}", "Does one thing. " * 5, SCHEMA) for i in range(8))
SYSTEM = "You are tether. " * 200


def add_turn(session: Session, turn: int) -> None:
    session.append(TurnStart(turn))
    session.append(StepStart(turn, 1))
    session.append(UserMessageEvent(f"u{turn}", "user", (TextBlock(f"prompt {turn} " * 20),)))
    call = ToolCallBlock(f"c{turn}", "bash", {"command": f"ls -la dir{turn}"})
    session.append(AssistantMessageEvent((TextBlock("Let me look."), call), "tool-calls"))
    session.append(ToolCallEvent(call.id, call.name, call.arguments))
    session.append(ToolResultEvent(call.id, call.name, "file\n" * 40, is_error=False))
    session.append(StepEnd(turn, 1))
    session.append(StepStart(turn, 2))
    for _ in range(20):
        session.append(AssistantChunk(kind="text", delta="some words "))
    session.append(AssistantMessageEvent((TextBlock("some words " * 20),), "stop"))
    session.append(StepEnd(turn, 2))
    session.append(TurnEnd(turn, Completed()))


def run(turns: int, requests: int) -> dict[str, float]:
    session = Session(SessionHeader("bench", time.time(), "/"))
    for turn in range(1, turns + 1):
        add_turn(session, turn)
    history = History(session)
    history.messages()
    compaction: Any = None
    driver: Any = None
    try:
        from tether.loop.compaction import Compaction, CompactionSettings

        compaction = Compaction(None, CompactionSettings())  # type: ignore[arg-type]
        driver = SimpleNamespace(history=history, options=SimpleNamespace(model="openai:gpt-4.1"))
    except ImportError:
        pass  # the base commit: no compaction
    derive_times: list[float] = []
    check_times: list[float] = []
    due = False
    for turn in range(turns + 1, turns + requests + 1):
        add_turn(session, turn)
        start = time.perf_counter()
        history.messages()
        middle = time.perf_counter()
        if compaction is not None:
            due |= compaction.due(driver, compaction.request_tokens(driver, SYSTEM, TOOLS))
        end = time.perf_counter()
        derive_times.append(middle - start)
        check_times.append(end - middle)
    assert not due, "the bench conversation must stay under the threshold"
    return {
        "events": len(session.events),
        "messages": len(history.messages()),
        "history_ms": statistics.median(derive_times) * 1000,
        "check_ms": statistics.median(check_times) * 1000,
        "check_p99_ms": statistics.quantiles(check_times, n=100)[98] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2_000)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    import tether.loop.history as module

    print(f"tether from {module.__file__}")
    for index in range(args.runs):
        figures = run(args.turns, args.requests)
        print(
            f"run {index + 1}: {figures['events']:.0f} events, {figures['messages']:.0f} messages; "
            f"per request (median): history {figures['history_ms']:.4f} ms, "
            f"size check {figures['check_ms']:.4f} ms (p99 {figures['check_p99_ms']:.4f} ms)"
        )


if __name__ == "__main__":
    main()
