"""``tether chat`` on a terminal: start-up to the prompt, and Markdown rendering of a long
streamed answer; prints its figures.

Usage: python bench/bench_chat.py [--runs N] [--tokens-per-second R] [--vs SRC]

With ``--vs SRC`` (another tree's ``src``), it compares the time to the
prompt of this tree's chat with that tree's instead: whole processes,
interleaved (A B A B ...), the ratio taken pair by pair.

1. **Ready for input**: spawn ``tether chat`` on a pseudo-terminal (offline
   model, a fresh data directory) and time until the ``you>`` prompt is drawn.
   Target: <= 350 ms.
2. **Rendering keeps up**: a 100 KB Markdown answer (headings, paragraphs,
   lists, code blocks, tables) is fed to the chat's Markdown surface in
   4-character tokens at R tokens/s (default 2,000) on an event loop, as a
   stream arrives; each token's lag is the time from when it was due to when
   its rendering returned. The stream keeps up when the lag stays bounded: the
   figures are the lag's median and maximum in each quarter of the answer
   (no growing lag: the last quarter is no worse than the first), and the
   rendering's capacity (tokens/s with no pacing).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOKEN_CHARS = 4


def ready_ms(runs: int, src: Path | None = None) -> list[float]:
    """Spawn-to-prompt times of ``runs`` chats (of the tree whose ``src`` this is)."""
    return [ready_once(src) for _ in range(runs)]


def ready_once(src: Path | None = None) -> float:
    """One chat on a pseudo-terminal, spawn to ``you>``, in ms (``src``: another tree's)."""
    from tests.cli.terminal import Terminal

    env = {"PYTHONDONTWRITEBYTECODE": ""}
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src.resolve()), str(ROOT)])
    home = Path(tempfile.mkdtemp(prefix="bench-chat-"))
    try:
        chat = Terminal(home, env=env)
        try:
            chat.expect("you>")
            elapsed = (time.monotonic() - chat.started) * 1000
            chat.send(b"\x04")
            chat.finish()
        finally:
            chat.close()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return elapsed


def compare(other: Path, runs: int) -> None:
    """This tree's chat against ``other``'s, interleaved; each figure, then the ratios."""
    ready_once(), ready_once(other)  # warm both trees' bytecode caches
    ours, theirs = [], []
    for _ in range(runs):
        ours.append(ready_once())
        theirs.append(ready_once(other))
    ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
    print(
        f"chat ready, {runs} interleaved pairs: this tree median {statistics.median(ours):.0f} ms "
        f"(min {min(ours):.0f}, max {max(ours):.0f}); {other} median "
        f"{statistics.median(theirs):.0f} ms (min {min(theirs):.0f}, max {max(theirs):.0f})"
    )
    print(
        f"ratio pair by pair: median {statistics.median(ratios):.3f}, "
        f"min {min(ratios):.3f}, max {max(ratios):.3f}"
    )


def answer(size: int = 100_000) -> str:
    """A Markdown answer of about ``size`` characters, of the kinds models write."""
    parts = []
    n = 0
    while sum(len(p) for p in parts) < size:
        n += 1
        parts.append(
            f"## Part {n}\n\n"
            f"This paragraph explains **step {n}** with `inline code` and a [link](http://x/{n}); "
            "it runs long enough to wrap on a terminal, as an answer's paragraphs do, and goes "
            "on for a while more before it ends.\n\n"
            f"- first point of part {n}\n- second point, *emphasised*\n  - a nested point\n\n"
            f"```python\ndef step_{n}(x: int) -> int:\n    return x * {n}\n```\n\n"
            f"| name | value |\n|---|---|\n| a{n} | {n} |\n| b{n} | {n * 2} |\n\n"
        )
    return "".join(parts)[:size]


def tokens_of(text: str) -> list[str]:
    return [text[i : i + TOKEN_CHARS] for i in range(0, len(text), TOKEN_CHARS)]


def surface() -> object:
    from tether.cli.surface import RichSurface

    rendered = io.StringIO()
    shown = RichSurface(rendered)
    shown.console.width = 100
    return shown


def capacity(tokens: list[str]) -> float:
    """Tokens rendered per second, unpaced."""
    shown = surface()
    started = time.perf_counter()
    for token in tokens:
        shown.answer(token)  # type: ignore[attr-defined]
    shown.end_block()  # type: ignore[attr-defined]
    return len(tokens) / (time.perf_counter() - started)


async def paced(tokens: list[str], rate: float) -> list[float]:
    """Each token's lag (ms) behind its due time, fed at ``rate`` tokens/s."""
    shown = surface()
    loop = asyncio.get_running_loop()
    start = loop.time()
    lags = []
    for index, token in enumerate(tokens):
        due = start + index / rate
        now = loop.time()
        if due > now:
            await asyncio.sleep(due - now)
        shown.answer(token)  # type: ignore[attr-defined]
        lags.append((loop.time() - due) * 1000)
    return lags


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--tokens-per-second", type=float, default=2_000)
    parser.add_argument("--vs", type=Path, help="compare with the tree whose src this is")
    options = parser.parse_args()
    os.environ.pop("NO_COLOR", None)
    if options.vs is not None:
        compare(options.vs, options.runs)
        return

    timings = ready_ms(options.runs)
    print(
        f"chat ready for input (spawn -> prompt drawn, pty), {len(timings)} runs: "
        f"median {statistics.median(timings):.0f} ms, "
        f"min {min(timings):.0f}, max {max(timings):.0f} (target <= 350 ms)"
    )

    tokens = tokens_of(answer())
    print(f"answer: {sum(len(t) for t in tokens):,} characters, {len(tokens):,} tokens")
    print(f"rendering capacity, unpaced: {capacity(tokens):,.0f} tokens/s")
    rate = options.tokens_per_second
    lags = asyncio.run(paced(tokens, rate))
    quarter = len(lags) // 4
    for q in range(4):
        part = lags[q * quarter : (q + 1) * quarter]
        print(
            f"paced at {rate:,.0f} tokens/s, quarter {q + 1}: lag median "
            f"{statistics.median(part):.1f} ms, max {max(part):.1f} ms"
        )
    print(f"last token rendered {lags[-1]:.1f} ms after it was due")


if __name__ == "__main__":
    main()
