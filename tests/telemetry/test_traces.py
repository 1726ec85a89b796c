"""Traces rebuilt from the log, received by a real OTLP/HTTP receiver (oteltap).

Each test runs ``tether`` as a user would (a real subprocess, the offline
model) with the live exporter on, or ``tether sessions trace`` afterwards, and
reads what the receiver got: span names and attributes against the GenAI
semantic conventions, parent/child structure, the ``TRACEPARENT`` a command
saw, and a ``tether run`` killed with SIGKILL mid-call then continued.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from oteltap import OtelTapHttpProtobufReceiver, OtelTapHttpProtobufReceiverSettings

from tests.cli.test_commands import env_for, session_id
from tests.cli.test_commands import tether as tether_sync
from tests.mcp_client.support import SDK_SERVER
from tether.telemetry.propagation import session_context, traceparent

pytestmark = pytest.mark.timeout(120)

WAIT = 30.0
"""The longest a test waits for what it expects to receive."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Received:
    """Everything one receiver got, and a way to wait for more."""

    endpoint: str
    spans: list[Any] = field(default_factory=list)
    metrics: list[Any] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def until(self, ready: Callable[[Received], bool]) -> None:
        """Return once ``ready(self)`` holds (checked after each arrival)."""
        async with asyncio.timeout(WAIT):
            while not ready(self):
                self.arrived.clear()
                await self.arrived.wait()

    def named(self, prefix: str) -> list[Any]:
        return [span for span in self.spans if span.name.startswith(prefix)]


@pytest.fixture
async def receiver() -> AsyncIterator[Received]:
    port = _free_port()
    received = Received(f"http://127.0.0.1:{port}")
    settings = OtelTapHttpProtobufReceiverSettings(http_port=port)
    async with OtelTapHttpProtobufReceiver(settings) as tap:

        async def collect(stream: AsyncIterator[Any], into: list[Any]) -> None:
            async for item in stream:
                into.append(item)
                received.arrived.set()

        loop = asyncio.get_running_loop()
        tasks = [
            loop.create_task(collect(tap.stream_traces(), received.spans)),
            loop.create_task(collect(tap.stream_metrics(), received.metrics)),
        ]
        await asyncio.sleep(0)  # one loop turn: both collectors are subscribed
        try:
            yield received
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def attributes(span: Any) -> dict[str, Any]:
    """A received span's attributes as Python values."""
    values: dict[str, Any] = {}
    for attribute in span.attributes:
        value = attribute.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            values[attribute.key] = tuple(v.string_value for v in value.array_value.values)
        else:
            values[attribute.key] = getattr(value, kind)
    return values


def overlay(home: Path, endpoint: str, *, name: str = "telemetry", timeout: float = 5) -> str:
    home.mkdir(parents=True, exist_ok=True)
    path = home / f"{name}.yml"
    path.write_text(
        "plugins:\n  - id: telemetry\n    disabled: false\n"
        f"    config: {{endpoint: '{endpoint}', timeout: {timeout}}}\n"
    )
    return str(path)


async def tether(home: Path, *args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tether.cli.main",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env_for(home),
        cwd=cwd or home,
    )
    out, err = await asyncio.wait_for(process.communicate(), WAIT)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def marked(home: Path, sid: str) -> None:
    """Return once the exporter's mark of ``sid`` is on disk (the state a kill may find)."""
    from watchfiles import awatch

    marks = home / "telemetry"
    marks.mkdir(mode=0o700, exist_ok=True)
    mark = marks / f"{sid}.json"
    async with asyncio.timeout(WAIT):
        # Woken by each change, and every 50 ms (a change before the watch began).
        async for _changes in awatch(marks, rust_timeout=50, yield_on_timeout=True):
            if mark.exists():
                return


def check_tree(spans: list[Any]) -> None:
    """Every span's parent is in the same trace and among ``spans``; ids are unique."""
    ids = [span.span_id for span in spans]
    assert len(ids) == len(set(ids)), "a span was sent twice"
    by_id = {span.span_id: span for span in spans}
    for span in spans:
        if span.parent_span_id:
            parent = by_id[span.parent_span_id]
            assert parent.trace_id == span.trace_id
            assert parent.start_time_unix_nano <= span.start_time_unix_nano
            assert span.end_time_unix_nano <= parent.end_time_unix_nano


async def test_a_run_is_one_trace_of_genai_spans_and_its_command_joins_it(
    tmp_path: Path, receiver: Received
) -> None:
    home = tmp_path / "home"
    config = overlay(home, receiver.endpoint)
    code, out, err = await tether(home, "--config", config, "run", "$ echo TP=$TRACEPARENT")
    assert code == 0, err
    await receiver.until(lambda r: bool(r.named("invoke_agent")))
    check_tree(receiver.spans)

    (turn,) = receiver.named("invoke_agent")
    chats = receiver.named("chat ")
    (tool,) = receiver.named("execute_tool")
    assert turn.name == "invoke_agent tether" and not turn.parent_span_id
    assert len(chats) == 2
    assert {s.parent_span_id for s in [*chats, tool]} == {turn.span_id}

    agent = attributes(turn)
    assert agent["gen_ai.operation.name"] == "invoke_agent"
    assert agent["gen_ai.conversation.id"] == session_id(err)
    assert agent["tether.turn.end_reason"] == "completed"
    chat = attributes(chats[0])
    assert chat["gen_ai.operation.name"] == "chat"
    assert chat["gen_ai.provider.name"] == "offline"
    assert chat["gen_ai.request.model"] == "offline"
    assert chat["gen_ai.usage.input_tokens"] > 0 and chat["gen_ai.usage.output_tokens"] > 0
    assert chat["gen_ai.response.finish_reasons"] == ("tool-calls",)
    assert chats[0].kind == chats[0].SPAN_KIND_CLIENT
    call = attributes(tool)
    assert call["gen_ai.operation.name"] == "execute_tool"
    assert call["gen_ai.tool.name"] == "bash" and call["gen_ai.tool.call.id"]
    assert call["tether.tool.outcome"] == "ok"
    # Content is off by default: no prompt, answer, arguments or output.
    recorded = {key for span in receiver.spans for key in attributes(span)}
    assert not recorded & {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    }
    # The command's TRACEPARENT names its call's span, in the turn's trace.
    assert f"TP=00-{tool.trace_id.hex()}-{tool.span_id.hex()}-01" in out
    await receiver.until(
        lambda r: (
            {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"}
            <= {m.name for m in r.metrics}
        )
    )


def _hooks_overlay(home: Path, endpoint: str, log: Path) -> str:
    """:func:`overlay` with hooks that each write their event and ``TRACEPARENT`` to ``log``."""
    path = overlay(home, endpoint, name="hooks")

    def hook(event: str) -> str:
        return f'{{hooks: [{{type: command, command: "echo {event} $TRACEPARENT >> {log}"}}]}}'

    events = ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop")
    lines = "".join(f"        {event}: [{hook(event)}]\n" for event in events)
    with open(path, "a") as file:
        file.write(f"  - id: hooks\n    config:\n      sandboxed: false\n      hooks:\n{lines}")
    return path


async def test_hooks_run_in_the_span_of_their_call_or_their_turn(
    tmp_path: Path, receiver: Received
) -> None:
    home = tmp_path / "home"
    log = tmp_path / "hooks.log"
    config = _hooks_overlay(home, receiver.endpoint, log)
    code, _, err = await tether(home, "--config", config, "run", "$ echo hi")
    assert code == 0, err
    await receiver.until(lambda r: bool(r.named("invoke_agent")))
    (turn,) = receiver.named("invoke_agent")
    (tool,) = receiver.named("execute_tool")
    seen = dict(line.split() for line in log.read_text().splitlines())

    def named(span: Any) -> str:
        return f"00-{span.trace_id.hex()}-{span.span_id.hex()}-01"

    session = traceparent(session_context(session_id(err)))
    assert seen == {
        "SessionStart": session,
        "UserPromptSubmit": named(turn),
        "PreToolUse": named(tool),
        "PostToolUse": named(tool),
        "Stop": named(turn),
    }


async def test_a_run_killed_mid_call_then_continued_yields_the_complete_trace_once(
    tmp_path: Path, receiver: Received
) -> None:
    home = tmp_path / "home"
    config = overlay(home, receiver.endpoint)
    killed = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tether.cli.main",
        "--config",
        config,
        "run",
        "$ sleep 60",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env_for(home),
        cwd=home,
    )
    assert killed.stderr is not None
    shown = b""
    while b"bash" not in shown:  # the call is shown once it started
        line = await asyncio.wait_for(killed.stderr.readline(), WAIT)
        assert line, shown.decode()
        shown += line
    # The first model call's span closed before the command started: it was sent,
    # and its mark written (a kill between the two sends it again: at least once).
    await receiver.until(lambda r: bool(r.named("chat ")))
    sid = session_id(shown.decode())
    await marked(home, sid)
    killed.send_signal(signal.SIGKILL)
    await killed.wait()

    code, _out, err = await tether(home, "--config", config, "run", "--continue", "hello")
    assert code == 0, err
    await receiver.until(lambda r: len(r.named("invoke_agent")) == 2)
    check_tree(receiver.spans)
    first, second = sorted(receiver.named("invoke_agent"), key=lambda s: s.start_time_unix_nano)
    assert attributes(first)["tether.turn.end_reason"] == "interrupted"
    assert first.status.code == first.status.STATUS_CODE_ERROR
    assert [e.name for e in first.events] == ["tether.session.recovered"]
    assert attributes(second)["tether.turn.end_reason"] == "completed"
    assert first.trace_id != second.trace_id
    (tool,) = receiver.named("execute_tool")
    assert tool.parent_span_id == first.span_id
    assert attributes(tool)["tether.tool.outcome"] == "error"

    # The trace rebuilt afterwards from the log equals the one sent live.
    live = {span.span_id: span for span in receiver.spans}
    receiver.spans.clear()
    code, _out, err = await tether(home, "sessions", "trace", sid, "--endpoint", receiver.endpoint)
    assert code == 0, err
    await receiver.until(lambda r: len(r.spans) == len(live))
    for span in receiver.spans:
        assert span == live[span.span_id]


async def test_spans_an_endpoint_that_was_down_did_not_take_are_sent_by_the_next_process(
    tmp_path: Path, receiver: Received
) -> None:
    home = tmp_path / "home"
    down = overlay(home, f"http://127.0.0.1:{_free_port()}", name="down", timeout=1)
    code, _out, err = await tether(home, "--config", down, "run", "$ echo one")
    assert code == 0, err
    assert "not sent" in err and "Traceback" not in err
    up = overlay(home, receiver.endpoint)
    code, _out, err = await tether(home, "--config", up, "run", "--continue", "$ echo two")
    assert code == 0, err
    await receiver.until(lambda r: len(r.named("invoke_agent")) == 2)
    check_tree(receiver.spans)
    assert len(receiver.spans) == 8


async def test_a_child_agents_turn_hangs_under_the_call_that_delegated_to_it(
    tmp_path: Path, receiver: Received
) -> None:
    home = tmp_path / "home"
    config = overlay(home, receiver.endpoint)
    task = '/tool task {"description": "echo", "prompt": "$ echo child"}'
    code, _out, err = await tether(home, "--config", config, "run", task)
    assert code == 0, err
    await receiver.until(lambda r: len(r.named("invoke_agent")) == 2)
    check_tree(receiver.spans)
    turns = receiver.named("invoke_agent")
    (root,) = [s for s in turns if not s.parent_span_id]
    (child,) = [s for s in turns if s.parent_span_id]
    (delegating,) = [s for s in receiver.named("execute_tool task")]
    assert child.parent_span_id == delegating.span_id
    assert delegating.parent_span_id == root.span_id
    assert attributes(child)["gen_ai.conversation.id"] != attributes(root)["gen_ai.conversation.id"]


async def test_mcp_servers_get_the_session_context_and_each_call_its_own(
    tmp_path: Path, receiver: Received
) -> None:
    home = tmp_path / "home"
    config = overlay(home, receiver.endpoint)
    servers = home / "servers.yml"
    servers.write_text(
        "plugins:\n  - id: mcp\n    config:\n      servers:\n"
        f"        t: {{command: {sys.executable}, args: [{SDK_SERVER}, stdio]}}\n"
    )
    env_call = '/tool mcp__t__env {"name": "TRACEPARENT"}'
    code, out, err = await tether(
        home, "--config", config, "--config", str(servers), "run", env_call
    )
    assert code == 0, err
    sid = session_id(err)
    session = traceparent(session_context(sid))
    assert session in out
    code, out, err = await tether(
        home,
        "--config",
        config,
        "--config",
        str(servers),
        "run",
        "--continue",
        "/tool mcp__t__traceparent {}",
    )
    assert code == 0, err
    await receiver.until(lambda r: len(r.named("execute_tool mcp__t__traceparent")) == 1)
    (call,) = receiver.named("execute_tool mcp__t__traceparent")
    assert f"00-{call.trace_id.hex()}-{call.span_id.hex()}-01" in out


async def test_sessions_trace_with_content_masks_secrets_and_repeats_the_same_ids(
    tmp_path: Path, receiver: Received
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    key = "sk-" + "a1b2c3d4" * 4
    code, _out, err = await tether(home, "run", f"$ echo {key}")
    assert code == 0, err
    sid = session_id(err)
    args = ("sessions", "trace", sid, "--endpoint", receiver.endpoint, "--content")
    code, _out, err = await tether(home, *args)
    assert code == 0, err
    assert "sent 4 spans" in err
    await receiver.until(lambda r: len(r.spans) == 4)
    first = sorted(span.span_id for span in receiver.spans)
    (tool,) = receiver.named("execute_tool")
    recorded = attributes(tool)
    assert "***" in recorded["gen_ai.tool.call.arguments"]
    assert key not in recorded["gen_ai.tool.call.arguments"]
    assert key not in recorded["gen_ai.tool.call.result"]
    leaks = [(s.name, k) for s in receiver.spans for k, v in attributes(s).items() if key in str(v)]
    assert not leaks

    receiver.spans.clear()
    code, _out, err = await tether(home, *args)
    assert code == 0, err
    await receiver.until(lambda r: len(r.spans) == 4)
    assert sorted(span.span_id for span in receiver.spans) == first


async def test_sessions_trace_to_an_endpoint_that_is_down_fails_in_one_line(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    code, _out, err = await tether(home, "run", "hello")
    assert code == 0, err
    sid = session_id(err)
    down = f"http://127.0.0.1:{_free_port()}"
    code, _out, err = await tether(
        home, "sessions", "trace", sid, "--endpoint", down, "--timeout", "1"
    )
    assert code == 1
    assert f"not taken by the OTLP endpoint ({down})" in err.splitlines()[-1]
    assert "Traceback" not in err


def test_telemetry_off_imports_no_opentelemetry_package(tmp_path: Path) -> None:
    import subprocess

    env = env_for(tmp_path)
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tether.cli.main", "run", "hello"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=WAIT,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    imported = [line for line in result.stderr.splitlines() if "import time:" in line]
    assert imported, "no import times"
    names = {line.rsplit("|", 1)[-1].strip() for line in imported}
    assert not {name for name in names if name.split(".")[0] == "opentelemetry"}
    assert not {name for name in names if name.startswith("tether.telemetry")}


def test_the_exporters_headers_are_masked_where_the_configuration_is_shown(tmp_path: Path) -> None:
    config = tmp_path / "telemetry.yml"
    config.write_text(
        "plugins:\n  - id: telemetry\n    disabled: false\n"
        "    config: {headers: {Authorization: 'Bearer abcdefghijklmnop'}}\n"
    )
    shown = tether_sync(tmp_path, "--config", str(config), "config", "show")
    assert shown.returncode == 0, shown.stderr
    assert "Authorization: '**********'" in shown.stdout
    assert "abcdefghijklmnop" not in shown.stdout
