"""Hostile input never stops the server: a live ``tether acp`` takes 10,000 generated frames.

The frames (from hypothesis strategies) are everything a broken or hostile
client could send: JSON of every type where an object belongs, envelopes
with wrong-typed fields, nesting far past any decoder's limit, megabyte
strings, bytes that are not UTF-8, ids used twice, notifications with ids,
requests without params, cancels of requests that do not exist. They go in
batches, one write per batch, while two sessions run prompts. After every
batch a real prompt must be answered (the server neither exited nor hung);
at the end the prompt that ran through the whole barrage has finished, and
the server's memory is back within 1.2 times what it used before.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import warnings
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import strategies as st
from hypothesis.errors import HypothesisWarning

from tests.acp.harness import serving

FRAMES = 10_000
BATCH = 100
WARM = 10 * BATCH
"""The frames after which the memory is measured the first time."""
DRAW = 25
"""Frames drawn per hypothesis example (cheaper per frame than one each; small enough
that no example outgrows hypothesis's buffer)."""
BATCH_BOUND = 20.0
"""Seconds one batch and the prompt after it may take (generous: shared machines)."""

METHODS = [
    "initialize",
    "authenticate",
    "session/new",
    "session/load",
    "session/list",
    "session/set_mode",
    "session/prompt",
    "session/cancel",
    "session/fork",
    "$/cancel_request",
    "_ext/thing",
    "no/such/method",
]

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=6,
)
# Ids the test's own client never uses (its ids are small integers), so no
# answer to a hostile frame can be mistaken for an answer to the client.
ids = (
    st.sampled_from(["dup", "dup-2", 10**12])  # reused: duplicate ids
    | st.text(max_size=10).map(lambda text: f"fz-{text}")
    | st.integers(min_value=10**9)
    | st.floats(min_value=1e9, max_value=1e15)
    | st.none()
    | st.booleans()
    | st.lists(st.integers(), max_size=2)
)
not_strings = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.lists(scalars, max_size=3)
    | st.dictionaries(st.text(max_size=5), scalars, max_size=3)
)


def _line(value: Any) -> bytes:
    return json.dumps(value).encode()


@st.composite
def envelopes(draw: st.DrawFn) -> bytes:
    """A JSON-RPC-shaped object, every field possibly wrong."""
    frame: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        frame["jsonrpc"] = "2.0" if draw(st.integers(0, 4)) else draw(scalars)
    if draw(st.booleans()):
        frame["id"] = draw(ids)
    if draw(st.integers(0, 9)):
        frame["method"] = (
            draw(st.sampled_from(METHODS)) if draw(st.integers(0, 5)) else draw(json_values)
        )
    if draw(st.booleans()):
        params = draw(st.dictionaries(st.sampled_from(PARAM_NAMES), not_strings, max_size=4))
        if draw(st.booleans()):
            params["sessionId"] = draw(st.text(max_size=12))
        frame["params"] = params if draw(st.integers(0, 5)) else draw(json_values)
    if draw(st.integers(0, 4)) == 0:
        frame[draw(st.sampled_from(["result", "error"]))] = draw(json_values)
    return _line(frame)


PARAM_NAMES = [
    "cwd",
    "sessionId",
    "prompt",
    "protocolVersion",
    "modeId",
    "mcpServers",
    "id",
    "_meta",
]


@st.composite
def deep(draw: st.DrawFn) -> bytes:
    depth = draw(st.integers(50, 4000))
    opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
    inner = b"1" if opener != b"[" else b""
    body = opener * depth + inner + closer * depth
    if draw(st.booleans()):
        return (
            b'{"jsonrpc":"2.0","id":"fz-deep","method":"session/list","params":{"x":' + body + b"}}"
        )
    return body


@st.composite
def huge(draw: st.DrawFn) -> bytes:
    size = draw(st.sampled_from([1_000, 10_000, 100_000, 100_000, *[1_000] * 4, 1_000_000]))
    where = draw(st.sampled_from(["method", "id", "cwd", "text"]))
    big = "x" * size
    if where == "method":
        return _line({"jsonrpc": "2.0", "id": "fz-huge", "method": big})
    if where == "id":
        return _line({"jsonrpc": "2.0", "id": big, "method": "session/list", "params": {}})
    if where == "cwd":
        return _line(
            {"jsonrpc": "2.0", "id": "fz-huge", "method": "session/new", "params": {"cwd": big}}
        )
    prompt = {"sessionId": "fz-none", "prompt": [{"type": "text", "text": big}]}
    return _line({"jsonrpc": "2.0", "id": "fz-huge", "method": "session/prompt", "params": prompt})


def _without_newlines(data: bytes) -> bytes:
    return data.replace(b"\n", b" ")


frames = st.one_of(
    envelopes(),
    json_values.map(_line),  # a valid JSON value where a frame belongs
    deep(),
    st.binary(min_size=1, max_size=64).map(_without_newlines),  # not UTF-8, not JSON
    st.text(max_size=40).map(lambda text: _without_newlines(text.encode("utf-8", "surrogatepass"))),
    huge(),
    # A notification sent with an id; a request that needs params, without them.
    ids.map(lambda i: _line({"jsonrpc": "2.0", "id": i, "method": "session/cancel", "params": {}})),
    st.tuples(ids, st.sampled_from(METHODS)).map(
        lambda pair: _line({"jsonrpc": "2.0", "id": pair[0], "method": pair[1]})
    ),
)


def generated_frames(count: int) -> list[bytes]:
    """``count`` frames drawn from :data:`frames` (deterministically: the test is repeatable)."""
    drawn: list[bytes] = []

    class Enough(Exception):
        pass

    @settings(
        max_examples=count // DRAW * 3,
        verbosity=Verbosity.quiet,
        report_multiple_bugs=False,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(frames, min_size=DRAW, max_size=DRAW))
    def collect(batch: list[bytes]) -> None:
        drawn.extend(batch)
        if len(drawn) >= count:
            raise Enough

    with contextlib.suppress(Enough), warnings.catch_warnings():
        # Stopping is a "failure" whose example hypothesis would render, at length.
        warnings.simplefilter("ignore", HypothesisWarning)
        collect()
    return drawn[:count]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


async def test_ten_thousand_hostile_frames_never_stop_the_server(tmp_path: Path) -> None:
    hostile = generated_frames(FRAMES)
    assert len(hostile) == FRAMES
    async with serving(tmp_path) as server:
        worker = await server.new_session()
        pinger = await server.new_session()
        assert await server.prompt(pinger, "warm up") == "end_turn"
        # Runs through the whole barrage: the command waits on a file the test writes at the end.
        release = tmp_path / "release"
        running = server.start_prompt(
            worker, f"bash while [ ! -e {release} ]; do sleep 0.05; done; echo finished"
        )
        baseline = 0
        for start in range(0, FRAMES, BATCH):
            server.write_raw(b"".join(f + b"\n" for f in hostile[start : start + BATCH]))
            async with asyncio.timeout(BATCH_BOUND):
                assert await server.prompt(pinger, f"ping {start}") == "end_turn"
            assert server.process.returncode is None
            assert not running.done()
            if start == WARM:
                # What is done once is done by now (the first command's sandbox, snapshot
                # and watcher, the modules each method imports on first use): from here
                # on, memory must not grow with the frames.
                baseline = rss_kib(server.process.pid)
        release.write_text("")
        async with asyncio.timeout(BATCH_BOUND):
            assert await running == "end_turn"
        assert "done: finished" in server.client.text(worker)
        after = rss_kib(server.process.pid)
        assert after <= 1.2 * baseline, (baseline, after)
        assert server.process.returncode is None
        assert await server.close_stdin() < BATCH_BOUND
        assert server.process.returncode == 0
        assert "Traceback" not in server.stderr()
