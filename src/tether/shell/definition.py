"""The shell executor's Service Definition (``ctx.shell``): its values, errors and protocol.

A Consumer (a tool plugin, a program) turns what it was asked into a
:class:`ShellExecRequest`, lets the executor :meth:`~ShellExecutor.resolve` it
into a :class:`ShellExecSpec` with every default filled in, and then either
runs it in the foreground (:meth:`~ShellExecutor.run`, which returns a
:class:`ShellResult`) or starts it as a background task
(:meth:`~ShellExecutor.start`, which returns a :class:`BashTask`).

Ownership: a spec carries an opaque ``owner`` token. The executor stores it on
the task and exposes it through :meth:`~ShellExecutor.owner_of` only — the
public :class:`BashTask` has no owner field — and never interprets it. Access
policy (who may read or kill whose task) belongs to the Consumer.

Completions: when a background task finishes, the executor records a
:class:`TaskDone` and tells the ``on_task_done`` listeners. The record stays in
:meth:`~ShellExecutor.pending_completions` until a consumer
:meth:`~ShellExecutor.acknowledge`\\ s it, so a consumer that was reloading when
a task finished can still deliver the notice once it is back.
"""

from __future__ import annotations

import builtins
import enum
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

import msgspec

from tether.runtime.keys import ServiceKey
from tether.shell.sandbox import SandboxPolicy

if TYPE_CHECKING:
    from tether.runtime.signal import CancelSignal


# -- errors --------------------------------------------------------------------


class ShellError(Exception):
    """Base class of the executor's errors; raised alone for infrastructure failures.

    A command that fails (non-zero exit, killed, timed out) is a result, never
    an error. This is raised when the command could not be run at all: bash
    could not be spawned, or the executor has shut down.
    """


class ShellRequestError(ShellError):
    """A request is invalid: empty command, missing working directory, bad limits."""


class TaskNotFoundError(ShellError):
    """No background task has this id in this executor."""


class TaskLimitError(ShellError):
    """The owner already runs as many background tasks as the executor allows."""


# -- values --------------------------------------------------------------------


def _frozen_env(env: Mapping[str, str] | None) -> Mapping[str, str] | None:
    return None if env is None else MappingProxyType(dict(env))


class ShellExecRequest(msgspec.Struct, frozen=True):
    """What a consumer asks for; :meth:`ShellExecutor.resolve` fills in the rest.

    ``env`` holds variables to set for this command on top of the executor's
    environment (it is copied; later changes to the caller's mapping do not
    leak in). ``owner`` is an opaque token (for ``tool_bash``: the agent id).
    """

    command: str
    cwd: str | None = None
    env: Mapping[str, str] | None = None
    timeout_ms: int | None = None
    owner: str | None = None
    max_output_bytes: int | None = None
    sandbox: SandboxPolicy | None = None
    """The policy the command runs under (see :mod:`tether.shell.sandbox`); none: unconfined."""

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "env", _frozen_env(self.env))


class ShellExecSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A request with every field resolved; what :meth:`~ShellExecutor.run` and
    :meth:`~ShellExecutor.start` execute.

    ``owner`` is required and has no default: a consumer that forgot to stamp
    one shows a visible ``None``, never a silently missing attribute.
    """

    command: str
    cwd: str
    """An absolute path to an existing directory (checked when resolved)."""
    env: Mapping[str, str]
    """Set on top of the inherited, scrubbed environment; overrides it."""
    timeout_ms: int
    """Wall-clock limit of a foreground run; background tasks run until they end or are killed."""
    max_output_bytes: int
    """How many bytes of each stream are kept in memory; the rest spills to a file."""
    owner: str | None
    sandbox: SandboxPolicy | None = None
    """The policy the command runs under; ``None``: unconfined."""

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "env", MappingProxyType(dict(self.env)))


class StopReport(msgspec.Struct, frozen=True, kw_only=True):
    """What stopping one command did: the receipt of a stop.

    ``signals`` are the signals sent to the process group, in order
    (``("SIGTERM",)``, or ``("SIGTERM", "SIGKILL")`` when the grace ran out).
    ``exit_code``/``exit_signal`` say how the leader ended; ``seconds`` is the
    time from the stop to the end of the command (its whole group gone, its
    pipes closed), ``None`` while it has not ended.
    """

    pgid: int
    signals: tuple[str, ...]
    exit_code: int | None
    exit_signal: str | None
    seconds: float | None


class ShellResult(msgspec.Struct, frozen=True, kw_only=True):
    """How a foreground command ended, and what it wrote.

    ``stdout``/``stderr`` hold the last ``max_output_bytes`` of each stream
    (decoded as UTF-8, undecodable bytes replaced). When a stream wrote more,
    its ``*_truncated`` flag is set and ``*_spill`` is the path of a private
    file holding the whole stream.

    ``exit_code`` is set when bash exited; ``signal`` (``"SIGKILL"``, …) when
    a signal ended it. ``timed_out`` and ``aborted`` say why the executor
    stopped it — the timeout, or the caller's signal (or the executor shutting
    down) — and are never both set; ``stop`` is then the receipt of that stop.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    signal: str | None
    timed_out: bool = False
    aborted: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_spill: str | None = None
    stderr_spill: str | None = None
    stop: StopReport | None = None
    sandbox: str | None = None
    """The confinement applied, in one line (:meth:`SandboxPolicy.summary`, or why
    none was); ``None`` when the spec asked for none."""
    appeared: tuple[str, ...] = ()
    """Protected paths that did not exist when the confined command started and do
    now (or hold another file): the sandbox could not keep them read-only."""

    def __post_init__(self) -> None:
        if self.timed_out and self.aborted:
            raise ValueError("a shell result is either timed out or aborted, never both")

    @property
    def truncated(self) -> bool:
        """True when either stream lost its head from memory (see the spill paths)."""
        return self.stdout_truncated or self.stderr_truncated


class TaskStatus(enum.StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    """bash exited on its own (whatever its exit code or signal)."""
    KILLED = "killed"
    """The executor stopped it: ``kill``, ``kill_owned_by``, or shutdown."""


class BashTask(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one background task. Its owner is deliberately not here:
    :meth:`ShellExecutor.owner_of` is the one way to read it."""

    id: str
    command: str
    status: TaskStatus
    exit_code: int | None = None
    signal: str | None = None
    started_at: float
    """Wall-clock seconds since the epoch."""
    finished_at: float | None = None
    stop: StopReport | None = None
    """The receipt of the kill, for a task that was killed."""
    sandbox: str | None = None
    """The confinement applied, in one line (see :attr:`ShellResult.sandbox`)."""
    appeared: tuple[str, ...] = ()
    """Once the task has ended: see :attr:`ShellResult.appeared`."""


class OutputRead(msgspec.Struct, frozen=True, kw_only=True):
    """What one :meth:`ShellExecutor.read_output` call returns: output not read before.

    ``*_truncated`` is set when part of the unread output had already left
    memory (more than ``max_output_bytes`` arrived since the last read); what
    is returned is then the most recent part, and ``*_spill`` names the file
    holding the whole stream. A spill path is reported whenever the stream
    has spilled, truncated or not.
    """

    task: BashTask
    """The task as it was at the moment of the read; when it is no longer
    running, everything it wrote has been captured."""
    stdout: str
    stderr: str
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_spill: str | None = None
    stderr_spill: str | None = None


class TaskDone(msgspec.Struct, frozen=True):
    """A background task finished; pending until a consumer acknowledges it."""

    task: BashTask

    @property
    def id(self) -> str:
        return self.task.id


OutputListener = Callable[[bytes], None]
"""Hears a foreground command's output as it is read (see :meth:`ShellExecutor.run`).
Synchronous: it runs in the event loop's reader and must not block."""

TaskDoneListener = Callable[[TaskDone], None]
"""Hears each finished background task. Synchronous: it runs inside the
executor's bookkeeping and must not block."""


# -- the definition ------------------------------------------------------------


class ShellExecutor(Protocol):
    """The ``shell`` service: run commands, and own background tasks.

    Reached as ``ctx.shell``, it is bound to the caller (caller binding):
    listeners registered through it belong to the caller's fiber. Tasks
    belong to the executor, whoever started them: unloading or reloading the
    plugin that started a task leaves the task and its owner untouched.
    """

    def resolve(self, request: ShellExecRequest) -> ShellExecSpec:
        """Fill every default of ``request`` and validate it.

        The timeout defaults to the executor's (120 s unless configured) and
        is capped at its maximum; the output cap likewise. ``cwd`` is taken
        from the request (a relative one is resolved against the default),
        else the executor's configured directory, else the process's.

        Raises:
            ShellRequestError: empty command or one containing NUL, a
                non-positive timeout or output cap, a working directory that
                does not exist, a malformed environment variable.
        """
        ...

    async def run(
        self,
        spec: ShellExecSpec,
        signal: CancelSignal | None = None,
        on_output: OutputListener | None = None,
        *,
        on_stop: Callable[[StopReport], None] | None = None,
    ) -> ShellResult:
        """Run ``spec`` in the foreground and return how it ended.

        ``on_output``, when given, is called with each piece of the output
        (stdout and stderr alike, raw bytes, in the order read) while the
        command runs; one that raises is logged and called no more.

        A non-zero exit is a result. The timeout and ``signal`` stop the
        command (``timed_out`` / ``aborted``): its process group gets SIGTERM,
        then SIGKILL after the kill grace; the result is returned once the
        group is gone and its output collected. If the awaiting task is
        cancelled, the command is stopped the same way before the
        cancellation propagates; ``on_stop``, when given, is then called
        with what stopping it did (no result carries it).

        Raises:
            ShellError: bash could not be spawned, or the executor is shut down.
        """
        ...

    async def start(self, spec: ShellExecSpec) -> BashTask:
        """Start ``spec`` as a background task (ids ``bash-1``, ``bash-2``, …).

        The task runs until it ends or is killed; ``spec.timeout_ms`` does
        not apply. ``spec.owner`` is stored for :meth:`owner_of`.

        Raises:
            TaskLimitError: ``spec.owner`` already runs the maximum number of tasks.
            ShellError: bash could not be spawned, or the executor is shut down.
        """
        ...

    def get(self, task_id: str) -> BashTask | None:
        """A snapshot of the task, or ``None`` for an unknown id."""
        ...

    def list(self) -> builtins.list[BashTask]:
        """Snapshots of every task of this executor, in start order."""
        ...

    def read_output(self, task_id: str) -> OutputRead:
        """The output the task wrote since the previous read (see :class:`OutputRead`).

        Raises:
            TaskNotFoundError: unknown id.
        """
        ...

    def output_tail(self, task_id: str) -> tuple[str, str]:
        """The last of the task's stdout and stderr still in memory, decoded; a look
        that takes nothing (what :meth:`read_output` hands out next is unchanged).

        Empty once a finished task's output was all read (memory is released then).

        Raises:
            TaskNotFoundError: unknown id.
        """
        ...

    async def wait(self, task_id: str) -> BashTask:
        """Wait until the task has finished (all its output captured); return its snapshot.

        Raises:
            TaskNotFoundError: unknown id.
        """
        ...

    async def kill(self, task_id: str) -> BashTask:
        """Stop the task's process group (SIGTERM, then SIGKILL after the grace) and
        return the final snapshot once it is gone. A finished task is returned as is.

        Raises:
            TaskNotFoundError: unknown id.
        """
        ...

    def stop_owned_by(self, owner: str) -> builtins.list[BashTask]:
        """Begin stopping every running task whose owner is exactly ``owner`` (SIGTERM now,
        SIGKILL after the grace) and return their snapshots at once; ``wait`` or
        :meth:`kill_owned_by` awaits their end."""
        ...

    async def kill_owned_by(self, owner: str) -> builtins.list[BashTask]:
        """Kill every running task whose owner is exactly ``owner``, concurrently.

        Returns their final snapshots once all are gone. Tasks of other owners
        (and unowned tasks) are untouched.
        """
        ...

    def owner_of(self, task_id: str) -> str | None:
        """The owner token stored for the task; ``None`` when unowned or unknown.

        The empty string is a real owner and is returned as ``""``.
        """
        ...

    async def on_task_done(self, listener: TaskDoneListener) -> Callable[[], Awaitable[None]]:
        """Call ``listener`` for each background task that finishes.

        The registration is an effect of the caller's fiber: it ends when that
        fiber unloads, or when the returned function is awaited. Listeners
        are contained: one that raises is logged and the others still run.
        Register before reading :meth:`pending_completions`, so nothing falls
        in between.

        Raises:
            FiberInactiveError: the caller's fiber is unloading or gone.
        """
        ...

    def pending_completions(self) -> builtins.list[TaskDone]:
        """Finished tasks not yet acknowledged, in the order they finished."""
        ...

    def acknowledge(self, task_id: str) -> bool:
        """Mark the task's completion as delivered; True if it was pending."""
        ...


SHELL = ServiceKey[ShellExecutor]("shell")
"""``ctx.shell``: the shell executor (a :class:`ShellExecutor`)."""
