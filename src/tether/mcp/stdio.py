"""A stdio MCP server's process: started and stopped like any tool process.

The process leads a process group of its own (a new session), gets the
parent-death signal (:mod:`tether.shell.parent_death`), and is recorded with
the host's running groups (:class:`~tether.shell.guard.OrphanGuard`), so a
tether that dies however it dies leaves no server behind: the leader dies
with it, the watchdog kills the group, and the next start sweeps what is
left. Its environment is a tool's (:func:`~tether.shell.environment.child_environment`:
secrets scrubbed) plus the entry's own ``env``.

:meth:`StdioProcess.streams` is the MCP transport: newline-delimited JSON-RPC
on stdin and stdout, as the SDK's memory streams. stderr is logged (debug)
and its last lines are kept to explain an exit.

Stopping (:meth:`StdioProcess.stop`) closes stdin and sends SIGTERM to the
group at once, then SIGKILL after the grace; it returns once the leader has
exited and no process of the group is left (awaited with the shell's
:func:`~tether.shell.process.group_emptied`, after a SIGKILL too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from tether.mcp.errors import McpStartError
from tether.shell.confinement import confined_spawn
from tether.shell.environment import child_environment
from tether.shell.process import group_alive, group_emptied, signal_name

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from mcp.shared.message import SessionMessage

    from tether.mcp.servers import StdioServer
    from tether.shell.guard import OrphanGuard
    from tether.shell.sandbox import SandboxPolicy

log = logging.getLogger(__name__)

_READ_SIZE = 1 << 16
_STDERR_LINES = 20

UNKILLABLE_WAIT = 5.0
"""How long :meth:`StdioProcess.stop` waits for a group it has sent SIGKILL to."""


class StdioProcess:
    """One running stdio server (create it with :meth:`spawn`)."""

    def __init__(
        self,
        spec: StdioServer,
        process: asyncio.subprocess.Process,
        guard: OrphanGuard | None,
        max_message_bytes: int,
    ) -> None:
        self.spec = spec
        self._process = process
        self._guard = guard
        self._max_message = max_message_bytes
        self._stderr: deque[str] = deque(maxlen=_STDERR_LINES)
        self._pumps = [
            asyncio.get_running_loop().create_task(self._read_stderr(), name="mcp-stderr"),
        ]
        self.exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pumps.append(
            asyncio.get_running_loop().create_task(self._wait(), name=f"mcp-wait:{spec.name}")
        )
        self.fault: str | None = None
        """Why tether stopped the server on its own (an oversized message), if it did."""

    @property
    def pid(self) -> int:
        """The leader's pid, which is also the process group's id."""
        return self._process.pid

    @classmethod
    async def spawn(
        cls,
        spec: StdioServer,
        *,
        cwd: str | None,
        guard: OrphanGuard | None,
        label: str,
        max_message_bytes: int,
        sandbox: SandboxPolicy | None = None,
    ) -> StdioProcess:
        """Start ``spec``'s command in ``spec.cwd`` (else ``cwd``), confined to ``sandbox``
        (see :mod:`tether.shell.confinement`; what was applied is logged).

        Raises:
            McpStartError: the command is not found or cannot be executed, the
                working directory does not exist, or the sandbox cannot be
                enforced and its fallback is ``refuse``.
        """
        env = child_environment(spec.env)
        if sandbox is not None:
            env = sandbox.environment(env)
        executable = _resolve(spec.command, env.get("PATH", os.defpath))
        directory = spec.cwd or cwd or os.getcwd()
        if not os.path.isdir(directory):  # noqa: ASYNC240 (one stat, before a spawn)
            raise McpStartError(f"its working directory {directory!r} does not exist")
        try:
            with confined_spawn(sandbox, os.getpid()) as launch:
                process = await cls._exec(
                    [*launch.prefix, executable, *spec.args], directory, env, launch.preexec
                )
        except OSError as exc:
            raise McpStartError(f"{spec.command!r} could not be started: {exc}") from None
        if launch.record is not None:
            log.info("%s (process group %d): %s", label, process.pid, launch.record)
        if guard is not None:
            guard.track(process.pid, label)
        return cls(spec, process, guard, max_message_bytes)

    @staticmethod
    async def _exec(
        argv: list[str],
        directory: str,
        env: dict[str, str],
        preexec: Callable[[], None] | None,
    ) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=directory,
            env=env,
            start_new_session=True,
            # Safe with threads: it takes no lock, it only makes system calls.
            preexec_fn=preexec,
        )

    def stderr_tail(self) -> str:
        """The last lines the server wrote to stderr (empty when it wrote none)."""
        return "\n".join(self._stderr)

    def describe_exit(self) -> str:
        """``exited with status 3`` / ``was killed by SIGKILL``, with its last stderr lines."""
        code = self._process.returncode
        if code is None:
            what = "is running"
        elif code < 0:
            what = f"was killed by {signal_name(-code)}"
        else:
            what = f"exited with status {code}"
        tail = self.stderr_tail()
        return f"{what}; its stderr ended with:\n{tail}" if tail else what

    @contextlib.asynccontextmanager
    async def streams(
        self,
    ) -> AsyncIterator[
        tuple[
            MemoryObjectReceiveStream[SessionMessage | Exception],
            MemoryObjectSendStream[SessionMessage],
        ]
    ]:
        """The process's stdio as the SDK's transport streams (for one ``ClientSession``)."""
        import anyio
        from mcp.shared.message import SessionMessage

        read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
        async with anyio.create_task_group() as group:
            group.start_soon(self._pump_stdout, read_writer)
            group.start_soon(self._pump_stdin, write_reader)
            try:
                yield read_stream, write_stream
            finally:
                group.cancel_scope.cancel()
                await read_stream.aclose()
                await write_stream.aclose()

    async def stop(self, grace: float) -> None:
        """Close stdin and end the server's whole process group; return once it is gone.

        SIGTERM goes to the group at once; SIGKILL follows after ``grace``
        seconds unless, by then, the leader has exited and no process of the
        group is left. It returns once both hold — after a SIGKILL too, which
        is awaited, not assumed. The one exception: when that is still not so
        :data:`UNKILLABLE_WAIT` seconds after SIGKILL (a process stuck in the
        kernel, or one that left the group still holding the server's pipes),
        it is logged and not waited for. Idempotent; concurrent calls each
        return once the group is gone.
        """
        stdin = self._process.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
        if not self.exited.done() or group_alive(self.pid):
            self._signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(grace):
                    await self._gone()
            except TimeoutError:
                self._signal(signal.SIGKILL)
                try:
                    async with asyncio.timeout(UNKILLABLE_WAIT):
                        await self._gone()
                except TimeoutError:
                    log.warning(
                        "mcp server %s: group %d is not gone %g s after SIGKILL (a process "
                        "stuck in the kernel, or one outside the group holding its pipes); "
                        "not waiting for it",
                        self.spec.name,
                        self.pid,
                        UNKILLABLE_WAIT,
                    )
        for pump in self._pumps:
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

    # -- internals -------------------------------------------------------------------

    async def _gone(self) -> None:
        """Return once the leader has exited and its group has emptied."""
        await asyncio.shield(self.exited)
        await group_emptied(self.pid)

    def _signal(self, number: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, number)

    async def _wait(self) -> None:
        code = await self._process.wait()
        if self._guard is not None:
            self._guard.untrack(self.pid)
        if not self.exited.done():
            self.exited.set_result(code)

    async def _read_stderr(self) -> None:
        stream = self._process.stderr
        assert stream is not None
        pending = b""
        while chunk := await stream.read(_READ_SIZE):
            *lines, pending = (pending + chunk).split(b"\n")
            pending = pending[-4096:]
            for line in lines:
                text = line.decode(errors="replace").rstrip()[:1000]
                self._stderr.append(text)
                log.debug("mcp server %s: %s", self.spec.name, text)
        if pending:
            self._stderr.append(pending.decode(errors="replace").rstrip()[:1000])

    async def _pump_stdout(self, sink: MemoryObjectSendStream[Any]) -> None:
        import anyio
        import mcp_types as types
        from mcp.shared.message import SessionMessage

        stream = self._process.stdout
        assert stream is not None
        buffer = bytearray()
        async with sink:
            try:
                while chunk := await stream.read(_READ_SIZE):
                    buffer += chunk
                    while (end := buffer.find(b"\n")) >= 0:
                        line = bytes(buffer[:end])
                        del buffer[: end + 1]
                        if not line.strip():
                            continue
                        try:
                            message = types.jsonrpc_message_adapter.validate_json(
                                line, by_name=False
                            )
                        except Exception as exc:
                            log.warning(
                                "mcp server %s wrote a line that is not JSON-RPC: %.200r",
                                self.spec.name,
                                line,
                            )
                            await sink.send(exc)
                            continue
                        await sink.send(SessionMessage(message))
                    if len(buffer) > self._max_message:
                        self.fault = (
                            f"it sent a message larger than {self._max_message} bytes, "
                            "so it was stopped"
                        )
                        log.warning("mcp server %s: %s", self.spec.name, self.fault)
                        self._signal(signal.SIGKILL)
                        return
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return

    async def _pump_stdin(self, source: MemoryObjectReceiveStream[Any]) -> None:
        import anyio

        stdin = self._process.stdin
        assert stdin is not None
        async with source:
            try:
                async for message in source:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    stdin.write(data.encode() + b"\n")
                    await stdin.drain()
            except (ConnectionError, anyio.ClosedResourceError, anyio.BrokenResourceError):
                return


def _resolve(command: str, path: str) -> str:
    """The executable ``command`` names (a path, or a name looked up on ``path``).

    Raises:
        McpStartError: there is none.
    """
    if "/" in command:
        if not (os.path.isfile(command) and os.access(command, os.X_OK)):
            raise McpStartError(f"command {command!r} is not an executable file")
        return command
    found = shutil.which(command, path=path)
    if found is None:
        raise McpStartError(f"command {command!r} was not found on PATH")
    return found
