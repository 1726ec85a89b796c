"""The ``hooks`` plugin: the user's shell commands run on an agent's events.

Mount ``tether.front.hooks`` (plugin name ``hooks``); its config is
:class:`HookSettings`, whose ``hooks`` field is shaped like the ``hooks``
block of Claude Code's ``settings.json`` (event name → matchers → commands),
so such a block can be pasted as it is. A hook reads the event as JSON on
its stdin and answers with its exit code and, optionally, JSON on its stdout,
in Claude Code's documented format (see ``docs/hooks.md``):

* ``PreToolUse`` — a ``tool/before-execute`` listener, registered after the
  permission rules' (a deny rule refuses a call before any hook sees it). A
  hook may deny the call (exit code 2 with its stderr as the reason, or
  ``permissionDecision: "deny"``), allow it unasked (``"allow"``: the call is
  marked ``approved``, as an allow rule marks it), have it put to a person
  (``"ask"``), or rewrite its arguments (``updatedInput``, validated again);
* ``PostToolUse`` — a ``tool/after-execute`` listener: what a hook says
  (``decision: "block"`` with a ``reason``, ``additionalContext``, or its
  stderr with exit code 2) is added to the result the model reads;
* ``UserPromptSubmit`` — an ``agent/pre-step`` listener on a turn's first
  step: a hook may block the prompt (the turn ends ``blocked``) or add
  context (its stdout, or ``additionalContext``) ahead of it.

A hook is an owned process (:class:`~tether.shell.process.ShellProcess`):
``bash -c COMMAND`` in its own process group, confined to the sandbox policy
of the agent's commands when the ``sandbox`` service is there, killed with
its group at its timeout (``timeout`` per command, else the setting, in
seconds) or when the call or turn is cancelled. A hook that fails, times out
or prints JSON that cannot be read is logged in one line and ignored: the
call goes on as if it were not there (fail open, as in Claude Code). Hooks
of one event run one after another, in the order configured; the first
deny ends the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple

import msgspec
from msgspec import Meta
from msgspec.structs import replace

from tether.agent.types import Agent, UserMessage
from tether.content import TextBlock
from tether.front.asking import ask_whatever_the_mode
from tether.frozen import thaw
from tether.loop.hooks import PRE_STEP
from tether.runtime.errors import Veto
from tether.runtime.schema import FieldError, Schema
from tether.runtime.signal import CancelSignal
from tether.shell.environment import child_environment
from tether.shell.output import OutputStream
from tether.shell.process import ShellProcess
from tether.shell.sandbox import SANDBOX
from tether.tools.definition import ToolResult
from tether.tools.execute import AFTER_EXECUTE, BEFORE_EXECUTE, ToolInvocation

if TYPE_CHECKING:
    from tether.runtime import Context

__all__ = ["EVENTS", "HookCommand", "HookMatcher", "HookRun", "HookSettings", "Hooks"]

log = logging.getLogger(__name__)

name = "hooks"
optional = ("sandbox",)

EVENTS = frozenset({"PreToolUse", "PostToolUse", "UserPromptSubmit"})
"""The events tether runs hooks on (Claude Code's names)."""

TOOL_NAMES: Mapping[str, str] = {
    "bash": "Bash",
    "read": "Read",
    "write": "Write",
    "edit": "Edit",
    "glob": "Glob",
    "grep": "Grep",
    "todo": "TodoWrite",
    "task": "Task",
    "web_fetch": "WebFetch",
    "web_search": "WebSearch",
}
"""tether's tools under the names Claude Code gives its own: what a hook is told, and
what a matcher may name (a tool's own name matches too)."""

_OUTPUT_LIMIT = 1 << 20
"""Bytes of a hook's stdout and stderr kept (the rest is dropped)."""
_GRACE = 2.0
"""Seconds between SIGTERM and SIGKILL when a hook's group is stopped."""


class HookCommand(Schema, frozen=True):
    """One hook: a command run with ``bash -c``."""

    command: str
    type: Literal["command"] = "command"
    timeout: (
        Annotated[float, Meta(gt=0, description="seconds; the setting's when absent")] | None
    ) = None


class HookMatcher(Schema, frozen=True):
    """The hooks of one matcher: a regular expression on the tool's name (``""`` or
    ``"*"``: every tool; ignored for events without a tool)."""

    hooks: tuple[HookCommand, ...]
    matcher: str = ""

    def __post_init__(self) -> None:
        if self.matcher not in ("", "*"):
            try:
                re.compile(self.matcher)
            except re.error as exc:
                raise FieldError(("matcher",), f"not a regular expression: {exc}") from None

    def matches(self, tool: str | None) -> bool:
        """Whether this matcher covers ``tool`` (tether's name; ``None``: no tool)."""
        if tool is None or self.matcher in ("", "*"):
            return True
        names = (tool, TOOL_NAMES.get(tool, tool))
        return any(re.fullmatch(self.matcher, n) for n in names)


class HookSettings(Schema, frozen=True):
    """The ``hooks`` settings (``tether.yml``; see ``docs/hooks.md``)."""

    hooks: dict[str, tuple[HookMatcher, ...]] = msgspec.field(default_factory=dict)
    """Event name → its matchers, as in Claude Code's ``settings.json``."""
    timeout: Annotated[float, Meta(gt=0)] = 60.0
    """Seconds a hook may run when its own ``timeout`` is not given."""
    sandboxed: bool = True
    """Whether hooks run under the sandbox policy of the agent's commands (when the
    ``sandbox`` service is there): writable workspace, read-only elsewhere."""

    def __post_init__(self) -> None:
        for event in self.hooks:
            if event not in EVENTS:
                known = ", ".join(sorted(EVENTS))
                raise FieldError(("hooks", event), f"unknown hook event (known: {known})")

    def commands(self, event: str, tool: str | None = None) -> list[HookCommand]:
        """The commands to run for ``event`` on ``tool``, in the order configured."""
        return [
            command
            for matcher in self.hooks.get(event, ())
            if matcher.matches(tool)
            for command in matcher.hooks
        ]


Config = HookSettings


class HookRun(NamedTuple):
    """How one hook ended."""

    exit_code: int | None
    """``None`` when it did not exit by itself (timed out, cancelled, killed)."""
    stdout: str
    stderr: str
    timed_out: bool
    pgid: int


class Verdict(NamedTuple):
    """What one hook said, read from its :class:`HookRun`."""

    block: str | None = None
    """The reason it blocks (denies) what the event is about."""
    decision: str | None = None
    """``allow``, ``deny`` or ``ask`` (``PreToolUse``)."""
    updated_input: Mapping[str, object] | None = None
    context: str | None = None


def _shown_name(tool: str) -> str:
    return TOOL_NAMES.get(tool, tool)


class Hooks:
    """Runs the configured hooks of one runtime (see the module docs)."""

    def __init__(self, ctx: Context, settings: HookSettings) -> None:
        self._ctx = ctx
        self._settings = settings
        self._bash = shutil.which("bash") or "/bin/bash"

    # -- running one hook --------------------------------------------------------

    async def run(
        self,
        hook: HookCommand,
        payload: Mapping[str, object],
        cwd: str,
        agent: Agent,
        signal: CancelSignal | None,
    ) -> HookRun | None:
        """Run ``hook`` with ``payload`` on its stdin, in ``cwd``; ``None`` when it could
        not be started (logged). Its group is killed at its timeout or when ``signal``
        (or the awaiting task) is cancelled."""
        timeout = hook.timeout or self._settings.timeout
        sandbox = self._ctx.get(SANDBOX) if self._settings.sandboxed else None
        policy = sandbox.policy_for(cwd, agent.id) if sandbox is not None else None
        env = child_environment({"CLAUDE_PROJECT_DIR": cwd})
        if policy is not None:
            env = policy.environment(env)
        stdout, stderr = OutputStream(_OUTPUT_LIMIT, None), OutputStream(_OUTPUT_LIMIT, None)
        with tempfile.TemporaryFile() as stdin:
            stdin.write(json.dumps(payload, default=str).encode())
            stdin.flush()
            stdin.seek(0)
            try:
                process = ShellProcess.spawn(
                    self._bash,
                    hook.command,
                    cwd=cwd,
                    env=env,
                    stdout=stdout,
                    stderr=stderr,
                    grace=_GRACE,
                    sandbox=policy,
                    stdin=stdin.fileno(),
                )
            except OSError as exc:
                log.warning("hook %r could not start: %s", hook.command, exc)
                return None
        timed_out: list[bool] = []

        def expire() -> None:
            if process.terminate():
                timed_out.append(True)

        def expire_now() -> None:
            process.terminate()

        timer = asyncio.get_running_loop().call_later(timeout, expire)
        forget = signal.on_cancel(lambda _: expire_now()) if signal is not None else None
        try:
            await process.wait()
        except asyncio.CancelledError:
            process.terminate()
            while not process.ended:
                with contextlib.suppress(asyncio.CancelledError):
                    await process.wait()
            raise
        finally:
            timer.cancel()
            if forget is not None:
                forget()
        ran = HookRun(process.exit_code, stdout.tail(), stderr.tail(), bool(timed_out), process.pid)
        if ran.timed_out:
            log.warning(
                "hook %r timed out after %g s; its process group %d was killed",
                hook.command,
                timeout,
                ran.pgid,
            )
        return ran

    async def verdicts(
        self,
        event: str,
        *,
        payload: Mapping[str, object],
        agent: Agent,
        cwd: str,
        tool: str | None = None,
        signal: CancelSignal | None = None,
    ) -> list[Verdict]:
        """Run every hook of ``event`` (on ``tool``) one after another and read each;
        stop at the first that blocks."""
        said: list[Verdict] = []
        for hook in self._settings.commands(event, tool):
            if signal is not None and signal.cancelled:
                break
            ran = await self.run(hook, payload, cwd, agent, signal)
            if ran is None or ran.timed_out or (signal is not None and signal.cancelled):
                continue
            verdict = read_verdict(event, hook, ran)
            if verdict is not None:
                said.append(verdict)
                if verdict.block is not None:
                    break
        return said

    def payload(self, agent: Agent, event: str, cwd: str, **fields: object) -> dict[str, object]:
        """The common input of every event (Claude Code's fields), then ``fields``."""
        return {
            "session_id": agent.id,
            "cwd": cwd,
            "hook_event_name": event,
            **fields,
        }

    # -- the events --------------------------------------------------------------

    async def before_execute(
        self,
        invocation: ToolInvocation,
        next_: Callable[[ToolInvocation], Awaitable[ToolInvocation]],
    ) -> ToolInvocation:
        """``PreToolUse``: deny, allow, ask about or rewrite the call."""
        exec = invocation.exec
        agent = exec.agent
        if agent is None or not self._settings.commands("PreToolUse", invocation.tool_name):
            return await next_(invocation)
        cwd = exec.cwd or os.getcwd()
        payload = self.payload(
            agent,
            "PreToolUse",
            cwd,
            tool_name=_shown_name(invocation.tool_name),
            tool_input=thaw(invocation.args),
            tool_use_id=exec.call_id,
        )
        said = await self.verdicts(
            "PreToolUse",
            payload=payload,
            agent=agent,
            cwd=cwd,
            tool=invocation.tool_name,
            signal=exec.signal,
        )
        if exec.signal.cancelled:
            return invocation  # the pipeline ends it cancelled
        for verdict in said:
            if verdict.block is not None:
                raise Veto(f"a PreToolUse hook blocked this call: {verdict.block}")
            if verdict.updated_input is not None:
                invocation = replace(invocation, args=verdict.updated_input)
        decisions = {v.decision for v in said}
        if "ask" in decisions:
            approved = await ask_whatever_the_mode(
                self._ctx,
                agent,
                invocation,
                asked_by=("PreToolUse hook",),
                who="a PreToolUse hook",
            )
            if approved is None:
                return invocation  # withdrawn by a cancel: the pipeline ends it cancelled
            return await next_(approved)
        if "allow" in decisions:
            invocation = replace(invocation, exec=replace(exec, approved=True))
        return await next_(invocation)

    async def after_execute(
        self,
        result: ToolResult,
        next_: Callable[[ToolResult], Awaitable[ToolResult]],
        invocation: ToolInvocation,
    ) -> ToolResult:
        """``PostToolUse``: add what the hooks say to the result the model reads."""
        exec = invocation.exec
        agent = exec.agent
        if agent is None or not self._settings.commands("PostToolUse", invocation.tool_name):
            return await next_(result)
        cwd = exec.cwd or os.getcwd()
        payload = self.payload(
            agent,
            "PostToolUse",
            cwd,
            tool_name=_shown_name(invocation.tool_name),
            tool_input=thaw(invocation.args),
            tool_response={"content": result.content, "is_error": result.is_error},
            tool_use_id=exec.call_id,
        )
        said = await self.verdicts(
            "PostToolUse",
            payload=payload,
            agent=agent,
            cwd=cwd,
            tool=invocation.tool_name,
            signal=exec.signal,
        )
        notes = [n for v in said for n in (v.block, v.context) if n]
        if notes:
            added = "\n".join(f"[PostToolUse hook] {note}" for note in notes)
            result = replace(result, content=f"{result.content}\n\n{added}")
        return await next_(result)

    async def before_step(
        self,
        step_input: tuple[UserMessage, ...],
        next_: Callable[[tuple[UserMessage, ...]], Awaitable[tuple[UserMessage, ...]]],
        agent: Agent,
        step: int,
    ) -> tuple[UserMessage, ...]:
        """``UserPromptSubmit``, on a turn's first step: block the prompt or add context."""
        return await next_(await self._prompt_submitted(step_input, agent, step))

    async def _prompt_submitted(
        self, step_input: tuple[UserMessage, ...], agent: Agent, step: int
    ) -> tuple[UserMessage, ...]:
        if step != 1 or not self._settings.commands("UserPromptSubmit"):
            return step_input
        prompt = "\n".join(
            block.text
            for message in step_input
            if message.source == "user"
            for block in message.content
            if isinstance(block, TextBlock)
        )
        if not prompt:
            return step_input
        cwd = agent.session.header.cwd or os.getcwd()
        payload = self.payload(agent, "UserPromptSubmit", cwd, prompt=prompt)
        said = await self.verdicts("UserPromptSubmit", payload=payload, agent=agent, cwd=cwd)
        for verdict in said:
            if verdict.block is not None:
                log.warning("a UserPromptSubmit hook blocked the prompt: %s", verdict.block)
                raise Veto(f"a UserPromptSubmit hook blocked the prompt: {verdict.block}")
        context = [v.context for v in said if v.context]
        if not context:
            return step_input
        added = UserMessage(content=(TextBlock("\n".join(context)),), source="hook")
        return (added, *step_input)


def read_verdict(event: str, hook: HookCommand, ran: HookRun) -> Verdict | None:
    """What ``ran`` says, by Claude Code's rules: exit 2 blocks with stderr as the reason;
    exit 0 may print JSON (or, for ``UserPromptSubmit``, plain text: context); any
    other exit, or JSON that cannot be read, is logged and ignored (``None``)."""
    if ran.exit_code == 2:
        return Verdict(block=ran.stderr.strip() or "(the hook gave no reason)")
    if ran.exit_code != 0:
        lines = ran.stderr.strip().splitlines()
        log.warning(
            "hook %r failed (exit %s): %s",
            hook.command,
            ran.exit_code,
            lines[-1] if lines else "no message",
        )
        return None
    text = ran.stdout.strip()
    if not text:
        return None
    if not text.startswith("{"):
        return Verdict(context=text) if event == "UserPromptSubmit" else None
    try:
        said = json.loads(text)
    except ValueError as exc:
        log.warning("hook %r printed JSON that cannot be read: %s", hook.command, exc)
        return None
    if not isinstance(said, dict):
        return None
    return _from_json(event, said)


def _from_json(event: str, said: dict[str, Any]) -> Verdict:
    """A :class:`Verdict` from a hook's JSON output (fields of the wrong type are ignored)."""
    specific = said.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    reason = said.get("reason") if isinstance(said.get("reason"), str) else None
    block: str | None = None
    decision: str | None = None
    if said.get("decision") == "block":
        block = reason or "(the hook gave no reason)"
    elif said.get("decision") == "approve":
        decision = "allow"
    if said.get("continue") is False:
        stop = said.get("stopReason")
        block = stop if isinstance(stop, str) and stop else block or "(the hook stopped it)"
    permission = specific.get("permissionDecision")
    if event == "PreToolUse" and permission in ("allow", "deny", "ask"):
        decision = permission
        why = specific.get("permissionDecisionReason")
        if permission == "deny":
            block = why if isinstance(why, str) and why else "(the hook gave no reason)"
    updated = specific.get("updatedInput")
    context = specific.get("additionalContext")
    return Verdict(
        block=block,
        decision=decision,
        updated_input=updated if event == "PreToolUse" and isinstance(updated, dict) else None,
        context=context if isinstance(context, str) and context else None,
    )


async def apply(ctx: Context, config: HookSettings) -> None:
    """Run the hooks of ``config`` on every agent's events (see the module docs)."""
    hooks = Hooks(ctx, config)
    if "PreToolUse" in config.hooks:
        ctx.on(BEFORE_EXECUTE, hooks.before_execute)
    if "PostToolUse" in config.hooks:
        ctx.on(AFTER_EXECUTE, hooks.after_execute)
    if "UserPromptSubmit" in config.hooks:
        ctx.on(PRE_STEP, hooks.before_step)
