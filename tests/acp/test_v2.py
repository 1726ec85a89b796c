"""ACP protocol version 2 (the draft), negotiated by ``initialize``, against a real
``tether acp`` over stdio; every frame tether sends is checked against the official
version 2 schema (``schemas/acp/v2/schema.json``) with ``jsonschema``
(:mod:`tests.acp.conformance`).

The client is a plain JSON-RPC client (the ACP SDKs speak version 1).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.acp.conformance import V2
from tests.acp.harness import ROOT, SCRIPTED, end_process, env_for, serving
from tests.acp.test_schema_conformance import _check

Frame = dict[str, Any]


@dataclass
class V2Client:
    """One ``tether acp`` process and the frames it sent, spoken to in version 2."""

    process: asyncio.subprocess.Process
    home: Path
    frames: list[Frame] = field(default_factory=list)
    asked: dict[object, str] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    next_id: int = 0

    def write(self, frame: Frame) -> None:
        assert self.process.stdin is not None
        if "method" in frame and "id" in frame:
            self.asked[frame["id"]] = frame["method"]
        self.process.stdin.write(json.dumps(frame).encode() + b"\n")

    async def frame(self, predicate: Callable[[Frame], bool], after: int = 0) -> Frame:
        """The first frame from ``after`` on that matches ``predicate`` (15 s at most)."""
        async with asyncio.timeout(15):
            while True:
                for frame in self.frames[after:]:
                    if predicate(frame):
                        return frame
                self.changed.clear()
                await self.changed.wait()

    async def request(self, method: str, params: dict[str, Any]) -> Frame:
        """Send request ``method``; its answer frame (a result or an error)."""
        self.next_id += 1
        frame_id = self.next_id
        self.write({"jsonrpc": "2.0", "id": frame_id, "method": method, "params": params})
        return await self.frame(lambda f: f.get("id") == frame_id and "method" not in f)

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        """Send request ``method``; its result (an error fails the test)."""
        answer = await self.request(method, params)
        assert "result" in answer, answer
        return answer["result"]

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.write({"jsonrpc": "2.0", "method": method, "params": params})

    def updates(self, session_id: str, after: int = 0) -> list[Frame]:
        """The ``session/update`` params of ``session_id`` from frame ``after`` on."""
        return [
            f["params"]
            for f in self.frames[after:]
            if f.get("method") == "session/update" and f["params"]["sessionId"] == session_id
        ]

    async def state(self, session_id: str, state: str, after: int = 0) -> Frame:
        """The first ``state_update`` to ``state`` of ``session_id`` from frame ``after`` on."""
        return await self.frame(
            lambda f: (
                f.get("method") == "session/update"
                and f["params"]["sessionId"] == session_id
                and f["params"]["update"] == {**f["params"]["update"], "state": state}
                and f["params"]["update"]["sessionUpdate"] == "state_update"
            ),
            after,
        )

    def check(self) -> None:
        """Every frame tether sent so far is valid by the version 2 schema."""
        found = {json.dumps(f)[:200]: p for f in self.frames if (p := V2.problems(f, self.asked))}
        assert found == {}


async def _read(client: V2Client) -> None:
    """Collect tether's frames; allow every permission question once."""
    assert client.process.stdout is not None
    while line := await client.process.stdout.readline():
        frame = json.loads(line)
        client.frames.append(frame)
        client.changed.set()
        if frame.get("method") == "session/request_permission":
            allowed = {"outcome": "selected", "optionId": "allow-once"}
            client.write({"jsonrpc": "2.0", "id": frame["id"], "result": {"outcome": allowed}})


@asynccontextmanager
async def v2_server(
    tmp_path: Path, *args: str, home: Path | None = None
) -> AsyncIterator[V2Client]:
    """``tether acp --model scripted ARGS`` with the scripted model, initialized in version 2."""
    home = home or tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    overlay = tmp_path / "overlay.yml"
    overlay.write_text(SCRIPTED.format(ledger=json.dumps(str(tmp_path / "ledger.txt"))))
    with (tmp_path / "stderr-v2.log").open("ab") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "tether.cli.main", "--config", str(overlay), "acp", "--model", "scripted"),
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=env_for(home),
            cwd=str(ROOT),
            start_new_session=True,
            limit=16 * 1024 * 1024,
        )
    client = V2Client(process, home)
    reader = asyncio.ensure_future(_read(client))
    try:
        info = {"name": "v2-test-client", "version": "1"}
        answer = await client.call("initialize", {"protocolVersion": 2, "info": info})
        assert answer["protocolVersion"] == 2
        yield client
    finally:
        await end_process(process)
        reader.cancel()
        with suppress(asyncio.CancelledError):
            await reader


def _text(text: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": text}]


def _said(updates: list[Frame]) -> str:
    return "".join(
        u["update"]["content"]["text"]
        for u in updates
        if u["update"]["sessionUpdate"] == "agent_message_chunk"
    )


async def test_a_v2_prompt_is_answered_on_acceptance_and_ends_with_a_state_update(
    tmp_path: Path,
) -> None:
    async with v2_server(tmp_path) as client:
        created = await client.call("session/new", {"cwd": str(client.home), "mcpServers": []})
        sid = created["sessionId"]
        assert {o["configId"] for o in created["configOptions"]} >= {"mode", "model"}
        # Answered while its turn still runs: acceptance, not completion.
        held = await client.call("session/prompt", {"sessionId": sid, "prompt": _text("hold")})
        assert set(held) == {"messageId"}
        await client.frame(lambda f: "holding" in _said(client.updates(sid)))
        states = [u["update"] for u in client.updates(sid) if "state" in u["update"]]
        assert states == [{"sessionUpdate": "state_update", "state": "running"}]
        client.notify("session/cancel", {"sessionId": sid})
        stopped = await client.state(sid, "idle")
        assert stopped["params"]["update"]["stopReason"] == "cancelled"

        mark = len(client.frames)
        answer = await client.call("session/prompt", {"sessionId": sid, "prompt": _text("hello")})
        end = await client.state(sid, "idle", mark)
        assert end["params"]["update"]["stopReason"] == "end_turn"
        after = client.frames[mark:]
        assert after.index(end) > next(i for i, f in enumerate(after) if f.get("result") == answer)
        updates = client.updates(sid, mark)
        kinds = [u["update"]["sessionUpdate"] for u in updates]
        assert kinds[0] == "state_update"  # running, before anything of the turn
        assert kinds[-1] == "state_update"
        assert _said(updates) == "echo: hello"
        # The user's message is echoed with the id the prompt was answered with.
        echoed = [
            u["update"] for u in updates if u["update"]["sessionUpdate"] == "user_message_chunk"
        ]
        assert [(u["messageId"], u["content"]["text"]) for u in echoed] == [
            (answer["messageId"], "hello")
        ]
        # Every update of a log event names its seq, in order.
        seqs = [u["_meta"]["tether"]["seq"] for u in updates if "_meta" in u]
        assert seqs == sorted(seqs) and seqs
        # Not version 1: no stop reason in the answer, no session/load, no set_mode.
        load = {"sessionId": sid, "cwd": str(client.home), "mcpServers": []}
        assert (await client.request("session/load", load))["error"]["code"] == -32601
        mode = {"sessionId": sid, "modeId": "auto"}
        assert (await client.request("session/set_mode", mode))["error"]["code"] == -32601
        # Modes are a config option.
        changed = await client.call(
            "session/set_config_option",
            {"sessionId": sid, "configId": "mode", "type": "id", "value": "auto"},
        )
        mode_option = next(o for o in changed["configOptions"] if o["configId"] == "mode")
        assert mode_option["currentValue"] == "auto"
        listed = await client.call("session/list", {})
        assert [info["sessionId"] for info in listed["sessions"]] == [sid]
        assert await client.call("session/close", {"sessionId": sid}) == {}
        assert await client.call("session/delete", {"sessionId": sid}) == {}
        assert (await client.call("session/list", {}))["sessions"] == []
        client.check()


async def test_a_v2_cancel_ends_the_running_tool_call_cancelled(tmp_path: Path) -> None:
    async with v2_server(tmp_path, "--mode", "auto") as client:
        sid = (await client.call("session/new", {"cwd": str(client.home)}))["sessionId"]
        prompt = {"sessionId": sid, "prompt": _text("bash sleep 30")}
        await client.call("session/prompt", prompt)
        running = await client.frame(
            lambda f: (
                f.get("method") == "session/update"
                and f["params"]["update"].get("status") == "in_progress"
            )
        )
        call_id = running["params"]["update"]["toolCallId"]
        client.notify("session/cancel", {"sessionId": sid})
        end = await client.state(sid, "idle")
        assert end["params"]["update"]["stopReason"] == "cancelled"
        calls = [
            u["update"]
            for u in client.updates(sid)
            if u["update"]["sessionUpdate"] == "tool_call_update"
        ]
        assert all(u["toolCallId"] == call_id for u in calls)
        statuses = [u["status"] for u in calls if "status" in u]
        assert statuses[0] == "pending" and statuses[-1] == "cancelled"
        assert "tool_call" not in {u["update"]["sessionUpdate"] for u in client.updates(sid)}
        client.check()


def _by_seq(updates: list[Frame], start: int) -> list[tuple[int, Any]]:
    return [
        (u["_meta"]["tether"]["seq"], u["update"])
        for u in updates
        if "_meta" in u and u["_meta"]["tether"]["seq"] >= start
    ]


async def test_v2_resume_after_sigkill_replays_exactly_the_events_from_the_cursor(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    async with v2_server(tmp_path) as client:
        sid = (await client.call("session/new", {"cwd": str(project)}))["sessionId"]
        for text in ("hello", "think deep", "bash echo hi", "again"):
            mark = len(client.frames)
            await client.call("session/prompt", {"sessionId": sid, "prompt": _text(text)})
            await client.state(sid, "idle", mark)
        live = _by_seq(client.updates(sid), 0)
        # The client kept what it saw up to the first update of the second prompt's turn.
        second = next(
            i for i, (_, u) in enumerate(live) if u.get("content", {}).get("text") == "think deep"
        )
        cursor = live[second][0]
        asked = [f for f in client.frames if f.get("method") == "session/request_permission"]
        assert len(asked) == 1
        assert asked[0]["params"]["subject"]["toolCall"]["title"]
        client.check()
        os.killpg(client.process.pid, signal.SIGKILL)
        await client.process.wait()
    async with v2_server(tmp_path, home=client.home) as again:
        mark = len(again.frames)
        resume = {
            "sessionId": sid,
            "cwd": str(project),
            "replayFrom": {"type": "_tether/seq", "seq": cursor},
        }
        answer = await again.request("session/resume", resume)
        assert "result" in answer, answer
        before = again.frames[mark : again.frames.index(answer)]
        replayed = _by_seq(again.updates(sid, mark), 0)
        assert replayed == [pair for pair in live if pair[0] >= cursor]
        assert any(u["sessionUpdate"] == "tool_call_update" for _, u in replayed)
        # The current state comes after the replay, before the answer.
        shown = [f["params"]["update"] for f in before if f.get("method") == "session/update"]
        assert shown[-1] == {"sessionUpdate": "state_update", "state": "idle"}
        assert all(f.get("method") == "session/update" for f in before)
        # The same from the start: the replay from the cursor is its tail.
        mark = len(again.frames)
        resume["replayFrom"] = {"type": "start"}
        await again.call("session/resume", resume)
        whole = _by_seq(again.updates(sid, mark), 0)
        assert [pair for pair in whole if pair[0] >= cursor] == replayed
        assert len(whole) > len(replayed)
        # A cursor tether does not take is refused, and nothing is lost by it.
        resume["replayFrom"] = {"type": "message", "messageId": "m"}
        refused = await again.request("session/resume", resume)
        assert refused["error"]["code"] == -32602
        mark = len(again.frames)
        await again.call("session/prompt", {"sessionId": sid, "prompt": _text("still here")})
        await again.state(sid, "idle", mark)
        assert _said(again.updates(sid, mark)) == "echo: still here"
        again.check()


async def test_a_v1_client_at_the_same_time_still_gets_version_1(tmp_path: Path) -> None:
    async with (
        v2_server(tmp_path / "v2") as v2,
        serving(tmp_path / "v1") as v1,
    ):
        v2_sid = (await v2.call("session/new", {"cwd": str(v2.home)}))["sessionId"]
        v1_sid = await v1.new_session()
        accepted = await v2.call("session/prompt", {"sessionId": v2_sid, "prompt": _text("hi")})
        assert await v1.prompt(v1_sid, "hi") == "end_turn"
        await v2.state(v2_sid, "idle")
        assert "messageId" in accepted
        assert v1.frames[0]["result"]["protocolVersion"] == 1
        v1_updates = [f["params"] for f in v1.frames if f.get("method") == "session/update"]
        assert "state_update" not in {u["update"]["sessionUpdate"] for u in v1_updates}
        assert all("_meta" not in u for u in v1_updates)
        answers = [f["result"] for f in v1.frames if "stopReason" in (f.get("result") or {})]
        assert answers == [{"stopReason": "end_turn"}]
        _check(v1)  # every frame valid by the version 1 schema
        v2.check()


async def test_bad_v2_input_gets_a_clear_error(tmp_path: Path) -> None:
    async with v2_server(tmp_path) as client:
        sid = (await client.call("session/new", {"cwd": str(client.home)}))["sessionId"]
        empty = await client.request("session/prompt", {"sessionId": sid, "prompt": []})
        assert empty["error"]["code"] == -32602
        odd = {"sessionId": sid, "prompt": [{"type": "hologram"}]}
        assert (await client.request("session/prompt", odd))["error"]["code"] == -32602
        bad_seq = {"sessionId": sid, "cwd": str(client.home), "replayFrom": {"type": "_tether/seq"}}
        assert (await client.request("session/resume", bad_seq))["error"]["code"] == -32602
        info = {"name": "c", "version": "1"}
        other = await client.request("initialize", {"protocolVersion": 1, "info": info})
        assert other["error"]["code"] == -32600
        mark = len(client.frames)
        await client.call("session/prompt", {"sessionId": sid, "prompt": _text("fine")})
        await client.state(client_sid := sid, "idle", mark)
        assert _said(client.updates(client_sid, mark)) == "echo: fine"
        client.check()
