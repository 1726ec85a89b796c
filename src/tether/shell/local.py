"""The local shell executor: the ``shell`` service, running commands on this machine.

Mount ``tether.shell.local`` (plugin name ``shell``); it provides ``ctx.shell``,
a :class:`~tether.shell.definition.ShellExecutor`. Every command is
``bash -c COMMAND`` in its own process group (see :mod:`tether.shell.process`).

Lifecycle: tasks belong to the executor's fiber, whoever started them. When
that fiber unloads, every command still running — background tasks and
foreground runs alike — has its process group stopped (SIGTERM, then SIGKILL
after the grace), and the unload returns once all of them have ended; the
private spill directory is then removed. A consumer that unloads or reloads
leaves the tasks it started running and owned as before; when an agent goes
away, its consumer calls :meth:`LocalShell.kill_owned_by`.

Completions (``on_task_done``) are delivered from the event loop callback
that sees a task end, on the executor's side: a listener that needs a
service reads it through its own context.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import inspect
import itertools
import logging
import os
import shutil
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from msgspec import Meta

from tether.location import data_dir
from tether.runtime.schema import FieldError, Schema
from tether.shell.definition import (
    SHELL,
    BashTask,
    OutputListener,
    OutputRead,
    ShellError,
    ShellExecRequest,
    ShellExecSpec,
    ShellRequestError,
    ShellResult,
    StopReport,
    TaskDone,
    TaskDoneListener,
    TaskLimitError,
    TaskNotFoundError,
    TaskStatus,
)
from tether.shell.environment import child_environment
from tether.shell.guard import OrphanGuard
from tether.shell.orphans import state_path
from tether.shell.output import OutputStream, SpillDir
from tether.shell.process import ShellProcess

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tether.runtime import CancelSignal, Context

log = logging.getLogger(__name__)

name = "shell"


class Config(Schema, frozen=True):
    """Configuration of the local shell executor."""

    default_timeout_ms: Annotated[int, Meta(ge=1)] = 120_000
    """The timeout of a foreground run whose request names none."""
    max_timeout_ms: Annotated[int, Meta(ge=1)] = 600_000
    """Longer requested timeouts are cut to this."""
    default_output_bytes: Annotated[int, Meta(ge=1)] = 1 << 20
    """Bytes of each stream kept in memory when the request names no cap."""
    max_output_bytes: Annotated[int, Meta(ge=1)] = 64 << 20
    """Larger requested caps are cut to this."""
    cwd: str | None = None
    """The default working directory (absolute); the process's when unset."""
    max_background_per_owner: Annotated[int, Meta(ge=1)] = 10
    """Background tasks one owner may run at once (unowned tasks count as one owner)."""
    kill_grace_ms: Annotated[int, Meta(ge=0)] = 2_000
    """Time between SIGTERM and SIGKILL when a process group is stopped."""
    spill_dir: str | None = None
    """Where the private spill directory is created; the system's temp dir when unset."""
    bash: str = "bash"
    """The bash executable: a path, or a name looked up on PATH when the plugin loads."""
    state_dir: str | None = None
    """Where the per-host record of running process groups is kept (see
    :mod:`tether.shell.orphans`); ``<data dir>/run`` when unset."""

    def __post_init__(self) -> None:
        if self.default_timeout_ms > self.max_timeout_ms:
            raise FieldError(("default_timeout_ms",), "must not exceed max_timeout_ms")
        if self.default_output_bytes > self.max_output_bytes:
            raise FieldError(("default_output_bytes",), "must not exceed max_output_bytes")
        if self.cwd is not None and not os.path.isabs(self.cwd):
            raise FieldError(("cwd",), f"must be an absolute path, got {self.cwd!r}")


class _Task:
    """The executor's record of one background task (the owner lives here, and only here)."""

    __slots__ = (
        "command",
        "finished_at",
        "id",
        "killed",
        "owner",
        "process",
        "started_at",
        "status",
    )

    def __init__(self, task_id: str, spec: ShellExecSpec, process: ShellProcess) -> None:
        self.id = task_id
        self.command = spec.command
        self.owner = spec.owner
        self.process = process
        self.started_at = time.time()
        self.finished_at: float | None = None
        self.status = TaskStatus.RUNNING
        self.killed = False

    def snapshot(self) -> BashTask:
        ended = self.status is not TaskStatus.RUNNING
        return BashTask(
            id=self.id,
            command=self.command,
            status=self.status,
            exit_code=self.process.exit_code if ended else None,
            signal=self.process.signal if ended else None,
            started_at=self.started_at,
            finished_at=self.finished_at,
            stop=self.process.stop_report() if self.killed else None,
            sandbox=self.process.sandbox,
            appeared=self.process.appeared,
        )


class _Listener:
    """One ``on_task_done`` registration (the same function may be registered twice)."""

    __slots__ = ("fn",)

    def __init__(self, fn: TaskDoneListener) -> None:
        self.fn = fn


class _Core:
    """The executor's state, shared by every caller-bound view."""

    def __init__(self, config: Config, bash: str, guard: OrphanGuard) -> None:
        self.config = config
        self.bash = bash
        self.guard = guard
        self.grace = config.kill_grace_ms / 1000
        self.spill = SpillDir(config.spill_dir)
        self.tasks: dict[str, _Task] = {}
        self.task_ids = itertools.count(1)
        self.run_ids = itertools.count(1)
        self.running_by_owner: Counter[str | None] = Counter()
        """Running background tasks per owner."""
        self.pending: dict[str, TaskDone] = {}
        self.listeners: list[_Listener] = []
        self.live: dict[ShellProcess, Callable[[], None]] = {}
        """Every command not yet ended, with the function that stops it on shutdown."""
        self.closed = False


class LocalShell:
    """The ``shell`` service on this machine (see :class:`~tether.shell.definition.ShellExecutor`).

    Every instance is bound to a context — the provider's own or a caller's
    (:meth:`for_caller`) — and all instances of one executor share its tasks.
    """

    __slots__ = ("_core", "_ctx")

    def __init__(self, ctx: Context, config: Config, bash: str, guard: OrphanGuard) -> None:
        self._ctx = ctx
        self._core = _Core(config, bash, guard)

    def for_caller(self, ctx: Context) -> LocalShell:
        """This executor as seen by ``ctx``: listeners it registers belong to ``ctx``'s fiber."""
        view = object.__new__(LocalShell)
        view._ctx = ctx
        view._core = self._core
        return view

    # -- requests --------------------------------------------------------------

    def resolve(self, request: ShellExecRequest) -> ShellExecSpec:
        """See :meth:`ShellExecutor.resolve`."""
        if not isinstance(request, ShellExecRequest):
            raise TypeError(f"resolve() takes a ShellExecRequest, got {request!r}")
        config = self._core.config
        command = request.command
        if not isinstance(command, str) or not command.strip():
            raise ShellRequestError("the command is empty")
        if "\0" in command:
            raise ShellRequestError("the command contains a NUL character")
        owner = request.owner
        if not isinstance(owner, str | None):
            raise ShellRequestError(f"owner must be a string or None, got {owner!r}")
        return ShellExecSpec(
            command=command,
            cwd=_resolve_cwd(request.cwd, config.cwd),
            env=_checked_env(request.env),
            timeout_ms=_limit(
                "timeout_ms", request.timeout_ms, config.default_timeout_ms, config.max_timeout_ms
            ),
            max_output_bytes=_limit(
                "max_output_bytes",
                request.max_output_bytes,
                config.default_output_bytes,
                config.max_output_bytes,
            ),
            owner=owner,
            sandbox=request.sandbox,
        )

    # -- foreground --------------------------------------------------------------

    async def run(
        self,
        spec: ShellExecSpec,
        signal: CancelSignal | None = None,
        on_output: OutputListener | None = None,
        *,
        on_stop: Callable[[StopReport], None] | None = None,
    ) -> ShellResult:
        """See :meth:`ShellExecutor.run`."""
        if signal is not None and signal.cancelled:
            return ShellResult(stdout="", stderr="", exit_code=None, signal=None, aborted=True)
        stopped_by: list[str] = []

        def stop(reason: str = "aborted") -> None:
            if process.terminate():
                stopped_by.append(reason)

        process = self._spawn(spec, f"run-{next(self._core.run_ids)}", stop)
        process.on_output = on_output
        timer = asyncio.get_running_loop().call_later(spec.timeout_ms / 1000, stop, "timeout")
        forget_signal = signal.on_cancel(lambda _: stop("aborted")) if signal is not None else None
        try:
            await process.wait()
        except asyncio.CancelledError:
            stop("aborted")
            await _wait_through_cancellation(process)
            report = process.stop_report()
            if on_stop is not None and report is not None:
                on_stop(report)
            raise
        finally:
            timer.cancel()
            if forget_signal is not None:
                forget_signal()
        reason = stopped_by[0] if stopped_by else None
        return ShellResult(
            stdout=process.stdout.tail(),
            stderr=process.stderr.tail(),
            exit_code=process.exit_code,
            signal=process.signal,
            timed_out=reason == "timeout",
            aborted=reason == "aborted",
            stdout_truncated=process.stdout.truncated,
            stderr_truncated=process.stderr.truncated,
            stdout_spill=process.stdout.spill_path,
            stderr_spill=process.stderr.spill_path,
            stop=process.stop_report() if reason is not None else None,
            sandbox=process.sandbox,
            appeared=process.appeared,
        )

    # -- background --------------------------------------------------------------

    async def start(self, spec: ShellExecSpec) -> BashTask:
        """See :meth:`ShellExecutor.start`."""
        core = self._core
        self._check_open()
        limit = core.config.max_background_per_owner
        if core.running_by_owner[spec.owner] >= limit:
            running = (
                f"{limit} unowned background tasks are already running"
                if spec.owner is None
                else f"owner {spec.owner!r} already runs {limit} background tasks"
            )
            raise TaskLimitError(
                f"{running}, the most allowed at once: kill one or wait for one to finish"
            )
        task_id = f"bash-{next(core.task_ids)}"
        task: _Task | None = None

        def stop() -> None:
            if task is not None:
                self._stop_task(task)

        process = self._spawn(spec, task_id, stop)
        core.running_by_owner[spec.owner] += 1
        task = _Task(task_id, spec, process)
        core.tasks[task_id] = task
        process.add_end_callback(functools.partial(self._task_ended, task))
        return task.snapshot()

    def get(self, task_id: str) -> BashTask | None:
        """See :meth:`ShellExecutor.get`."""
        task = self._core.tasks.get(task_id)
        return task.snapshot() if task is not None else None

    def list(self) -> builtins.list[BashTask]:
        """See :meth:`ShellExecutor.list`."""
        return [task.snapshot() for task in self._core.tasks.values()]

    def owner_of(self, task_id: str) -> str | None:
        """See :meth:`ShellExecutor.owner_of`."""
        task = self._core.tasks.get(task_id)
        return task.owner if task is not None else None

    def read_output(self, task_id: str) -> OutputRead:
        """See :meth:`ShellExecutor.read_output`."""
        task = self._task(task_id)
        stdout, stderr = task.process.stdout, task.process.stderr
        out_text, out_gap = stdout.take()
        err_text, err_gap = stderr.take()
        snapshot = task.snapshot()
        if snapshot.status is not TaskStatus.RUNNING:
            # Everything it wrote has now been handed out: nothing will ask again.
            stdout.release()
            stderr.release()
        return OutputRead(
            task=snapshot,
            stdout=out_text,
            stderr=err_text,
            stdout_truncated=out_gap,
            stderr_truncated=err_gap,
            stdout_spill=stdout.spill_path,
            stderr_spill=stderr.spill_path,
        )

    def output_tail(self, task_id: str) -> tuple[str, str]:
        """See :meth:`ShellExecutor.output_tail`."""
        process = self._task(task_id).process
        return process.stdout.tail(), process.stderr.tail()

    async def wait(self, task_id: str) -> BashTask:
        """See :meth:`ShellExecutor.wait`."""
        task = self._task(task_id)
        await task.process.wait()
        return task.snapshot()

    async def kill(self, task_id: str) -> BashTask:
        """See :meth:`ShellExecutor.kill`."""
        task = self._task(task_id)
        self._stop_task(task)
        await task.process.wait()
        return task.snapshot()

    def stop_owned_by(self, owner: str) -> builtins.list[BashTask]:
        """See :meth:`ShellExecutor.stop_owned_by`."""
        return [task.snapshot() for task in self._stop_owned(owner)]

    async def kill_owned_by(self, owner: str) -> builtins.list[BashTask]:
        """See :meth:`ShellExecutor.kill_owned_by`."""
        tasks = self._stop_owned(owner)
        await asyncio.gather(*(task.process.wait() for task in tasks))
        return [task.snapshot() for task in tasks]

    def _stop_owned(self, owner: str) -> builtins.list[_Task]:
        if not isinstance(owner, str):
            raise TypeError(f"an owner token is a str, got {owner!r}")
        tasks = [
            task
            for task in self._core.tasks.values()
            if task.owner == owner and task.status is TaskStatus.RUNNING
        ]
        for task in tasks:
            self._stop_task(task)
        return tasks

    # -- completions ---------------------------------------------------------------

    async def on_task_done(self, listener: TaskDoneListener) -> Callable[[], Awaitable[None]]:
        """See :meth:`ShellExecutor.on_task_done`."""
        if not callable(listener):
            raise TypeError(f"on_task_done() takes a callable, got {listener!r}")
        listeners = self._core.listeners
        registration = _Listener(listener)

        def add() -> Callable[[], None]:
            listeners.append(registration)

            def remove() -> None:
                if registration in listeners:
                    listeners.remove(registration)

            return remove

        effect = await self._ctx.effect(add, label="shell:on_task_done")
        return effect.dispose

    def pending_completions(self) -> builtins.list[TaskDone]:
        """See :meth:`ShellExecutor.pending_completions`."""
        return builtins.list(self._core.pending.values())

    def acknowledge(self, task_id: str) -> bool:
        """See :meth:`ShellExecutor.acknowledge`."""
        return self._core.pending.pop(task_id, None) is not None

    # -- lifecycle -----------------------------------------------------------------

    async def shutdown(self) -> None:
        """Stop every command still running, wait until all have ended, remove the spill files.

        Later ``run``/``start`` calls raise :class:`ShellError`. Runs when the
        executor's fiber unloads.
        """
        core = self._core
        core.closed = True
        live = builtins.list(core.live.items())
        for _, stop in live:
            stop()
        await asyncio.gather(*(process.wait() for process, _ in live))
        core.spill.remove()
        await core.guard.close()

    # -- internals -----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._core.closed:
            raise ShellError("the shell executor has shut down")

    def _task(self, task_id: str) -> _Task:
        task = self._core.tasks.get(task_id)
        if task is None:
            raise TaskNotFoundError(f"no background task {task_id!r}")
        return task

    def _spawn(self, spec: ShellExecSpec, label: str, stop: Callable[[], None]) -> ShellProcess:
        """Start ``spec``'s process; ``stop`` is how a shutdown stops it until it ends."""
        self._check_open()
        core = self._core
        limit = spec.max_output_bytes
        stdout = OutputStream(limit, functools.partial(core.spill.open, f"{label}.stdout"))
        stderr = OutputStream(limit, functools.partial(core.spill.open, f"{label}.stderr"))
        env = child_environment(spec.env)
        try:
            process = ShellProcess.spawn(
                core.bash,
                spec.command,
                cwd=spec.cwd,
                env=spec.sandbox.environment(env) if spec.sandbox is not None else env,
                stdout=stdout,
                stderr=stderr,
                grace=core.grace,
                sandbox=spec.sandbox,
            )
        except OSError as exc:
            raise ShellError(f"could not start bash in {spec.cwd!r}: {exc}") from exc
        if process.sandbox is not None:
            log.info("%s (process group %d): %s", label, process.pid, process.sandbox)
        core.live[process] = stop
        core.guard.track(process.pid, label)

        def forget() -> None:
            core.live.pop(process, None)
            core.guard.untrack(process.pid)
            if process.appeared:
                log.warning(
                    "%s (process group %d): protected paths appeared while it ran, "
                    "left in place: %s",
                    label,
                    process.pid,
                    ", ".join(process.appeared),
                )

        process.add_end_callback(forget)
        return process

    def _stop_task(self, task: _Task) -> None:
        if task.process.terminate():
            task.killed = True

    def _release_slot(self, owner: str | None) -> None:
        counts = self._core.running_by_owner
        counts[owner] -= 1
        if counts[owner] <= 0:
            del counts[owner]

    def _task_ended(self, task: _Task) -> None:
        core = self._core
        task.status = TaskStatus.KILLED if task.killed else TaskStatus.COMPLETED
        task.finished_at = time.time()
        self._release_slot(task.owner)
        done = TaskDone(task.snapshot())
        core.pending[task.id] = done
        for registration in builtins.list(core.listeners):
            _notify(registration.fn, done)


def _notify(listener: Callable[[TaskDone], object], done: TaskDone) -> None:
    try:
        result = listener(done)
    except Exception:
        log.exception(
            "on_task_done listener %r raised for %s; the others still run", listener, done.id
        )
        return
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()
        log.error(
            "on_task_done listener %r is asynchronous; listeners must be synchronous", listener
        )


async def _wait_through_cancellation(process: ShellProcess) -> None:
    """Await the end of a process that is being stopped, even if cancelled again meanwhile.

    Stopping is bounded (SIGKILL after the grace, then the drain), so the
    caller's cancellation is only delayed, never lost: the caller re-raises.
    """
    while not process.ended:
        try:
            await process.wait()
        except asyncio.CancelledError:
            continue


def _resolve_cwd(requested: str | None, configured: str | None) -> str:
    base = configured if configured is not None else os.getcwd()
    if requested is not None and not isinstance(requested, str):
        raise ShellRequestError(f"cwd must be a string, got {requested!r}")
    if requested == "":
        raise ShellRequestError("cwd is empty: omit it to use the default directory")
    cwd = os.path.normpath(os.path.join(base, requested)) if requested is not None else base
    if "\0" in cwd:
        raise ShellRequestError("cwd contains a NUL character")
    if not os.path.isdir(cwd):
        what = "is not a directory" if os.path.exists(cwd) else "does not exist"
        raise ShellRequestError(f"working directory {cwd!r} {what}")
    return cwd


def _limit(field: str, requested: int | None, default: int, maximum: int) -> int:
    if requested is None:
        return default
    if isinstance(requested, bool) or not isinstance(requested, int):
        raise ShellRequestError(f"{field} must be an integer, got {requested!r}")
    if requested <= 0:
        raise ShellRequestError(f"{field} must be positive, got {requested}")
    return min(requested, maximum)


def _checked_env(env: Mapping[str, str] | None) -> dict[str, str]:
    if env is None:
        return {}
    for key, value in env.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise ShellRequestError(f"invalid environment variable name {key!r}")
        if not isinstance(value, str) or "\0" in value:
            raise ShellRequestError(f"environment variable {key!r} must be a string without NUL")
    return dict(env)


async def apply(ctx: Context, config: Config) -> None:
    """Provide ``ctx.shell``; commands still running when it unloads are stopped and awaited.

    Raises:
        ShellError: the configured bash executable cannot be found.
    """
    bash = shutil.which(config.bash)
    if bash is None:
        raise ShellError(f"bash executable {config.bash!r} not found (set the plugin's 'bash')")
    state_dir = Path(config.state_dir) if config.state_dir is not None else data_dir() / "run"
    guard = OrphanGuard(state_path(state_dir))
    guard.sweep()
    shell = LocalShell(ctx, config, bash, guard)
    await ctx.effect(lambda: shell.shutdown, label="stop shell commands")
    ctx.provide(SHELL, shell)
