"""``tether acp`` driven by the official TypeScript SDK's client (``@agentclientprotocol/sdk``).

The client is ``clients/typescript_client.mjs``: it spawns ``tether acp``, runs
a plan of steps and reports what it received. The SDK validates every request
and notification it receives against the protocol's schema (the answers to its
own requests are checked by the script with the SDK's schemas), so each test
also asserts that no frame failed the TypeScript side's validation.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.acp.harness import ROOT, env_for, processes_in_session, tether_acp
from tests.npm_packages import installed

SDK = "@agentclientprotocol/sdk@2.4.0"
CLIENT = Path(__file__).parent / "clients" / "typescript_client.mjs"
RUN_BOUND = 20.0
"""Seconds one run of the client may take."""
CANCEL_BOUND = 3.0
"""Seconds from ``session/cancel`` to the prompt's ``cancelled`` answer."""

Report = dict[str, Any]
Checkpoint = Callable[[str, int, list[dict[str, Any]]], Awaitable[None]]


@pytest.fixture(scope="module")
def sdk() -> Path:
    return installed(SDK)


async def drive(
    sdk: Path,
    tmp_path: Path,
    steps: list[dict[str, Any]],
    *args: str,
    home: Path | None = None,
    command: list[str] | None = None,
    at: Checkpoint | None = None,
) -> Report:
    """Run the TypeScript client through ``steps`` against ``tether acp ARGS`` (or
    ``command``) with ``TETHER_HOME`` ``home``; its report. ``at`` is awaited at
    each ``checkpoint`` step with its name, the agent's pid and the steps' results
    so far, while the client waits."""
    home = home or tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    plan = {
        "sdk": str(sdk),
        "command": command or tether_acp(tmp_path, *args),
        "cwd": str(ROOT),
        "steps": steps,
    }
    with (tmp_path / "client.log").open("ab") as stderr:
        client = await asyncio.create_subprocess_exec(
            "node",
            str(CLIENT),
            json.dumps(plan),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=env_for(home),
        )
    assert client.stdin is not None and client.stdout is not None
    try:
        async with asyncio.timeout(RUN_BOUND):
            async for line in client.stdout:
                said = json.loads(line)
                if "report" in said:
                    report: Report = said["report"]
                    break
                assert at is not None, said
                await at(said["checkpoint"], said["pid"], said["steps"])
                client.stdin.write(b"\n")
            else:
                pytest.fail(f"no report: {(tmp_path / 'client.log').read_text()}")
            await client.wait()
    finally:
        if client.returncode is None:
            client.kill()
            await client.wait()
    failed = [step for step in report["steps"] if "error" in step]
    assert failed == [], (tmp_path / "client.log").read_text()
    return report


def kinds(report: Report) -> list[str]:
    return [params["update"]["sessionUpdate"] for params in report["updates"]]


def text_of(report: Report, kind: str = "agent_message_chunk") -> str:
    return "".join(
        params["update"]["content"]["text"]
        for params in report["updates"]
        if params["update"]["sessionUpdate"] == kind
    )


def tool_statuses(report: Report) -> list[tuple[str, str]]:
    """``(kind of update, status)`` of every tool update, in order."""
    return [
        (params["update"]["sessionUpdate"], params["update"]["status"])
        for params in report["updates"]
        if params["update"]["sessionUpdate"] in ("tool_call", "tool_call_update")
        and "status" in params["update"]
    ]


def assert_valid(report: Report) -> None:
    """No frame failed the SDK's validation, and tether exited cleanly."""
    assert report["errors"] == []
    assert report["exit"] == 0


async def test_a_prompt_streams_its_answer_and_the_session_is_listed(
    sdk: Path, tmp_path: Path
) -> None:
    steps = [
        {"op": "initialize"},
        {"op": "new", "cwd": str(tmp_path)},
        {"op": "prompt", "text": "hello from TypeScript"},
        {"op": "list"},
    ]
    report = await drive(sdk, tmp_path, steps)
    assert_valid(report)
    initialized, created, answered, listed = report["steps"]
    assert initialized["sdkProtocolVersion"] == 1 and initialized["protocolVersion"] == 1
    assert answered["stopReason"] == "end_turn"
    assert text_of(report) == "echo: hello from TypeScript"
    assert kinds(report).count("agent_message_chunk") > 1  # streamed, not sent whole
    assert {params["sessionId"] for params in report["updates"]} == {created["sessionId"]}
    assert listed["sessionIds"] == [created["sessionId"]]


async def test_a_tool_call_runs_when_the_client_allows_it_and_fails_when_it_rejects(
    sdk: Path, tmp_path: Path
) -> None:
    allowed, rejected = tmp_path / "allowed", tmp_path / "rejected"
    steps = [
        {"op": "initialize"},
        {"op": "new", "cwd": str(tmp_path)},
        {"op": "prompt", "text": f"bash touch {allowed} && echo made", "answer": "allow-once"},
        {"op": "prompt", "text": f"bash touch {rejected}", "answer": "reject-once"},
    ]
    report = await drive(sdk, tmp_path, steps, "--mode", "ask")
    assert_valid(report)
    assert [step.get("stopReason") for step in report["steps"][2:]] == ["end_turn", "end_turn"]
    asked = [(p["toolCall"]["title"], p["answer"]) for p in report["permissions"]]
    assert asked == [
        (f"touch {allowed} && echo made", "allow-once"),
        (f"touch {rejected}", "reject-once"),
    ]
    option_ids = [option["optionId"] for option in report["permissions"][0]["options"]]
    assert option_ids == ["allow-once", "allow-always", "reject-once"]
    assert tool_statuses(report) == [
        ("tool_call", "pending"),
        ("tool_call_update", "in_progress"),
        ("tool_call_update", "completed"),
        ("tool_call", "pending"),
        ("tool_call_update", "failed"),
    ]
    calls = [
        p["update"] for p in report["updates"] if p["update"]["sessionUpdate"] == "tool_call_update"
    ]
    assert "denied" in calls[-1]["content"][0]["content"]["text"]
    assert text_of(report).startswith("done: made")
    assert allowed.exists() and not rejected.exists()


async def test_cancel_answers_cancelled_promptly_and_kills_the_command(
    sdk: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    running: list[str] = []
    left: list[str] = []

    async def at(name: str, pid: int, steps: list[dict[str, Any]]) -> None:
        command_pid = steps[3]["text"].strip()
        alive = [p for p in processes_in_session(pid) if p.split()[0] == command_pid]
        (running if name == "running" else left).extend(alive)

    steps = [
        {"op": "initialize"},
        {"op": "new", "cwd": str(tmp_path)},
        {"op": "start", "text": f"bash echo $$ > {gate}; exec sleep 30"},
        {"op": "read", "path": str(gate)},
        {"op": "checkpoint", "name": "running"},
        {"op": "cancel"},
        {"op": "finish"},
        {"op": "checkpoint", "name": "cancelled"},
    ]
    report = await drive(sdk, tmp_path, steps, "--mode", "auto", at=at)
    assert_valid(report)
    assert running != [] and left == []
    finished = report["steps"][6]
    assert finished["stopReason"] == "cancelled"
    assert finished["secondsAfterCancel"] < CANCEL_BOUND
    assert tool_statuses(report)[-1][1] == "failed"


async def test_a_second_process_replays_the_session_on_load(sdk: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = [
        {"op": "initialize"},
        {"op": "new", "cwd": str(tmp_path)},
        {"op": "prompt", "text": "remember the lighthouse"},
    ]
    written = await drive(sdk, tmp_path / "first", first, home=home)
    assert_valid(written)
    sid = written["steps"][1]["sessionId"]
    second = [{"op": "initialize"}, {"op": "load", "sessionId": sid, "cwd": str(tmp_path)}]
    replayed = await drive(sdk, tmp_path / "second", second, home=home)
    assert_valid(replayed)
    assert {params["sessionId"] for params in replayed["updates"]} == {sid}
    assert text_of(replayed, "user_message_chunk") == "remember the lighthouse"
    assert text_of(replayed) == "echo: remember the lighthouse"
    said = [k for k in kinds(replayed) if k in ("user_message_chunk", "agent_message_chunk")]
    assert said[0] == "user_message_chunk"


BAD_AGENT = """
import json, sys

def send(frame):
    sys.stdout.write(json.dumps(frame) + "\\n")
    sys.stdout.flush()

def update(update):
    send({"jsonrpc": "2.0", "method": "session/update",
          "params": {"sessionId": "s", "update": update}})

for line in sys.stdin:
    request = json.loads(line)
    method, rid = request.get("method"), request.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": 1}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": "s"}})
    elif method == "session/prompt":
        update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}})
        update({"sessionUpdate": "tool_call", "toolCallId": "c", "title": "t", "status": "running"})
        send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "finished"}})
"""
"""An agent whose frames fail the schema: a chunk without its text, a tool call
with an unknown status, an unknown stop reason."""


async def test_the_client_reports_every_frame_the_schema_rejects(sdk: Path, tmp_path: Path) -> None:
    steps = [
        {"op": "initialize"},
        {"op": "new", "cwd": str(tmp_path)},
        {"op": "prompt", "text": "hi"},
    ]
    report = await drive(sdk, tmp_path, steps, command=[sys.executable, "-c", BAD_AGENT])
    # The SDK drops the chunk, and passes the tool call on without its status.
    (shown,) = [params["update"] for params in report["updates"]]
    assert shown["sessionUpdate"] == "tool_call" and "status" not in shown
    dropped, stop_reason, passed_on, chunk, status = report["errors"]
    assert dropped.startswith("Error handling notification") and "session/update" in dropped
    assert stop_reason.startswith("session/prompt answer: /stopReason: ")
    assert passed_on == "session/update: the SDK passed on 1 of 2"
    assert chunk == "session/update 0: the schema's parse changed /"
    assert status == "session/update 1: the schema's parse changed /update/status"
