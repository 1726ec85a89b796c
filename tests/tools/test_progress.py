"""A running call's progress: the last lines of its output, reported at a modest rate."""

from __future__ import annotations

import asyncio
import itertools

from tether.tools.progress import (
    HEARTBEAT,
    MIN_INTERVAL,
    TAIL_LINES,
    ProgressReporter,
    ToolProgress,
)


async def test_the_first_report_is_sent_at_start_with_nothing_output() -> None:
    sent: list[ToolProgress] = []
    reporter = ProgressReporter("c1", "bash", sent.append)
    reporter.start()
    reporter.close()
    assert [(p.call_id, p.name, p.tail) for p in sent] == [("c1", "bash", ())]
    assert sent[0].elapsed < 1


async def test_the_tail_keeps_the_last_lines_and_a_carriage_return_starts_a_line_over() -> None:
    reporter = ProgressReporter("c1", "bash", lambda _: None)
    reporter.feed("".join(f"line {n}\n" for n in range(20)).encode())
    reporter.feed(b"progress 10%\rprogress 50%\r")
    tail = reporter.snapshot().tail
    reporter.close()
    assert len(tail) == TAIL_LINES
    assert tail[-1] == "progress 50%"
    assert tail[:-1] == tuple(f"line {n}" for n in range(16, 20))


async def test_a_character_split_between_two_pieces_is_decoded_whole() -> None:
    reporter = ProgressReporter("c1", "bash", lambda _: None)
    data = "café\n".encode()
    reporter.feed(data[:4])
    reporter.feed(data[4:])
    assert reporter.snapshot().tail == ("café",)
    reporter.close()


async def test_a_burst_of_output_is_reported_at_most_every_min_interval() -> None:
    sent: list[tuple[float, ToolProgress]] = []
    loop = asyncio.get_running_loop()
    reporter = ProgressReporter("c1", "bash", lambda p: sent.append((loop.time(), p)))
    reporter.start()
    for n in range(200):
        reporter.feed(f"line {n}\n".encode())
        await asyncio.sleep(0.005)
    reporter.close()
    times = [at for at, _ in sent]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert len(sent) >= 3
    assert min(gaps) >= MIN_INTERVAL * 0.9
    closed_at = len(sent)
    await asyncio.sleep(MIN_INTERVAL * 2)
    assert len(sent) == closed_at  # nothing after close


async def test_a_silent_command_is_still_reported_every_heartbeat() -> None:
    sent: list[ToolProgress] = []
    reporter = ProgressReporter("c1", "bash", sent.append)
    reporter.start()
    await asyncio.sleep(HEARTBEAT * 2.5)
    reporter.close()
    assert len(sent) == 3
    assert sent[-1].elapsed >= HEARTBEAT * 2
