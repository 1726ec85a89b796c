"""bash in the client's terminals: ``terminal/create`` … ``release``, cancel and the receipt."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

from acp.exceptions import RequestError
from acp.schema import (
    ClientCapabilities,
    CreateTerminalResponse,
    KillTerminalResponse,
    ReleaseTerminalResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    TerminalToolCallContent,
    ToolCallProgress,
    WaitForTerminalExitResponse,
)

from tests.acp.harness import Recorder, serving
from tests.acp.test_orphans import REAL_BASH
from tests.shell.support import Gate, alive


class TerminalClient(Recorder):
    """A client that runs terminals as real processes, and records every terminal call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str, str]] = []
        """``(method, session id, terminal id)`` in order."""
        self.created: list[dict[str, Any]] = []
        self._processes: dict[str, asyncio.subprocess.Process] = {}
        self._output: dict[str, bytes] = {}
        self._readers: dict[str, asyncio.Task[None]] = {}

    def _process(self, session_id: str, terminal_id: str, method: str) -> Any:
        self.calls.append((method, session_id, terminal_id))
        if terminal_id not in self._processes:
            raise RequestError.invalid_params({"terminalId": terminal_id})
        return self._processes[terminal_id]

    async def create_terminal(
        self,
        command: str,
        session_id: str,
        *,
        args: list[str] | None = None,
        env: Any = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **_meta: Any,
    ) -> CreateTerminalResponse:
        terminal_id = f"term-{len(self._processes) + 1}"
        self.calls.append(("create", session_id, terminal_id))
        self.created.append({"command": command, "args": args, "cwd": cwd})
        process = await asyncio.create_subprocess_exec(
            command,
            *(args or []),
            cwd=cwd,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        self._processes[terminal_id] = process
        self._output[terminal_id] = b""

        async def read() -> None:
            assert process.stdout is not None
            while chunk := await process.stdout.read(4096):
                self._output[terminal_id] += chunk

        self._readers[terminal_id] = asyncio.ensure_future(read())
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **_meta: Any
    ) -> WaitForTerminalExitResponse:
        process = self._process(session_id, terminal_id, "wait_for_exit")
        code = await process.wait()
        await self._readers[terminal_id]
        if code < 0:
            return WaitForTerminalExitResponse(signal=signal.Signals(-code).name)
        return WaitForTerminalExitResponse(exit_code=code)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **_meta: Any
    ) -> TerminalOutputResponse:
        process = self._process(session_id, terminal_id, "output")
        status = None
        if process.returncode is not None:
            code = process.returncode
            status = TerminalExitStatus(
                exit_code=code if code >= 0 else None,
                signal=signal.Signals(-code).name if code < 0 else None,
            )
        return TerminalOutputResponse(
            output=self._output[terminal_id].decode(), truncated=False, exit_status=status
        )

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **_meta: Any
    ) -> KillTerminalResponse:
        process = self._process(session_id, terminal_id, "kill")
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGKILL)
        return KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **_meta: Any
    ) -> ReleaseTerminalResponse:
        process = self._process(session_id, terminal_id, "release")
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        return ReleaseTerminalResponse()


TERMINAL = ClientCapabilities(terminal=True)


def in_terminals(tmp_path: Path, client: TerminalClient, *args: str) -> Any:
    """``tether acp --terminal client ARGS`` with the real bash tools, served by ``client``."""
    return serving(
        tmp_path,
        "--terminal",
        "client",
        *args,
        overlay=REAL_BASH,
        client=client,
        capabilities=TERMINAL,
    )


async def test_a_command_runs_in_the_clients_terminal_shown_live(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    client = TerminalClient()
    async with in_terminals(tmp_path, client, "--mode", "auto") as server:
        sid = await server.new_session(work)
        assert await server.prompt(sid, "bash echo from the editor; pwd; exit 3") == "end_turn"
        assert [(m, s) for m, s, _ in client.calls] == [
            ("create", sid),
            ("wait_for_exit", sid),
            ("output", sid),
            ("release", sid),
        ]
        assert client.created == [
            {
                "command": "bash",
                "args": ["-c", "echo from the editor; pwd; exit 3"],
                "cwd": str(work),
            }
        ]
        updates = [u for u in server.client.of(sid) if isinstance(u, ToolCallProgress)]
        shown = [
            u
            for u in updates
            if any(isinstance(c, TerminalToolCallContent) for c in u.content or [])
        ]
        assert shown and shown[0].content[0].terminal_id == "term-1"  # type: ignore[index, union-attr]
        final = updates[-1]
        assert final.status == "failed"
        assert isinstance(final.content[0], TerminalToolCallContent)  # type: ignore[index]
        text = final.content[-1].content.text  # type: ignore[index, union-attr]
        assert text == f"from the editor\n{work}\n[exit code: 3]"


async def test_cancel_kills_and_releases_the_terminal_and_writes_the_receipt(
    tmp_path: Path,
) -> None:
    gate = Gate(tmp_path / "gate")
    client = TerminalClient()
    async with in_terminals(tmp_path, client) as server:
        sid = await server.new_session()
        line = asyncio.ensure_future(gate.line())
        held = server.start_prompt(sid, f"bash echo $$ > {gate}; exec sleep 30")
        pid = int(await line)
        await server.conn.cancel(session_id=sid)
        assert await held == "cancelled"
        assert not alive(pid)
        assert [m for m, _, _ in client.calls] == [
            "create",
            "wait_for_exit",
            "kill",
            "output",
            "release",
        ]
        await server.close_stdin()
        (receipt,) = [e["data"] for e in server.log(sid) if e["type"] == "tool/stopped"]
        (stopped,) = receipt["stopped"]
        assert receipt["cause"] == "user"
        assert stopped["kind"] == "terminal" and stopped["pgid"] == 0
        assert stopped["signals"] == ["terminal/kill"] and stopped["exit_signal"] == "SIGKILL"
        assert stopped["seconds"] is not None and stopped["seconds"] < 5


async def test_without_the_setting_or_the_capability_commands_run_locally(tmp_path: Path) -> None:
    for args, capabilities in (
        (("--terminal", "local"), TERMINAL),
        (("--terminal", "client"), None),
    ):
        client = TerminalClient()
        async with serving(
            tmp_path / args[1] / str(capabilities is None),
            "--mode",
            "auto",
            *args,
            overlay=REAL_BASH,
            client=client,
            capabilities=capabilities,
        ) as server:
            sid = await server.new_session()
            assert await server.prompt(sid, "bash echo local") == "end_turn"
            assert client.calls == []
            assert server.client.text(sid).startswith("done: local")


async def test_background_tasks_stay_in_the_local_executor(tmp_path: Path) -> None:
    client = TerminalClient()
    async with in_terminals(tmp_path, client, "--mode", "auto") as server:
        sid = await server.new_session()
        # Still running when the call returns: its end is no part of this turn.
        assert await server.prompt(sid, "bg sleep 5; echo later") == "end_turn"
        assert client.calls == []
        assert "started background task bash-1" in server.client.text(sid)


class BrokenTerminals(TerminalClient):
    """A client that advertises terminals but fails to create one."""

    async def create_terminal(self, command: str, session_id: str, **kwargs: Any) -> Any:
        self.calls.append(("create", session_id, ""))
        raise RequestError.internal_error({"details": "no terminals today"})


async def test_a_client_that_fails_the_terminal_fails_the_call_with_its_reason(
    tmp_path: Path,
) -> None:
    client = BrokenTerminals()
    async with in_terminals(tmp_path, client, "--mode", "auto") as server:
        sid = await server.new_session()
        assert await server.prompt(sid, "bash echo never") == "end_turn"
        assert [m for m, _, _ in client.calls] == ["create"]
        final = [u for u in server.client.of(sid) if isinstance(u, ToolCallProgress)][-1]
        assert final.status == "failed"
        assert "the client's terminal failed" in server.client.text(sid)
