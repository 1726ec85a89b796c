"""Drives ``tether acp`` as a real subprocess through the ACP SDK's client side.

The server runs with a composition overlay: by default the ``scripted``
model and the test ``bash`` tool (:mod:`tests.acp.scripted`); always the
ledger (:mod:`tests.acp.ledger`). It is started in a session of its own, so any
process it leaves behind is found by its session id.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp.connection import StreamDirection, StreamEvent
from acp.core import connect_to_agent
from acp.exceptions import RequestError
from acp.helpers import text_block
from acp.schema import (
    AgentMessageChunk,
    AgentThoughtChunk,
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UserMessageChunk,
)

if TYPE_CHECKING:
    from acp.client.connection import ClientSideConnection

ROOT = Path(__file__).resolve().parents[2]

Update = AgentMessageChunk | AgentThoughtChunk | UserMessageChunk | ToolCallStart | ToolCallProgress

LEDGER = """\
  - id: ledger
    plugin: tests.acp.ledger
    config: {{path: {ledger}}}
"""

SCRIPTED = (
    """\
plugins:
  - id: tool_bash
    disabled: true
  - id: scripted
    plugin: tests.acp.scripted
"""
    + LEDGER
)
"""The scripted model and the test ``bash`` tool (the real one's row is disabled)."""

SQLITE = SCRIPTED + "  - id: persistence\n    plugin: tether.persist.sqlite\n"
""":data:`SCRIPTED`, with sessions stored in SQLite."""

RETRYING = (
    SCRIPTED
    + "  - id: retry\n    plugin: tether.loop.retry\n"
    + "    config: {{base_delay: 0.0, max_attempts: 4}}\n"
)
""":data:`SCRIPTED`, with failed requests retried at once."""


def fake_model_overlay(url: str, key: str) -> str:
    """Rows that make ``openai-compatible`` talk to a fake server at ``url``."""
    return f"""\
plugins:
  - id: openai
    plugin: tether.llm.adapters.openai
    config:
      providers:
        openai-compatible:
          base_url: "{url}/v1"
          api_key: "{key}"
"""


class Recorder:
    """The ACP client: records every update and permission request, answers as told.

    ``answer`` is the option id to pick, or ``"cancelled"``, or ``"error"``
    (the client fails the request), or ``"unsupported"`` (it answers ``-32601``),
    or ``"never"`` (it never answers); ``answers``, while it holds any, gives
    the answers to the next requests in order instead.
    """

    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []
        self.permission_requests: list[tuple[str, ToolCallUpdate, list[PermissionOption]]] = []
        self.answer = "allow-once"
        self.answers: list[str] = []
        self._changed = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **_meta: Any) -> None:
        self.updates.append((session_id, update))
        self._changed.set()

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **_meta: Any,
    ) -> RequestPermissionResponse:
        self.permission_requests.append((session_id, tool_call, options))
        self._changed.set()
        answer = self.answers.pop(0) if self.answers else self.answer
        if answer == "error":
            raise RequestError.internal_error({"details": "the client broke"})
        if answer == "unsupported":
            raise RequestError.method_not_found("session/request_permission")
        if answer == "never":
            await asyncio.Event().wait()
        if answer == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=answer)
        )

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Return once ``predicate()`` holds (checked after every update); 15 s at most."""
        async with asyncio.timeout(15):
            while not predicate():
                self._changed.clear()
                await self._changed.wait()

    def of(self, session_id: str) -> list[Any]:
        return [update for sid, update in self.updates if sid == session_id]

    def text(self, session_id: str) -> str:
        return "".join(
            u.content.text for u in self.of(session_id) if isinstance(u, AgentMessageChunk)
        )

    def saw_text(self, session_id: str, text: str) -> Callable[[], bool]:
        return lambda: text in self.text(session_id)


@dataclass
class AcpProcess:
    process: asyncio.subprocess.Process
    conn: ClientSideConnection
    client: Recorder
    home: Path
    stderr_path: Path
    ledger_path: Path
    frames: list[dict[str, Any]] = field(default_factory=list)
    """Every frame the server sent, in order."""
    sent: list[dict[str, Any]] = field(default_factory=list)
    """Every frame the client sent the server through the SDK, in order."""

    async def new_session(self, cwd: Path | None = None) -> str:
        response = await self.conn.new_session(cwd=str(cwd or self.home), mcp_servers=[])
        return response.session_id

    async def prompt(self, session_id: str, text: str) -> str:
        """Send a text prompt; return its stop reason."""
        response = await self.conn.prompt(session_id=session_id, prompt=[text_block(text)])
        return response.stop_reason

    def start_prompt(self, session_id: str, text: str) -> asyncio.Task[str]:
        """Send a text prompt now; the task ends with its stop reason."""
        return asyncio.ensure_future(self.prompt(session_id, text))

    def write_raw(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)

    async def frame_answer(self, frame: bytes | dict[str, Any], frame_id: object) -> dict[str, Any]:
        """Write ``frame`` raw; return the server's answer frame to ``frame_id`` that follows it."""
        data = frame if isinstance(frame, bytes) else json.dumps(frame).encode()
        seen = len(self.frames)
        self.write_raw(data + b"\n")
        return await self.frame(
            lambda f: f in self.frames[seen:] and f.get("id") == frame_id and "method" not in f
        )

    async def ask(self, method: str, params: dict[str, Any], ask_id: str) -> dict[str, Any]:
        """Send request ``method`` as a raw frame with id ``ask_id`` (for what the SDK's
        client has no call for, or would change); the server's answer frame. It is
        noted in :attr:`sent`, so a check of the answers knows what it answers."""
        frame = {"jsonrpc": "2.0", "id": ask_id, "method": method, "params": params}
        self.sent.append(frame)
        return await self.frame_answer(frame, ask_id)

    async def initialize_json(self, capabilities: dict[str, Any]) -> dict[str, Any]:
        """``initialize`` with ``capabilities`` as JSON (the SDK's models drop what
        they do not know, such as ``session.notices``); its result."""
        params = {"protocolVersion": 1, "clientCapabilities": capabilities}
        result: dict[str, Any] = (await self.ask("initialize", params, "initialize"))["result"]
        return result

    async def frame(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first frame from the server that matches ``predicate`` (waiting for it).

        It returns once the client has also handled every update that came
        before that frame.
        """
        found: list[int] = []

        def match() -> bool:
            found.extend(i for i, f in enumerate(self.frames) if predicate(f))
            return bool(found)

        await self.client.wait_for(match)
        before = sum(f.get("method") == "session/update" for f in self.frames[: found[0]])
        await self.client.wait_for(lambda: len(self.client.updates) >= before)
        return self.frames[found[0]]

    def log(self, session_id: str) -> list[dict[str, Any]]:
        """The stored events of ``session_id`` (header excluded)."""
        path = self.home / "sessions" / f"{session_id}.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines() if line]
        return records[1:]

    def ledger(self) -> list[str]:
        if not self.ledger_path.exists():
            return []
        return self.ledger_path.read_text().splitlines()

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    async def close_stdin(self, bound: float = 10.0) -> float:
        """Close the server's stdin; return the seconds until it exited."""
        assert self.process.stdin is not None
        loop = asyncio.get_running_loop()
        start = loop.time()
        self.process.stdin.close()
        async with asyncio.timeout(bound):
            await self.process.wait()
        return loop.time() - start


def env_for(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TETHER_HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
    }


def tether_acp(
    tmp_path: Path, *args: str, overlay: str = SCRIPTED, model: str | None = "scripted"
) -> list[str]:
    """The command line of ``tether acp --model MODEL ARGS`` with ``overlay``, which is
    formatted with the ledger ``tmp_path / "ledger.txt"`` and written to
    ``tmp_path / "overlay.yml"`` (``model`` ``None``: no ``--model``). It runs from
    the repository's root with :func:`env_for`'s environment."""
    os.makedirs(tmp_path, exist_ok=True)
    ledger = tmp_path / "ledger.txt"
    overlay_path = tmp_path / "overlay.yml"
    overlay_path.write_text(overlay.format(ledger=json.dumps(str(ledger))))
    return [
        sys.executable,
        "-m",
        "tether.cli.main",
        "--config",
        str(overlay_path),
        "acp",
        *(() if model is None else ("--model", model)),
        *args,
    ]


@asynccontextmanager
async def serving(
    tmp_path: Path,
    *args: str,
    initialize: bool = True,
    overlay: str = SCRIPTED,
    model: str | None = "scripted",
    env: dict[str, str] | None = None,
    home: Path | None = None,
    client: Recorder | None = None,
    capabilities: ClientCapabilities | None = None,
    unstable: bool = False,
) -> AsyncIterator[AcpProcess]:
    """``tether acp --model MODEL ARGS`` with ``overlay`` (formatted with ``ledger``), connected
    (``model`` ``None``: no ``--model``).

    ``env`` adds to its environment; ``TETHER_HOME`` is ``home``, by default
    ``tmp_path / "home"``. ``client`` answers the server (a :class:`Recorder`
    by default), and ``initialize`` advertises ``capabilities``; with ``unstable`` the
    client serves the protocol's unstable methods (``elicitation/create``).
    """
    command = tether_acp(tmp_path, *args, overlay=overlay, model=model)
    home = home or tmp_path / "home"
    home.mkdir(exist_ok=True)
    ledger = tmp_path / "ledger.txt"
    stderr_path = tmp_path / "stderr.log"
    with stderr_path.open("ab") as stderr:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env={**env_for(home), **(env or {})},
            cwd=str(ROOT),
            start_new_session=True,
            limit=16 * 1024 * 1024,
        )
    assert process.stdin is not None and process.stdout is not None
    client = client or Recorder()
    server = AcpProcess(process, None, client, home, stderr_path, ledger)  # type: ignore[arg-type]

    def observe(event: StreamEvent) -> None:
        if event.direction is StreamDirection.INCOMING:
            server.frames.append(event.message)
            client._changed.set()
        else:
            server.sent.append(event.message)

    server.conn = connect_to_agent(
        client,
        process.stdin,
        process.stdout,
        observers=[observe],
        use_unstable_protocol=unstable,
    )
    try:
        if initialize:
            await server.conn.initialize(protocol_version=1, client_capabilities=capabilities)
        yield server
    finally:
        await end_process(process)
        await server.conn.close()


async def end_process(process: asyncio.subprocess.Process) -> None:
    """Close the server's stdin and wait for it to exit (killed after 15 s)."""
    if process.returncode is not None:
        return
    with suppress(Exception):
        assert process.stdin is not None
        process.stdin.close()
    try:
        async with asyncio.timeout(15):
            await process.wait()
    except TimeoutError:
        process.kill()
        await process.wait()


def processes_mentioning(token: str) -> list[str]:
    """``pid command line`` of every live process whose command line contains ``token``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if token in command and state != "Z":
            found.append(f"{entry.name} {command.strip()}")
    return found


def processes_in_session(session_id: int) -> list[str]:
    """``pid command`` of every live process in session ``session_id``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        command, _, rest = stat.rpartition(")")
        fields = rest.split()
        # After the command: state, ppid, pgrp, session, ...
        if len(fields) > 3 and int(fields[3]) == session_id and fields[0] != "Z":
            found.append(f"{entry.name} {command.partition('(')[2]}")
    return found
