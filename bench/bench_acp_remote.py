"""ACP over the network (``tether web``'s ``/acp``): a connection's cost; prints figures.

Usage: python bench/bench_acp_remote.py [--runs R] [--frames N]

Against a ``tether web`` process on 127.0.0.1 (offline model), R times each:

* ``open``: ``POST /acp`` ``initialize`` → its answer (the connection opened).
* ``prompt http``: ``session/prompt`` posted → its answer on the SSE stream
  (an offline turn with one bash call, in ``auto`` mode).
* ``prompt ws``: the same over a WebSocket.
* ``resume``: a session of N/8 turns is loaded (``session/load`` replays it on
  the stream); the stream is reopened with ``Last-Event-ID`` half way through
  the replay → its first frame, and → the replay's last.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect

ROOT = Path(__file__).resolve().parents[1]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": 1, "clientCapabilities": {}},
}


def _ms(values: list[float]) -> str:
    low, high = min(values) * 1000, max(values) * 1000
    return f"median {statistics.median(values) * 1000:.1f} ms ({low:.1f} to {high:.1f})"


class Stream:
    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()
        self.last = 0

    async def until(self, request_id: int) -> dict[str, Any]:
        async for line in self._lines:
            if line.startswith("id: "):
                self.last = int(line[4:])
            elif line.startswith("data: "):
                frame: dict[str, Any] = json.loads(line[6:])
                if frame.get("id") == request_id and "method" not in frame:
                    return frame
        raise RuntimeError("the stream ended")


async def _open(client: httpx.AsyncClient) -> tuple[str, float]:
    started = time.perf_counter()
    response = await client.post("/acp", json=INITIALIZE)
    response.raise_for_status()
    return response.headers["Acp-Connection-Id"], time.perf_counter() - started


async def _post(
    client: httpx.AsyncClient, connection: str, request_id: int, method: str, params: dict[str, Any]
) -> None:
    frame = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    response = await client.post("/acp", json=frame, headers={"Acp-Connection-Id": connection})
    response.raise_for_status()


async def _prompt_http(
    client: httpx.AsyncClient, cwd: str, runs: int
) -> tuple[list[float], list[float]]:
    opens: list[float] = []
    prompts: list[float] = []
    for _ in range(runs):
        connection, opened = await _open(client)
        opens.append(opened)
        headers = {"Acp-Connection-Id": connection}
        async with client.stream("GET", "/acp", headers=headers) as response:
            stream = Stream(response)
            await _post(client, connection, 1, "session/new", {"cwd": cwd, "mcpServers": []})
            session = (await stream.until(1))["result"]["sessionId"]
            text = [{"type": "text", "text": "$ echo bench"}]
            started = time.perf_counter()
            await _post(
                client, connection, 2, "session/prompt", {"sessionId": session, "prompt": text}
            )
            await stream.until(2)
            prompts.append(time.perf_counter() - started)
        await client.delete("/acp", headers=headers)
    return opens, prompts


async def _prompt_ws(url: str, token: str, cwd: str, runs: int) -> list[float]:
    prompts: list[float] = []
    for _ in range(runs):
        headers = {"Authorization": f"Bearer {token}"}
        async with connect(url, additional_headers=headers) as socket:

            async def call(request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
                await socket.send(
                    json.dumps(
                        {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
                    )
                )
                while True:
                    frame: dict[str, Any] = json.loads(await socket.recv())
                    if frame.get("id") == request_id and "method" not in frame:
                        return frame

            await call(0, "initialize", INITIALIZE["params"])  # type: ignore[arg-type]
            session = (await call(1, "session/new", {"cwd": cwd, "mcpServers": []}))["result"][
                "sessionId"
            ]
            started = time.perf_counter()
            await call(
                2,
                "session/prompt",
                {"sessionId": session, "prompt": [{"type": "text", "text": "$ echo bench"}]},
            )
            prompts.append(time.perf_counter() - started)
    return prompts


async def _resume(
    client: httpx.AsyncClient, cwd: str, runs: int, frames: int
) -> tuple[list[float], list[float], int]:
    """A session of ``frames``/8 turns, loaded; its stream resumed half way through."""
    connection, _ = await _open(client)
    headers = {"Acp-Connection-Id": connection}
    async with client.stream("GET", "/acp", headers=headers) as response:
        stream = Stream(response)
        await _post(client, connection, 1, "session/new", {"cwd": cwd, "mcpServers": []})
        session = (await stream.until(1))["result"]["sessionId"]
        for n in range(max(1, frames // 8)):
            text = [{"type": "text", "text": f"turn {n}"}]
            await _post(
                client, connection, 10 + n, "session/prompt", {"sessionId": session, "prompt": text}
            )
            await stream.until(10 + n)
    await client.delete("/acp", headers=headers)
    firsts: list[float] = []
    wholes: list[float] = []
    replayed = 0
    for _ in range(runs):
        connection, _ = await _open(client)
        headers = {"Acp-Connection-Id": connection}
        async with client.stream("GET", "/acp", headers=headers) as response:
            stream = Stream(response)
            await _post(
                client,
                connection,
                1,
                "session/load",
                {"sessionId": session, "cwd": cwd, "mcpServers": []},
            )
            await stream.until(1)
        total = stream.last
        after = total // 2
        started = time.perf_counter()
        async with client.stream(
            "GET", "/acp", headers={**headers, "Last-Event-ID": str(after)}
        ) as response:
            lines = response.aiter_lines()
            first = None
            async for line in lines:
                if line.startswith("id: "):
                    seq = int(line[4:])
                    if first is None:
                        first = time.perf_counter() - started
                    if seq == total:
                        break
            firsts.append(first or 0.0)
            wholes.append(time.perf_counter() - started)
        replayed = total - after
        await client.delete("/acp", headers=headers)
    return firsts, wholes, replayed


async def _run(base: str, token: str, cwd: str, runs: int, frames: int) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as client:
        opens, http_prompts = await _prompt_http(client, cwd, runs)
        ws_prompts = await _prompt_ws(base.replace("http://", "ws://") + "/acp", token, cwd, runs)
        firsts, wholes, replayed = await _resume(client, cwd, runs, frames)
    print(f"open (initialize answered): {_ms(opens)}")
    print(f"prompt over HTTP + SSE: {_ms(http_prompts)}")
    print(f"prompt over WebSocket: {_ms(ws_prompts)}")
    print(
        f"resume after a drop, {replayed} frames replayed: first {_ms(firsts)}; all {_ms(wholes)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--frames", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        web = subprocess.Popen(
            [sys.executable, "-m", "tether.cli.main", "--data-dir", home, "web", "--mode", "auto"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "TETHER_MODEL": "offline"},
            cwd=str(ROOT),
        )
        try:
            assert web.stdout is not None
            url = web.stdout.readline().strip()
            base, _, token = url.partition("/?token=")
            asyncio.run(_run(base, token, home, args.runs, args.frames))
        finally:
            web.terminate()
            web.wait(timeout=30)


if __name__ == "__main__":
    main()
