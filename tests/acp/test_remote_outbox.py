"""A network connection's numbered frames: whatever the points at which a client drops
and comes back naming the last frame it got, it gets every frame once, in order."""

from __future__ import annotations

import asyncio
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.acp.remote import MountedBridge, RemoteConnection


def _connection(keep: int = 1000) -> RemoteConnection:
    source = MountedBridge(None, {"service": "acp_test"}, "test")  # type: ignore[arg-type]
    return RemoteConnection("c", source, grace=60.0, keep=keep, images=False)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.booleans(), max_size=12), min_size=1, max_size=8))
def test_a_client_that_drops_anywhere_and_names_its_last_frame_gets_each_frame_once(
    visits: list[list[bool]],
) -> None:
    """Each visit attaches after the last frame got, then writes (``True``) and reads
    (``False``, when a frame is there) in the given order, then drops."""

    async def run() -> None:
        connection = _connection()
        written = 0
        got: list[int] = []
        last = 0

        def write() -> None:
            nonlocal written
            connection.write({"jsonrpc": "2.0", "method": "n", "params": written})
            written += 1

        for visit in [*visits, [False] * 200]:
            reader = connection.attach(last)
            frames = reader.frames()
            try:
                for put in visit:
                    if put:
                        write()
                    elif last < connection.outbox.last:
                        seq, data = await anext(frames)
                        assert seq == last + 1
                        last = seq
                        got.append(json.loads(data)["params"])
            finally:
                await frames.aclose()
                reader.leave()
        assert got == list(range(written))

    asyncio.run(run())


async def test_a_new_reader_ends_the_one_before_it() -> None:
    connection = _connection()
    connection.write({"jsonrpc": "2.0", "method": "n", "params": 0})
    first = connection.attach(0).frames()
    assert (await anext(first))[0] == 1
    waiting = asyncio.ensure_future(anext(first))
    await asyncio.sleep(0)
    second = connection.attach(1)
    async with asyncio.timeout(5):
        try:
            await waiting
            raise AssertionError("the superseded reader went on")
        except StopAsyncIteration:
            pass
    connection.write({"jsonrpc": "2.0", "method": "n", "params": 1})
    assert (await anext(second.frames()))[0] == 2


async def test_frames_not_yet_read_are_kept_and_past_the_kept_ones_refused_never_skipped() -> None:
    from tether.acp.remote import ReplayGoneError

    connection = _connection(keep=3)
    for n in range(5):
        connection.write({"jsonrpc": "2.0", "method": "n", "params": n})
    reader = connection.attach(0)  # nothing was read yet: all five are there
    frames = reader.frames()
    assert [(await anext(frames))[0] for _ in range(5)] == [1, 2, 3, 4, 5]
    await frames.aclose()
    reader.leave()
    try:
        connection.attach(1)
        raise AssertionError("a gap was served")
    except ReplayGoneError as exc:
        assert "no longer kept" in str(exc)
    assert [seq for seq, _ in connection.outbox.since(2)] == [3, 4, 5]
