"""What ``usage_update`` adds to each answer of an ACP session, in process; prints its figures.

Usage: python bench/bench_acp_usage.py [--answers N] [--runs N]

The per-prompt latency of ``bench/bench_acp.py`` goes through a subprocess and
the fake model's HTTP server, so on a loaded machine its spread hides a cost
of microseconds. This measures the work itself: mapping the events of N
answers (a prompt, three text chunks, the answer with its usage figures, as
the fake model of ``bench_acp.py`` streams them) to ``session/update`` frames
and encoding them, with the usage meter (usage, window and cost, as
``--prices`` sets them) and without it (the mapping as it was before usage
updates). Best of ``--runs``, interleaved.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tether.acp.transport import encode_frame  # noqa: E402
from tether.acp.updates import UpdateMapper  # noqa: E402
from tether.acp.usage import UsageMeter  # noqa: E402
from tether.content import TextBlock  # noqa: E402
from tether.llm.catalog import ModelCatalog, ModelEntry, Prices  # noqa: E402
from tether.session import (  # noqa: E402
    AssistantChunk,
    AssistantMessageEvent,
    Completed,
    Event,
    StepEnd,
    StepStart,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)
from tether.session.log import Session, SessionHeader  # noqa: E402

MODEL = "openai-compatible:bench"
CATALOG = ModelCatalog(
    {
        MODEL: ModelEntry(
            context_window=65536, prices=Prices(input=0.27, output=1.10, cached_input=0.07)
        )
    }
)


def session_of(answers: int) -> list[Event]:
    session = Session(SessionHeader(id="bench", created_at=time.time(), cwd="/"))
    for turn in range(1, answers + 1):
        for payload in (
            TurnStart(turn=turn),
            StepStart(turn=turn, step=1),
            UserMessageEvent(id=f"u{turn}", source="user", content=(TextBlock("prompt"),)),
            AssistantChunk(kind="text", delta="A short answer "),
            AssistantChunk(kind="text", delta="from the fake model, "),
            AssistantChunk(kind="text", delta="in a few pieces."),
            AssistantMessageEvent(
                content=(TextBlock("A short answer from the fake model, in a few pieces."),),
                finish="stop",
                usage={"input_tokens": 5 + turn, "output_tokens": 10, "cached_input_tokens": 2},
            ),
            StepEnd(turn=turn, step=1),
            TurnEnd(turn=turn, reason=Completed()),
        ):
            session.append(payload)
    return list(session.events)


def map_and_encode(events: list[Event], meter: UsageMeter | None) -> tuple[float, int]:
    mapper = UpdateMapper(live=True, meter=meter, titled=True)
    frames = 0
    start = time.perf_counter()
    for event in events:
        for update in mapper.updates(event):
            params = {"sessionId": "bench", "update": update}
            encode_frame({"jsonrpc": "2.0", "method": "session/update", "params": params})
            frames += 1
    return time.perf_counter() - start, frames


def main(args: argparse.Namespace) -> None:
    events = session_of(args.answers)
    without: list[float] = []
    with_usage: list[float] = []
    frames = (0, 0)
    for _ in range(args.runs):
        seconds, plain = map_and_encode(events, None)
        without.append(seconds)
        seconds, metered = map_and_encode(events, UsageMeter(CATALOG, MODEL))
        with_usage.append(seconds)
        frames = (plain, metered)
    per_without = min(without) / args.answers * 1e6
    per_with = min(with_usage) / args.answers * 1e6
    print(
        f"{args.answers} answers, best of {args.runs}: frames {frames[0]} without usage, "
        f"{frames[1]} with"
    )
    print(f"map + encode per answer: {per_without:.1f} us without usage updates")
    print(f"map + encode per answer: {per_with:.1f} us with usage updates (window and cost)")
    print(f"added per answer: {per_with - per_without:.1f} us")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=7)
    main(parser.parse_args())
