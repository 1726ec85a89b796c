"""The ``hooks`` plugin: the user's shell commands run on an agent's events.

Mount ``tether.front.hooks`` (plugin name ``hooks``); its config is
:class:`HookSettings`, whose ``hooks`` field is shaped like the ``hooks``
block of Claude Code's ``settings.json`` (event name → matchers → commands),
so such a block can be pasted as it is. A hook reads the event as JSON on
its stdin and answers with its exit code and, optionally, JSON on its stdout,
in Claude Code's documented format (:mod:`tether.front.hook_output`; see
``docs/hooks.md``). The tool and prompt events are here:

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

The session's events (``Stop``, ``SubagentStop``, ``SessionStart``,
``SessionEnd``, ``PreCompact``, ``Notification``) are in
:mod:`tether.front.hook_session`.

A hook is an owned process (:mod:`tether.front.hook_runner`): sandboxed,
timed out, killed on a cancel and then listed in the stop receipt, recorded
against orphans. A hook that fails, times out or prints JSON that cannot be
read is logged in one line and ignored: the event goes on as if it were not
there (fail open, as in Claude Code). Hooks of one event run one after
another, in the order configured; the first that blocks ends the event.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import msgspec
from msgspec import Meta
from msgspec.structs import replace

from tether.agent.events import AGENT_DISPOSED, AGENT_SETUP, AGENT_STOPPING, CANCEL_REQUESTED
from tether.agent.types import Agent, UserMessage
from tether.content import TextBlock
from tether.front.asking import PERMISSION_REQUEST, ask_whatever_the_mode
from tether.front.hook_output import HOOK_ASKS, TOOL_NAMES, Verdict, read_verdict, shown_name
from tether.front.hook_runner import HookRunner
from tether.front.hook_session import SessionHooks
from tether.front.session_end import SESSION_ENDING
from tether.frozen import thaw
from tether.location import data_dir
from tether.loop.hooks import PRE_COMPACT, PRE_STEP, TURN_ABORTING, TURN_COMPLETING
from tether.runtime.errors import Veto
from tether.runtime.schema import FieldError, Schema, SchemaError, decode
from tether.runtime.signal import CancelSignal
from tether.shell.guard import OrphanGuard
from tether.shell.orphans import state_path
from tether.tools.definition import ToolResult
from tether.tools.execute import AFTER_EXECUTE, BEFORE_EXECUTE, ToolInvocation

if TYPE_CHECKING:
    from tether.runtime import Context

__all__ = [
    "EVENTS",
    "HookCommand",
    "HookMatcher",
    "HookSettings",
    "Hooks",
]

log = logging.getLogger(__name__)

name = "hooks"
optional = ("sandbox",)

EVENTS = frozenset(
    {
        "PreToolUse",
        "PostToolUse",
        "UserPromptSubmit",
        "Stop",
        "SubagentStop",
        "SessionStart",
        "SessionEnd",
        "PreCompact",
        "Notification",
    }
)
"""The events tether runs hooks on (Claude Code's names)."""

BLOCKING = frozenset({"PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop", "SubagentStop"})
"""The events whose first block ends the event (the later hooks of it do not run)."""


class HookCommand(Schema, frozen=True):
    """One hook: a command run with ``bash -c``."""

    command: str
    type: Literal["command"] = "command"
    timeout: (
        Annotated[float, Meta(gt=0, description="seconds; the setting's when absent")] | None
    ) = None


class HookMatcher(Schema, frozen=True):
    """The hooks of one matcher: a regular expression on the tool's name (``""`` or
    ``"*"``: every tool), or on what the event names instead (``SessionStart``'s
    source, ``PreCompact``'s trigger, ``Notification``'s type); ignored for the
    other events."""

    hooks: tuple[HookCommand, ...]
    matcher: str = ""

    def __post_init__(self) -> None:
        if self.matcher not in ("", "*"):
            try:
                re.compile(self.matcher)
            except re.error as exc:
                raise FieldError(("matcher",), f"not a regular expression: {exc}") from None

    def matches(self, tool: str | None) -> bool:
        """Whether this matcher covers ``tool`` (tether's name, or what the event names;
        ``None``: nothing)."""
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
    stop_continuations: Annotated[int, Meta(ge=0)] = 3
    """How many times ``Stop`` (or ``SubagentStop``) hooks may keep one turn going."""
    end_timeout: Annotated[float, Meta(gt=0)] = 5.0
    """Seconds ``SessionEnd`` hooks may delay a stop, whatever their own timeout."""
    claude_settings: tuple[str, ...] = ()
    """Claude Code settings files (``.claude/settings.json``; relative to the working
    directory tether starts in) whose ``hooks`` block runs after this one's; a file
    that is not there is skipped."""

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


class Hooks:
    """Runs the configured hooks of one runtime: the tool and prompt events (see the
    module docs), and :meth:`verdicts` for every event."""

    def __init__(self, ctx: Context, settings: HookSettings, runner: HookRunner) -> None:
        self._ctx = ctx
        self.settings = settings
        self.runner = runner

    def configured(self, event: str, subject: str | None = None) -> bool:
        """Whether any hook runs for ``event`` on ``subject`` (see :meth:`HookMatcher.matches`)."""
        return bool(self.settings.commands(event, subject))

    async def verdicts(
        self,
        event: str,
        *,
        payload: Mapping[str, object],
        agent: Agent,
        cwd: str,
        subject: str | None = None,
        signal: CancelSignal | None = None,
        label: str | None = None,
        limit: float = math.inf,
    ) -> list[Verdict]:
        """Run every hook of ``event`` (on ``subject``) one after another and read each;
        stop at the first that blocks a :data:`BLOCKING` event, and once ``signal`` or
        ``agent`` is cancelled. ``label`` names them in a stop receipt (else ``event``);
        none runs longer than ``limit`` seconds, whatever its timeout."""
        said: list[Verdict] = []
        cancels = self.runner.cancels(agent)

        def cancelled() -> bool:
            return self.runner.cancels(agent) != cancels or (
                signal is not None and signal.cancelled
            )

        for hook in self.settings.commands(event, subject):
            if cancelled():
                break
            ran = await self.runner.run(
                hook.command,
                payload,
                cwd=cwd,
                agent=agent,
                limit=min(hook.timeout or self.settings.timeout, limit),
                label=label or event,
                signal=signal,
            )
            if ran is None or ran.timed_out or ran.cancelled or cancelled():
                continue
            verdict = read_verdict(event, hook.command, ran.exit_code, ran.stdout, ran.stderr)
            if verdict is not None:
                said.append(verdict)
                if verdict.block is not None and event in BLOCKING:
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

    # -- the tool and prompt events ----------------------------------------------------

    async def before_execute(
        self,
        invocation: ToolInvocation,
        next_: Callable[[ToolInvocation], Awaitable[ToolInvocation]],
    ) -> ToolInvocation:
        """``PreToolUse``: deny, allow, ask about or rewrite the call."""
        exec = invocation.exec
        agent = exec.agent
        if agent is None or not self.configured("PreToolUse", invocation.tool_name):
            return await next_(invocation)
        cwd = exec.cwd or os.getcwd()
        payload = self.payload(
            agent,
            "PreToolUse",
            cwd,
            tool_name=shown_name(invocation.tool_name),
            tool_input=thaw(invocation.args),
            tool_use_id=exec.call_id,
        )
        said = await self.verdicts(
            "PreToolUse",
            payload=payload,
            agent=agent,
            cwd=cwd,
            subject=invocation.tool_name,
            signal=exec.signal,
            label=f"PreToolUse:{exec.call_id}",
        )
        if exec.signal.cancelled:
            return invocation  # the pipeline ends it cancelled
        for verdict in said:
            if verdict.block is not None:
                raise Veto(f"a PreToolUse hook blocked this call: {verdict.block}")
            if verdict.updated_input is not None:
                invocation = replace(invocation, args=verdict.updated_input)
        asking = [v for v in said if v.decision == "ask"]
        if asking:
            return await self._ask(agent, invocation, asking[0], next_)
        if any(v.decision == "allow" for v in said):
            invocation = replace(invocation, exec=replace(exec, approved=True))
        return await next_(invocation)

    async def _ask(
        self,
        agent: Agent,
        invocation: ToolInvocation,
        verdict: Verdict,
        next_: Callable[[ToolInvocation], Awaitable[ToolInvocation]],
    ) -> ToolInvocation:
        """A hook's ``ask``: the call is put to a person whatever the mode, naming the hook
        and its reason."""
        why = f"{HOOK_ASKS}{verdict.command!r}" + (f": {verdict.reason}" if verdict.reason else "")
        approved = await ask_whatever_the_mode(
            self._ctx,
            agent,
            invocation,
            asked_by=(why,),
            who="a PreToolUse hook",
            why=why,
        )
        if approved is None:
            return invocation  # withdrawn by a cancel: the pipeline ends it cancelled
        return await next_(approved)

    async def after_execute(
        self,
        result: ToolResult,
        next_: Callable[[ToolResult], Awaitable[ToolResult]],
        invocation: ToolInvocation,
    ) -> ToolResult:
        """``PostToolUse``: add what the hooks say to the result the model reads."""
        exec = invocation.exec
        agent = exec.agent
        if agent is None or not self.configured("PostToolUse", invocation.tool_name):
            return await next_(result)
        cwd = exec.cwd or os.getcwd()
        payload = self.payload(
            agent,
            "PostToolUse",
            cwd,
            tool_name=shown_name(invocation.tool_name),
            tool_input=thaw(invocation.args),
            tool_response={"content": result.content, "is_error": result.is_error},
            tool_use_id=exec.call_id,
        )
        said = await self.verdicts(
            "PostToolUse",
            payload=payload,
            agent=agent,
            cwd=cwd,
            subject=invocation.tool_name,
            signal=exec.signal,
            label=f"PostToolUse:{exec.call_id}",
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
        if step != 1 or not self.configured("UserPromptSubmit"):
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


def with_claude_settings(settings: HookSettings) -> HookSettings:
    """``settings`` with the ``hooks`` blocks of its :attr:`~HookSettings.claude_settings`
    files added after its own, event by event.

    Raises:
        FieldError: a file cannot be read, is not JSON, or its ``hooks`` block is not
            valid (the message names the file and what is wrong).
    """
    hooks = {event: list(matchers) for event, matchers in settings.hooks.items()}
    for name in settings.claude_settings:
        found = _claude_hooks(Path(name).expanduser(), f"Claude Code settings {name}")
        for event, matchers in found.items():
            hooks.setdefault(event, []).extend(matchers)
    return replace(settings, hooks={event: tuple(m) for event, m in hooks.items()})


def _claude_hooks(path: Path, named: str) -> Mapping[str, tuple[HookMatcher, ...]]:
    """The ``hooks`` block of the Claude Code settings file at ``path`` (none when
    there is no file there).

    Raises:
        FieldError: the file cannot be read, is not JSON, or its block is not valid.
    """
    where = ("claude_settings",)
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        log.debug("no Claude Code settings at %s: skipped", path)
        return {}
    except OSError as exc:
        raise FieldError(where, f"{named} cannot be read: {exc.strerror or exc}") from None
    try:
        raw = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise FieldError(where, f"{named} is not JSON: {exc}") from None
    block = raw.get("hooks", {}) if isinstance(raw, dict) else None
    if not isinstance(block, dict):
        raise FieldError(where, f"{named}: hooks must map event names to lists of matchers")
    for event, matchers in block.items():
        if not isinstance(matchers, list):
            raise FieldError(where, f"{named}: hooks.{event} must be a list of matchers")
    try:
        return decode(HookSettings, {"hooks": block}, root="").hooks
    except SchemaError as exc:
        raise FieldError(where, f"{named}: {exc}") from None


async def apply(ctx: Context, config: HookSettings) -> None:
    """Run the hooks of ``config`` on every agent's events (see the module docs).

    Raises:
        FieldError: a file of ``claude_settings`` cannot be used.
    """
    config = with_claude_settings(config)
    if not config.hooks:
        return  # nothing to run: no listener costs a dispatch
    guard = OrphanGuard(state_path(data_dir() / "run"))
    runner = HookRunner(ctx, guard, sandboxed=config.sandboxed)
    await ctx.effect(lambda: runner.shutdown, label="stop running hooks")
    hooks = Hooks(ctx, config, runner)
    session = SessionHooks(ctx, hooks)
    configured = config.hooks
    ctx.on(CANCEL_REQUESTED, runner.cancel)
    ctx.on(TURN_ABORTING, session.on_turn_aborting)
    ctx.on(AGENT_DISPOSED, session.forget)
    if "PreToolUse" in configured:
        ctx.on(BEFORE_EXECUTE, hooks.before_execute)
    if "PostToolUse" in configured:
        ctx.on(AFTER_EXECUTE, hooks.after_execute)
    if "UserPromptSubmit" in configured:
        ctx.on(PRE_STEP, hooks.before_step)
    if "SessionStart" in configured or "SessionEnd" in configured:
        # Both follow a /clear: SessionEnd ``clear``, then SessionStart ``clear``.
        ctx.on(AGENT_SETUP, session.on_setup)
        ctx.on(PRE_STEP, session.before_step)
    if "SessionEnd" in configured:
        ctx.on(SESSION_ENDING, session.on_ending)
    if "Stop" in configured or "SubagentStop" in configured:
        ctx.on(TURN_COMPLETING, session.turn_completing)
    ctx.on(AGENT_STOPPING, session.on_stopping)
    if "PreCompact" in configured:
        ctx.on(PRE_COMPACT, session.pre_compact)
    if "Notification" in configured:
        ctx.on(PERMISSION_REQUEST, session.notification)
