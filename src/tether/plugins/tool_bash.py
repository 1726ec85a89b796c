"""The bash tools (``bash``, ``bash_output``, ``bash_kill``): the shell executor's Consumer.

Ownership (see ``docs/background-tasks.md``): ``bash`` stamps the calling
agent's id — its session id — as the owner of what it starts (``None`` when no
agent calls). The executor stores that token on the task; this plugin holds no
table of its own. ``bash_output`` and ``bash_kill`` refuse a task whose owner
is set and differs from the caller's token (an empty string is a real owner;
an unowned task is open to all), with the very answer they give for an id
that does not exist: ``no background task bash-N in this session``. Because
the token lives in the executor, a reload of this plugin leaves every task
owned as before.

Completion notices: when a background task finishes, its live owner (found by
scanning ``ctx.get(AGENTS)``) gets a one-line notice — injected into its next
request, or, if it is idle and ``wake_idle_owner`` is on, delivered as a
follow-up so the model reacts (at most ``max_consecutive_wakes`` in a row
without input from elsewhere). The executor keeps a completion until it is
acknowledged, so one that lands while this plugin reloads is delivered when it
is back.

When an agent is disposed, the tasks it owns are killed: this plugin adds that
step to each agent's scope, which unwinds as the last step of its teardown.

A cancelled turn closes with a stop receipt (``tool/stopped``, see
:mod:`tether.plugins.stop_receipt`): every command the cancel stopped, with
its process group, the signals sent, its exit status and its time to exit.

While a foreground command of an agent runs, ``bash`` reports its progress
(``tool/progress``, :mod:`tether.tools.progress`: the time it has run and
the last lines of its output), a few times a second at most and never
stored, for front ends to show live.

A foreground command of an agent whose frontend runs commands in its
client's terminals (:mod:`tether.plugins.terminal`) runs there instead, so
the person sees it live; the cancel kills that terminal, and the receipt
lists it as ``kind: "terminal"``. Background tasks always run locally.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Annotated, Any

from msgspec import Meta

from tether.agent import Agent, AgentDisposedError, AgentStatus, Target, UserMessage
from tether.agent.events import (
    AGENT_CREATED,
    AGENT_DISPOSED,
    AGENT_STOPPING,
    CANCEL_REQUESTED,
    INBOX_INSERTED,
)
from tether.agent.registry import AGENTS
from tether.loop.hooks import TURN_ABORTING
from tether.plugins.stop_receipt import StopReceipts
from tether.plugins.terminal import CLIENT_TERMINAL, TerminalResult, Terminals
from tether.runtime.schema import Schema
from tether.shell import (
    BashTask,
    ShellError,
    ShellExecRequest,
    ShellExecSpec,
    ShellExecutor,
    ShellResult,
    StopReport,
    TaskDone,
    TaskStatus,
)
from tether.shell.definition import SHELL
from tether.shell.sandbox import (
    SANDBOX,
    SandboxPolicy,
    appeared_note,
    denial_note,
    refused_note,
)
from tether.tools import Tool, ToolExec, ToolOutput, ToolShown
from tether.tools.progress import TOOL_PROGRESS, ProgressReporter, ToolProgress
from tether.tools.registry import TOOLS

if TYPE_CHECKING:
    from tether.runtime import Context

log = logging.getLogger(__name__)

name = "tool_bash"
inject = ("tools", "shell")
optional = ("sandbox",)

NOTICE_SOURCE = "notice"

NO_TASK_HINT = (
    "a task id is what bash answered when it started a command with run_in_background: true "
    "(for example bash-1)"
)
"""What a refusal of an unknown task id adds: where ids come from. The same for every id,
so that it tells nothing about other sessions' tasks."""


class Config(Schema, frozen=True):
    """Configuration of the bash tools: how completions reach an idle owner."""

    wake_idle_owner: bool = True
    """Deliver a completion to an idle owner as a follow-up, so the model reacts."""
    max_consecutive_wakes: Annotated[int, Meta(ge=0)] = 3
    """How many notice-only turns in a row may be started before notices are only injected."""


class BashArgs(Schema, frozen=True):
    """Run a shell command with bash."""

    command: Annotated[str, Meta(description="the command line, run with bash -c")]
    description: Annotated[str, Meta(description="what it does, in a few words")] | None = None
    timeout_ms: Annotated[int, Meta(gt=0, description="foreground time limit")] | None = None
    workdir: (
        Annotated[str, Meta(description="working directory; relative to the session's cwd")] | None
    ) = None
    run_in_background: Annotated[
        bool, Meta(description="start it as a background task and return at once")
    ] = False


class TaskArgs(Schema, frozen=True):
    """Name a background task."""

    task_id: Annotated[str, Meta(description="the id of a background task, e.g. bash-1")]


def owner_token(exec: ToolExec) -> str | None:
    """The caller's token: its agent's id (= session id), ``None`` without an agent."""
    return exec.agent.id if exec.agent is not None else None


def may_touch(shell: ShellExecutor, task_id: str, token: str | None) -> bool:
    """The owner fence: whether a caller whose token is ``token`` may read or kill
    background task ``task_id`` — it exists, and it is unowned or the caller's own."""
    if shell.get(task_id) is None:
        return False
    owner = shell.owner_of(task_id)
    return owner is None or owner == token


def resolve_workdir(session_cwd: str | None, workdir: str) -> str:
    """An absolute ``workdir`` wins; a relative one resolves against the session's cwd."""
    base = session_cwd or os.getcwd()
    return os.path.normpath(os.path.join(base, os.path.expanduser(workdir)))


def render_result(result: ShellResult, timeout_ms: int, refused: tuple[str, ...] = ()) -> str:
    """A foreground result as the model reads it: stdout, ``[stderr]``, then markers;
    ``refused`` names the hosts the sandbox's proxy refused to it (see
    :func:`~tether.shell.sandbox.refused_note`)."""
    parts = []
    if result.stdout:
        parts.append(result.stdout.rstrip("\n"))
    if result.stderr:
        parts.append("[stderr]\n" + result.stderr.rstrip("\n"))
    if not parts:
        parts.append("(no output)")
    for stream, spill in (("stdout", result.stdout_spill), ("stderr", result.stderr_spill)):
        if spill is not None:
            parts.append(f"[{stream} truncated; the whole stream is in {spill}]")
    parts.extend(_endings(result, timeout_ms))
    note = denial_note(result.sandbox, f"{result.stdout}\n{result.stderr}")
    if note is not None:
        log.info("a sandboxed command was denied an access: %s", note)
        parts.append(note)
    proxy = refused_note(result.sandbox, refused)
    if proxy is not None:
        log.info("a sandboxed command was denied an access: %s", proxy)
        parts.append(proxy)
    appeared = appeared_note(result.appeared)
    if appeared is not None:
        parts.append(appeared)
    return "\n".join(parts)


def render_terminal(result: TerminalResult, timeout_ms: int) -> str:
    """A command run in a client's terminal as the model reads it: its output, then markers."""
    parts = [result.output.rstrip("\n") if result.output else "(no output)"]
    if result.truncated:
        parts.append("[output truncated: the terminal kept only its end]")
    parts.extend(_endings(result, timeout_ms))
    return "\n".join(parts)


def _endings(result: ShellResult | TerminalResult, timeout_ms: int) -> list[str]:
    """The markers saying how a foreground command ended."""
    parts = []
    if result.timed_out:
        parts.append(f"[timed out after {timeout_ms} ms]")
        parts.append(
            "[to let it run longer, call bash again with a larger timeout_ms, or with "
            "run_in_background: true and read its output with bash_output]"
        )
    elif result.aborted:
        parts.append("[cancelled]")
    if result.signal is not None:
        parts.append(f"[killed by signal: {result.signal}]")
    elif result.exit_code is not None:
        parts.append(f"[exit code: {result.exit_code}]")
    return parts


def describe(task: BashTask) -> str:
    """``status: …`` with the exit code or signal when there is one."""
    detail = f"status: {task.status}"
    if task.exit_code is not None:
        detail += f", exit code {task.exit_code}"
    if task.signal is not None:
        detail += f", signal {task.signal}"
    return detail


class BashTools:
    """The three tools over one executor view, and the notice delivery."""

    def __init__(self, ctx: Context, shell: ShellExecutor, config: Config) -> None:
        self._ctx = ctx
        self._shell = shell
        self._config = config
        self._wakes: dict[str, int] = {}
        self.receipts = StopReceipts(shell)

    # -- tools -----------------------------------------------------------------

    async def bash(self, args: BashArgs, exec: ToolExec) -> ToolOutput:
        cwd = exec.cwd if args.workdir is None else resolve_workdir(exec.cwd, args.workdir)
        try:
            spec = self._shell.resolve(
                ShellExecRequest(
                    command=args.command,
                    cwd=cwd,
                    timeout_ms=args.timeout_ms,
                    owner=owner_token(exec),
                    sandbox=self._policy(exec),
                )
            )
            if args.run_in_background:
                task = await self._shell.start(spec)
                return ToolOutput(f"started background task {task.id}")
            terminals = await self._terminals(exec)
            if terminals is not None and exec.agent is not None:
                return await self._in_terminal(terminals, exec.agent, spec, exec)
            result = await self._run(spec, exec)
        except ShellError as exc:
            reason = str(exc)
            if args.workdir is not None and cwd is not None and repr(cwd) in reason:
                reason += (
                    "; give workdir as a directory that exists (relative to the session's "
                    "working directory), or leave it out"
                )
            return ToolOutput(reason, is_error=True)
        if result.aborted and result.stop is not None and exec.agent is not None:
            self.receipts.call_stopped(exec.agent, exec.call_id, result.stop)
        failed = result.timed_out or result.aborted or result.exit_code != 0
        refused = self._refused(exec)
        return ToolOutput(render_result(result, spec.timeout_ms, refused), is_error=failed)

    def _refused(self, exec: ToolExec) -> tuple[str, ...]:
        """The hosts the sandbox's proxy refused to the caller's commands since last asked."""
        sandbox = self._ctx.get(SANDBOX)
        return sandbox.refused(owner_token(exec)) if sandbox is not None else ()

    async def _run(self, spec: ShellExecSpec, exec: ToolExec) -> ShellResult:
        """Run ``spec`` in the foreground; an agent's call reports its progress
        (``tool/progress``: elapsed time and the last lines of output) while it runs."""
        agent = exec.agent
        if agent is None:
            return await self._shell.run(spec, exec.signal)

        def send(progress: ToolProgress) -> None:
            self._ctx.emit(TOOL_PROGRESS, agent, progress)

        def stopped(report: StopReport) -> None:
            # The turn's task was cancelled from outside: no result will carry
            # the stop, the turn's receipt still does.
            self.receipts.call_stopped(agent, exec.call_id, report)

        reporter = ProgressReporter(exec.call_id, "bash", send)
        reporter.start()
        try:
            return await self._shell.run(spec, exec.signal, reporter.feed, on_stop=stopped)
        finally:
            reporter.close()

    def _policy(self, exec: ToolExec) -> SandboxPolicy | None:
        """The sandbox policy of the caller's commands: its session's cwd is the workspace."""
        sandbox = self._ctx.get(SANDBOX)
        if sandbox is None:
            return None
        options = exec.agent.session.settings.options if exec.agent is not None else None
        return sandbox.policy_for(exec.cwd or os.getcwd(), owner_token(exec), options)

    async def _terminals(self, exec: ToolExec) -> Terminals | None:
        """The client's terminals, when a frontend runs the caller's commands there."""
        if exec.agent is None:
            return None
        return await self._ctx.serial(CLIENT_TERMINAL, exec.agent)

    async def _in_terminal(
        self, terminals: Terminals, agent: Agent, spec: ShellExecSpec, exec: ToolExec
    ) -> ToolOutput:
        """Run ``spec`` in a terminal of the client; a stop goes on the turn's receipt."""
        try:
            result = await terminals.run(
                spec.command,
                cwd=spec.cwd,
                timeout_ms=spec.timeout_ms,
                call_id=exec.call_id,
                signal=exec.signal,
            )
        except Exception as exc:
            log.warning("bash in the client's terminal failed", exc_info=True)
            return ToolOutput(f"the client's terminal failed: {exc}", is_error=True)
        if result.aborted and result.stop is not None:
            self.receipts.call_stopped(agent, exec.call_id, result.stop, kind="terminal")
        failed = result.timed_out or result.aborted or result.exit_code != 0
        return ToolOutput(render_terminal(result, spec.timeout_ms), is_error=failed)

    def _refusal(self, task_id: str, exec: ToolExec) -> str | None:
        """Why the caller may not touch ``task_id``, or ``None`` if it may.

        A task of another session is refused with exactly the answer for an
        id that does not exist, so ids cannot be probed for other sessions'
        tasks.
        """
        if not may_touch(self._shell, task_id, owner_token(exec)):
            return f"no background task {task_id} in this session; {NO_TASK_HINT}"
        return None

    async def bash_output(self, args: TaskArgs, exec: ToolExec) -> ToolOutput:
        refusal = self._refusal(args.task_id, exec)
        if refusal is not None:
            return ToolOutput(refusal, is_error=True)
        read = self._shell.read_output(args.task_id)
        parts = [f"[{read.task.id} {describe(read.task)}]"]
        if read.stdout:
            parts.append(read.stdout.rstrip("\n"))
        if read.stderr:
            parts.append("[stderr]\n" + read.stderr.rstrip("\n"))
        if not read.stdout and not read.stderr:
            parts.append("(no new output)")
        for stream, truncated, spill in (
            ("stdout", read.stdout_truncated, read.stdout_spill),
            ("stderr", read.stderr_truncated, read.stderr_spill),
        ):
            if truncated:
                parts.append(f"[{stream} truncated; the whole stream is in {spill}]")
        notes = (
            denial_note(read.task.sandbox, f"{read.stdout}\n{read.stderr}"),
            refused_note(read.task.sandbox, self._refused(exec)),
            appeared_note(read.task.appeared),
        )
        parts.extend(note for note in notes if note is not None)
        return ToolOutput("\n".join(parts))

    async def bash_kill(self, args: TaskArgs, exec: ToolExec) -> ToolOutput:
        refusal = self._refusal(args.task_id, exec)
        if refusal is not None:
            return ToolOutput(refusal, is_error=True)
        task = await self._shell.kill(args.task_id)
        if task.status is TaskStatus.KILLED:
            return ToolOutput(f"killed {task.id}")
        return ToolOutput(f"{task.id} had already finished ({describe(task)})")

    # -- completion notices ----------------------------------------------------

    def deliver(self, done: TaskDone) -> None:
        """Tell the task's live owner that it finished, then acknowledge it."""
        try:
            agent = self._live_owner(self._shell.owner_of(done.id))
            if agent is not None:
                self._notify(agent, done)
        except AgentDisposedError:
            pass  # the owner is being torn down; its teardown kills its tasks
        finally:
            self._shell.acknowledge(done.id)

    def _notify(self, agent: Agent, done: TaskDone) -> None:
        appeared = appeared_note(done.task.appeared)
        notice = UserMessage.text(
            f"background task {done.id} finished [{describe(done.task)}]. "
            "Read its output with bash_output." + (f"\n{appeared}" if appeared is not None else ""),
            source=NOTICE_SOURCE,
        )
        wakes = self._wakes.get(agent.id, 0)
        idle = agent.status is AgentStatus.IDLE
        if self._config.wake_idle_owner and idle and wakes < self._config.max_consecutive_wakes:
            self._wakes[agent.id] = wakes + 1
            agent.followup(notice)
        else:
            agent.inject(notice)

    def _live_owner(self, owner: str | None) -> Agent | None:
        if owner is None:
            return None
        # A read through ctx.get: the listener runs on the executor's behalf,
        # and the agents registry may come and go independently of this plugin.
        agents = self._ctx.get(AGENTS)
        if agents is None:
            return None
        return next((a for a in agents.list() if a.id == owner), None)

    def on_inserted(self, agent: Agent, messages: tuple[UserMessage, ...], queue: Target) -> None:
        """Input from anywhere but a notice resets the agent's wake budget."""
        if any(m.source != NOTICE_SOURCE for m in messages):
            self._wakes.pop(agent.id, None)

    # -- agents ---------------------------------------------------------------

    def kill_on_dispose(self, agent: Agent) -> None:
        """Make the agent's teardown kill the background tasks it owns.

        The step is an effect of the agent's scope, not of this plugin, so it
        survives a reload of this plugin (a reload adds a second, harmless one).
        """
        shell = self._shell
        agent_id = agent.id

        async def kill_owned() -> None:
            killed = await shell.kill_owned_by(agent_id)
            if killed:
                log.info("killed %d task(s) of agent %s", len(killed), agent_id)

        agent.ctx.defer(kill_owned, label="kill owned bash tasks")


BASH_SHOWN = ToolShown(kind="execute", title="{command}", command="command", shell_tasks=True)
"""``bash``: titled by its command, shown as a command line."""
BASH_OUTPUT_SHOWN = ToolShown(kind="read", title="{tool} {task_id}", shell_tasks=True)
"""``bash_output``: titled by the task it reads."""
BASH_KILL_SHOWN = ToolShown(kind="execute", title="{tool} {task_id}", shell_tasks=True)
"""``bash_kill``: titled by the task it kills."""


async def apply(ctx: Context, config: Config) -> None:
    shell = ctx.service(SHELL)
    tools = ctx.service(TOOLS)
    bash = BashTools(ctx, shell, config)
    definitions: list[Tool[Any]] = [
        Tool(
            name="bash",
            description="Run a shell command with bash -c in the session's working directory. "
            "Foreground by default (stdout, then [stderr], then an exit marker); with "
            "run_in_background it returns a task id at once.",
            args=BashArgs,
            execute=bash.bash,
            shown=BASH_SHOWN,
        ),
        Tool(
            name="bash_output",
            description="Read the output a background task wrote since the last read.",
            args=TaskArgs,
            execute=bash.bash_output,
            shown=BASH_OUTPUT_SHOWN,
            concurrency_safe=True,
        ),
        Tool(
            name="bash_kill",
            description="Kill a background task and its child processes.",
            args=TaskArgs,
            execute=bash.bash_kill,
            shown=BASH_KILL_SHOWN,
        ),
    ]
    for definition in definitions:
        await tools.register(definition)
    ctx.on(INBOX_INSERTED, bash.on_inserted)

    ctx.on(AGENT_CREATED, bash.kill_on_dispose)
    ctx.on(CANCEL_REQUESTED, bash.receipts.on_cancel_requested)
    ctx.on(AGENT_STOPPING, bash.receipts.on_stopping)
    ctx.on(TURN_ABORTING, bash.receipts.on_turn_aborting)
    ctx.on(AGENT_DISPOSED, bash.receipts.forget)
    agents = ctx.get(AGENTS)
    for agent in agents.list() if agents is not None else []:
        bash.kill_on_dispose(agent)
    # Register before reading what is pending, so no completion falls between.
    await shell.on_task_done(bash.deliver)
    for done in shell.pending_completions():
        bash.deliver(done)
