"""Running one user hook as an owned process (the ``hooks`` plugin's, :mod:`tether.front.hooks`).

A hook is ``bash -c COMMAND`` (:class:`~tether.shell.process.ShellProcess`)
in a process group of its own, with the event's JSON on its stdin:

* **sandboxed** — confined to the sandbox policy of the agent's commands when
  the ``sandbox`` service is there and the setting asks for it;
* **timed out** — its group is stopped (SIGTERM, then SIGKILL after
  :data:`GRACE` seconds) at its timeout;
* **killed on cancel** — when the call's signal is cancelled, when the
  agent is cancelled (``agent/cancel-requested``), or when the awaiting task
  is cancelled; a hook a cancel stopped is kept for the stop receipt
  (:meth:`HookRunner.stopped`, a ``kind: "hook"`` entry of ``tool/stopped``);
* **traced** — with telemetry on, ``TRACEPARENT`` names the span it runs
  under: its call's ``execute_tool`` for a tool's hook, else the open turn's
  ``invoke_agent``, else the session's own context;
* **guarded against orphans** — its group is in the host's record of running
  groups (:class:`~tether.shell.guard.OrphanGuard`) while it runs, so a
  SIGKILL of tether does not leave it behind.

A hook that cannot be started is logged in one line (``None``); one that
times out is logged in one line. Nothing here raises for a hook's failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from tether.session import Stopped
from tether.shell.environment import child_environment
from tether.shell.guard import OrphanGuard
from tether.shell.output import OutputStream
from tether.shell.process import ShellProcess
from tether.shell.sandbox import SANDBOX

if TYPE_CHECKING:
    from tether.agent.types import Agent
    from tether.runtime import Context
    from tether.runtime.signal import CancelSignal

__all__ = ["GRACE", "HookRun", "HookRunner"]

log = logging.getLogger(__name__)

OUTPUT_LIMIT = 1 << 20
"""Bytes of a hook's stdout and stderr kept (the rest is dropped)."""
GRACE = 2.0
"""Seconds between SIGTERM and SIGKILL when a hook's group is stopped."""


class HookRun(NamedTuple):
    """How one hook ended."""

    exit_code: int | None
    """``None`` when it did not exit by itself (timed out, cancelled, killed)."""
    stdout: str
    stderr: str
    timed_out: bool
    pgid: int
    cancelled: bool = False
    """A cancel (of the call, the agent or the awaiting task) stopped it."""


class _Running(NamedTuple):
    process: ShellProcess
    label: str
    """What the stop receipt calls it: the event, and the call's id for a tool's hook."""


class HookRunner:
    """Starts hooks as owned processes and keeps, per agent, those running and those a
    cancel stopped (see the module docs)."""

    def __init__(self, ctx: Context, guard: OrphanGuard | None, *, sandboxed: bool) -> None:
        self._ctx = ctx
        self._guard = guard
        self._sandboxed = sandboxed
        self._bash = shutil.which("bash") or "/bin/bash"
        self._running: dict[str, set[_Running]] = {}
        self._stopped: dict[str, list[Stopped]] = {}
        self._cancels: dict[str, int] = {}

    def cancels(self, agent: Agent) -> int:
        """How many times ``agent`` was cancelled while this runner watched: a caller
        running several hooks stops when it changes."""
        return self._cancels.get(agent.id, 0)

    async def run(
        self,
        command: str,
        payload: Mapping[str, object],
        *,
        cwd: str,
        agent: Agent,
        limit: float,
        label: str,
        signal: CancelSignal | None = None,
    ) -> HookRun | None:
        """Run ``command`` with ``payload`` on its stdin, in ``cwd``, for ``agent``;
        ``None`` when it could not be started (logged). Its group is stopped at
        ``limit`` seconds, when ``signal`` or ``agent`` is cancelled, or when the
        awaiting task is (the task then waits for the group to end, and re-raises)."""
        traced = await self._trace_variables(agent, payload)
        process = self._spawn(command, payload, cwd, agent, traced)
        if process is None:
            return None
        running = _Running(process, label)
        self._running.setdefault(agent.id, set()).add(running)
        if self._guard is not None:
            self._guard.track(process.pid, f"hook {label}")
        timed_out: list[bool] = []

        def expire() -> None:
            if process.terminate():
                timed_out.append(True)

        def stop(_: object) -> None:
            process.terminate()

        timer = asyncio.get_running_loop().call_later(limit, expire)
        forget = signal.on_cancel(stop) if signal is not None else None
        try:
            await _until_ended(process)
        finally:
            timer.cancel()
            if forget is not None:
                forget()
            self._ended(agent, running, timed_out=bool(timed_out))
        stopped = process.stop_report() is not None and not timed_out
        ran = HookRun(
            process.exit_code,
            process.stdout.tail(),
            process.stderr.tail(),
            bool(timed_out),
            process.pid,
            cancelled=stopped,
        )
        if ran.timed_out:
            log.warning(
                "hook %r timed out after %g s; its process group %d was killed",
                command,
                limit,
                ran.pgid,
            )
        return ran

    async def _trace_variables(
        self, agent: Agent, payload: Mapping[str, object]
    ) -> Mapping[str, str]:
        """The trace context of a hook (telemetry on): a tool's hook (its payload names
        the call, ``tool_use_id``) in the call's span, others in the open turn's."""
        from tether.telemetry.context import TRACING  # small; not loaded at start-up

        tracing = self._ctx.get(TRACING)
        if tracing is None:
            return {}
        call_id = payload.get("tool_use_id")
        return await tracing.agent_environment(
            agent.session, call_id if isinstance(call_id, str) else None
        )

    def _spawn(
        self,
        command: str,
        payload: Mapping[str, object],
        cwd: str,
        agent: Agent,
        traced: Mapping[str, str],
    ) -> ShellProcess | None:
        sandbox = self._ctx.get(SANDBOX) if self._sandboxed else None
        policy = (
            sandbox.policy_for(cwd, agent.id, agent.session.settings.options)
            if sandbox is not None
            else None
        )
        env = child_environment({**traced, "CLAUDE_PROJECT_DIR": cwd})
        if policy is not None:
            env = policy.environment(env)
        stdout, stderr = OutputStream(OUTPUT_LIMIT, None), OutputStream(OUTPUT_LIMIT, None)
        with tempfile.TemporaryFile() as stdin:
            stdin.write(json.dumps(payload, default=str).encode())
            stdin.flush()
            stdin.seek(0)
            try:
                return ShellProcess.spawn(
                    self._bash,
                    command,
                    cwd=cwd,
                    env=env,
                    stdout=stdout,
                    stderr=stderr,
                    grace=GRACE,
                    sandbox=policy,
                    stdin=stdin.fileno(),
                )
            except OSError as exc:
                log.warning("hook %r could not start: %s", command, exc)
                return None

    def _ended(self, agent: Agent, running: _Running, *, timed_out: bool) -> None:
        """Forget a hook that ended; keep it for the receipt when a cancel stopped it."""
        process = running.process
        if self._guard is not None:
            self._guard.untrack(process.pid)
        live = self._running.get(agent.id)
        if live is not None:
            live.discard(running)
            if not live:
                del self._running[agent.id]
        report = process.stop_report()
        if report is None or timed_out:
            return
        self._stopped.setdefault(agent.id, []).append(
            Stopped(
                kind="hook",
                id=running.label,
                pgid=report.pgid,
                signals=report.signals,
                exit_code=report.exit_code,
                exit_signal=report.exit_signal,
                seconds=report.seconds,
            )
        )

    def cancel(self, agent: Agent, _cause: object = None) -> None:
        """``agent/cancel-requested``: stop every hook running for ``agent`` now."""
        self._cancels[agent.id] = self._cancels.get(agent.id, 0) + 1
        for running in tuple(self._running.get(agent.id, ())):
            running.process.terminate()

    def stopped(self, agent: Agent) -> tuple[Stopped, ...]:
        """The hooks of ``agent`` a cancel stopped since last asked (for its stop receipt)."""
        return tuple(self._stopped.pop(agent.id, ()))

    def forget(self, agent: Agent) -> None:
        """Drop what is kept for ``agent`` (it is gone)."""
        self._stopped.pop(agent.id, None)
        self._cancels.pop(agent.id, None)

    async def shutdown(self) -> None:
        """Stop every running hook, wait until each has ended, and close the guard."""
        processes = [r.process for live in self._running.values() for r in live]
        for process in processes:
            process.terminate()
        for process in processes:
            await _until_ended(process)
        if self._guard is not None:
            await self._guard.close()


async def _until_ended(process: ShellProcess) -> None:
    """Wait for ``process`` to end; when the waiting task is cancelled, stop the
    process's group, wait for it to end all the same, and re-raise."""
    try:
        await process.wait()
    except asyncio.CancelledError:
        process.terminate()
        while not process.ended:
            with contextlib.suppress(asyncio.CancelledError):
                await process.wait()
        raise
