"""The execution pipeline: one tool call in, exactly one result out.

:func:`run_call` never raises for a problem with the call, the tool or a
listener: each becomes an error result the model reads, so a bad call can
never crash a turn. Only infrastructure failures propagate
(a real cancellation of the awaiting task above all; a tool that raises a
``CancelledError`` of its own while nobody cancelled it has failed, and its
call gets an error result). The steps, in order:

1. A call whose signal is already cancelled does not start.
2. The tool is looked up among the tools the caller may use; an unknown name
   is answered with the names that are available (and the one it most likely
   misspells).
3. The arguments are validated against the tool's model; the tool never sees
   arguments that fail validation, and the refusal lists the parameters a
   call takes (:mod:`tether.tools.hints`).
4. ``tool/before-execute`` may rewrite or veto the invocation. Rewritten
   arguments are validated again, and the signal is checked again (a listener
   may have waited on a person).
5. The tool runs with the signal; cancelling it while it runs is up to the
   tool (tools are cooperative) and its result is whatever it returns.
6. ``tool/after-execute`` may rewrite the result.

Events declared here (both ``waterfall``: middleware, see
:meth:`~tether.runtime.events.EventBus.waterfall`):

* ``tool/before-execute`` — value: a :class:`ToolInvocation`; listeners are
  ``(invocation, next) -> ToolInvocation``. Dispatched once per call of a
  known tool with valid arguments, right before it runs. A listener may pass
  on a replaced invocation (``msgspec.structs.replace`` with other ``args`` or
  ``exec``), or raise :class:`~tether.runtime.Veto` to deny the call: the
  tool does not run and the result is ``denied: <reason>``. Redirecting the
  call to another tool (a changed ``tool_name``) is refused, because the
  tool's concurrency class was fixed when the batch was planned.
* ``tool/after-execute`` — value: the :class:`ToolResult` of a tool that ran;
  listeners are ``(result, next, invocation) -> ToolResult`` and may rewrite
  it (truncate, redact) but not re-address it (the ``call_id`` stays). A
  :class:`~tether.runtime.Veto` withholds the result from the model. Not
  dispatched for calls that did not run.

A listener that raises anything but ``Veto``, or returns something other than
its value type, is a bug in a plugin: it is logged with its traceback and the
call gets an error result. After execution that result withholds the tool's
output, since the failed listener may have been the one redacting it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import msgspec

from tether.frozen import thaw
from tether.runtime.errors import Veto
from tether.runtime.keys import Waterfall
from tether.runtime.signal import Cancelled, CancelSignal, cancelling_current_task
from tether.tools.arguments import ArgumentsError, arguments_data, parse
from tether.tools.definition import Tool, ToolExec, ToolOutput, ToolResult
from tether.tools.hints import nearest, parameters
from tether.tools.preview import ToolPreview

if TYPE_CHECKING:
    from tether.content import ToolCallBlock
    from tether.runtime.context import Context

__all__ = [
    "AFTER_EXECUTE",
    "BEFORE_EXECUTE",
    "CalledWith",
    "ScheduledCall",
    "ToolInvocation",
    "run_call",
    "run_calls",
]

log = logging.getLogger(__name__)


class CalledWith(msgspec.Struct, frozen=True):
    """The arguments a call came with (as logged with ``tool/call``), and the validated
    arguments they became."""

    arguments: Mapping[str, object]
    validated: Mapping[str, object]


class _Previewed:
    """The preview of an invocation, kept for the arguments and cwd it was made for: one
    memo shared by an invocation and the copies listeners make of it."""

    __slots__ = ("args", "cwd", "preview")

    def __init__(self) -> None:
        self.args: Mapping[str, object] | None = None
        self.cwd: str | None = None
        self.preview: ToolPreview | None = None

    def holds(self, args: Mapping[str, object], cwd: str | None) -> bool:
        """Whether the preview kept is the one of ``args`` (the very mapping) in ``cwd``."""
        return self.args is args and self.cwd == cwd


class ToolInvocation(msgspec.Struct, frozen=True):
    """A validated call about to run: the value of ``tool/before-execute``.

    ``args`` are the validated arguments as JSON data (defaults filled in,
    keys as the schema names them), read-only. A listener that replaces them
    has its replacement validated again before the tool runs.

    :attr:`shown_args` are the arguments a person is shown (a permission
    question in any front end): the call's own, as its ``tool/call`` event
    logged them, so a question shows exactly the arguments the transcript
    shows for that call.

    :meth:`preview` describes the call as its tool would run it (``None``
    when the tool gives no preview); it is computed once for the call's
    arguments and cwd, however many listeners (the permission rules, a front
    end) and copies (``replace`` with an approved ``exec``) ask for it.

    Invocations compare by ``tool_name``, ``args`` and ``exec``, and hash by
    ``tool_name`` and ``exec``; ``tool``, ``called_with`` and ``previewed``
    are left out of both, and of the repr.
    """

    tool_name: str
    args: Mapping[str, object]
    exec: ToolExec
    tool: Tool[Any] | None = None
    called_with: CalledWith | None = None
    previewed: _Previewed = msgspec.field(default_factory=_Previewed)

    @property
    def shown_args(self) -> Mapping[str, object]:
        """The arguments to show a person: the call's own (as logged with ``tool/call``)
        — unless a ``tool/before-execute`` listener replaced ``args``; then those,
        since they are what will run."""
        called = self.called_with
        if called is not None and called.validated is self.args:
            return called.arguments
        return self.args

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return (self.tool_name, self.args, self.exec) == (other.tool_name, other.args, other.exec)

    def __hash__(self) -> int:
        # The arguments are an unhashable mapping.
        return hash((self.tool_name, self.exec))

    def __repr__(self) -> str:
        return (
            f"ToolInvocation(tool_name={self.tool_name!r}, args={self.args!r}, exec={self.exec!r})"
        )

    async def preview(self) -> ToolPreview | None:
        """The tool's preview of this invocation's arguments, or ``None`` if it has none.

        Raises:
            ArgumentsError: the arguments (as a listener rewrote them) are invalid.
            Exception: whatever the tool's preview raises.
        """
        memo = self.previewed
        if memo.holds(self.args, self.exec.cwd):
            return memo.preview
        tool = self.tool
        preview = (
            None
            if tool is None or tool.preview is None
            else await tool.preview(parse(tool.args, thaw(self.args)), self.exec)
        )
        memo.args, memo.cwd, memo.preview = self.args, self.exec.cwd, preview
        return preview


class ScheduledCall(msgspec.Struct, frozen=True, eq=False):
    """One call to run, with the tools its caller may use, by name."""

    call: ToolCallBlock
    exec: ToolExec
    tools: Mapping[str, Tool[Any]]

    @property
    def tool(self) -> Tool[Any] | None:
        """The tool the call names, if the caller may use it."""
        return self.tools.get(self.call.name)

    @property
    def concurrency_safe(self) -> bool:
        tool = self.tool
        return tool is not None and tool.concurrency_safe

    @property
    def rerunnable(self) -> bool:
        """Whether the call may run again safely (see :attr:`Tool.rerunnable`); a call of
        a tool the caller may not use never runs, so it is."""
        tool = self.tool
        return tool is None or tool.rerunnable


BEFORE_EXECUTE = Waterfall[ToolInvocation]("tool/before-execute")
"""Waterfall over a :class:`ToolInvocation`, before a tool runs (see the module docs)."""

AFTER_EXECUTE = Waterfall[ToolResult, ToolInvocation]("tool/after-execute")
"""Waterfall over the :class:`ToolResult` of a tool that ran (see the module docs)."""


class _Refusal(Exception):
    """Ends a call before its tool runs; the message is the error result."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


async def run_call(ctx: Context, scheduled: ScheduledCall) -> ToolResult:
    """Run one call through the pipeline and return its result.

    ``ctx`` is the context the events are dispatched through.

    Raises:
        asyncio.CancelledError: the awaiting task was cancelled (the tool, if
            it was running, was cancelled with it).
    """
    call = scheduled.call
    try:
        tool, args, invocation = await _prepare(ctx, scheduled)
    except _Refusal as refusal:
        return ToolResult(call.id, call.name, refusal.message, is_error=True)
    log.debug("tool %s (call %s) starts", tool.name, call.id)
    output = await _invoke(tool, args, invocation.exec)
    log.debug("tool %s (call %s) ended%s", tool.name, call.id, " failed" * output.is_error)
    result = ToolResult(call.id, tool.name, output.content, output.is_error, output.images)
    return await _after_execute(ctx, result, invocation)


async def run_calls(
    ctx: Context,
    scheduled: Sequence[ScheduledCall],
    on_start: Callable[[Sequence[ScheduledCall]], Awaitable[None]] | None = None,
) -> list[ToolResult]:
    """Run calls in batches and return their results in the order of ``scheduled``.

    Consecutive concurrency-safe calls form one batch and run concurrently;
    any other call is a batch of its own, so it never overlaps with another
    call. Each batch finishes before the next starts; ``on_start`` is awaited
    with each batch's calls before any of them starts (the loop makes their
    started records durable there). No task started here outlives the call,
    whether it returns or raises.

    Raises:
        asyncio.CancelledError: as :func:`run_call`; the calls still running
            are cancelled and awaited first.
    """
    results: list[ToolResult] = []
    for batch in _batches(scheduled):
        if on_start is not None:
            await on_start(batch)
        if len(batch) == 1:
            results.append(await run_call(ctx, batch[0]))
        else:
            results.extend(await _run_together(ctx, batch))
    return results


def _batches(scheduled: Sequence[ScheduledCall]) -> Iterator[list[ScheduledCall]]:
    batch: list[ScheduledCall] = []
    for item in scheduled:
        if item.concurrency_safe:
            batch.append(item)
            continue
        if batch:
            yield batch
            batch = []
        yield [item]
    if batch:
        yield batch


async def _run_together(ctx: Context, batch: Sequence[ScheduledCall]) -> list[ToolResult]:
    """Run ``batch`` concurrently in a task group: no call outlives it.

    When one call fails (only an infrastructure failure can: see
    :func:`run_call`), the group cancels and awaits the others, then the
    failure propagates — unwrapped when it is the only one.
    """
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(run_call(ctx, item), name=f"tool:{item.call.name}:{item.call.id}")
                for item in batch
            ]
    except BaseExceptionGroup as failed:
        if len(failed.exceptions) == 1:
            raise failed.exceptions[0] from None
        raise
    return [task.result() for task in tasks]


async def _prepare(
    ctx: Context, scheduled: ScheduledCall
) -> tuple[Tool[Any], object, ToolInvocation]:
    """Steps 1 to 4: everything before the tool runs.

    Raises:
        _Refusal: the call must not run.
    """
    call, exec = scheduled.call, scheduled.exec
    _check_not_cancelled(call.name, exec.signal)
    tool = scheduled.tool
    if tool is None:
        raise _Refusal(_unknown_tool(call.name, scheduled.tools))
    args = _validate(tool, thaw(call.arguments))
    validated = _as_json(tool, args)
    called_with = CalledWith(call.arguments, validated)
    invocation = ToolInvocation(tool.name, validated, exec, tool, called_with)
    approved = await _before_execute(ctx, invocation)
    if approved.args is not invocation.args:
        args = _validate(
            tool, thaw(approved.args), f" (as rewritten by a {BEFORE_EXECUTE.name} listener)"
        )
    _check_not_cancelled(call.name, approved.exec.signal)
    return tool, args, approved


def _check_not_cancelled(name: str, signal: CancelSignal) -> None:
    if signal.cancelled:
        reason = f" ({signal.reason})" if signal.reason is not None else ""
        raise _Refusal(f"tool {name!r} was cancelled before it started{reason}")


def _unknown_tool(name: str, tools: Mapping[str, Tool[Any]]) -> str:
    if not tools:
        return f"unknown tool {name!r}; no tools are available: answer without calling one"
    guess = nearest(name, tools)
    meant = f" (did you mean {guess!r}?)" if guess is not None else ""
    return (
        f"unknown tool {name!r}{meant}; available: {', '.join(sorted(tools))}. "
        "Call one of these by its exact name."
    )


def _validate(tool: Tool[Any], arguments: object, origin: str = "") -> object:
    try:
        return parse(tool.args, arguments)
    except ArgumentsError as exc:
        raise _Refusal(
            f"invalid arguments for tool {tool.name!r}{origin}: {exc}. Call {tool.name} again "
            f"with its parameters: {parameters(tool.schema)}."
        ) from None


def _as_json(tool: Tool[Any], args: object) -> Mapping[str, object]:
    try:
        data = arguments_data(args)
    except Exception as exc:
        log.exception("tool %r: its validated arguments do not serialize to JSON", tool.name)
        raise _Refusal(
            f"tool {tool.name!r} was not run: its arguments do not serialize: {_describe(exc)}"
        ) from None
    return MappingProxyType(data)


async def _before_execute(ctx: Context, invocation: ToolInvocation) -> ToolInvocation:
    name = invocation.tool_name
    try:
        outcome = await ctx.waterfall(BEFORE_EXECUTE, invocation)
        # A listener may break its contract and return anything: checked below.
        approved: object = outcome
    except Veto as veto:
        raise _Refusal(f"denied: {veto.reason}") from None
    except (Exception, asyncio.CancelledError) as exc:
        if isinstance(exc, asyncio.CancelledError) and cancelling_current_task():
            raise
        log.exception("a %s listener failed on tool %r", BEFORE_EXECUTE.name, name)
        raise _Refusal(
            f"tool {name!r} was not run: a {BEFORE_EXECUTE.name} listener failed: {_describe(exc)}"
        ) from None
    if not isinstance(approved, ToolInvocation):
        log.error(
            "a %s listener returned %r instead of a ToolInvocation", BEFORE_EXECUTE.name, approved
        )
        raise _Refusal(
            f"tool {name!r} was not run: a {BEFORE_EXECUTE.name} listener returned "
            f"{type(approved).__name__} instead of a ToolInvocation"
        )
    if approved.tool_name != name:
        log.error(
            "a %s listener redirected tool %r to %r", BEFORE_EXECUTE.name, name, approved.tool_name
        )
        raise _Refusal(
            f"tool {name!r} was not run: a {BEFORE_EXECUTE.name} listener redirected it "
            f"to {approved.tool_name!r}, which is not supported"
        )
    return approved


async def _invoke(tool: Tool[Any], args: object, exec: ToolExec) -> ToolOutput:
    """Step 5: run the tool and turn whatever it did into an output."""
    try:
        output: object = await tool.execute(args, exec)
    except Cancelled as cancelled:
        return ToolOutput(f"tool {tool.name!r} was cancelled ({cancelled.reason})", is_error=True)
    except asyncio.CancelledError:
        if cancelling_current_task():
            raise
        log.warning(
            "tool %r raised CancelledError without being cancelled", tool.name, exc_info=True
        )
        return ToolOutput(
            f"tool {tool.name!r} failed: it raised CancelledError without being cancelled",
            is_error=True,
        )
    except Exception as exc:
        log.warning("tool %r raised", tool.name, exc_info=True)
        return ToolOutput(f"tool {tool.name!r} failed: {_describe(exc)}", is_error=True)
    if isinstance(output, ToolOutput):
        return output
    if isinstance(output, str):
        return ToolOutput(output)
    log.error("tool %r returned %r; a tool must return ToolOutput or str", tool.name, output)
    return ToolOutput(
        f"tool {tool.name!r} failed: it returned {type(output).__name__}, not ToolOutput or str",
        is_error=True,
    )


async def _after_execute(
    ctx: Context, result: ToolResult, invocation: ToolInvocation
) -> ToolResult:
    try:
        outcome = await ctx.waterfall(AFTER_EXECUTE, result, invocation)
        final: object = outcome
    except Veto as veto:
        return _withheld(result, f"its result was withheld: {veto.reason}")
    except (Exception, asyncio.CancelledError) as exc:
        if isinstance(exc, asyncio.CancelledError) and cancelling_current_task():
            raise
        log.exception("a %s listener failed on tool %r", AFTER_EXECUTE.name, result.name)
        return _withheld(
            result,
            f"a {AFTER_EXECUTE.name} listener failed ({_describe(exc)}); its result is withheld",
        )
    if not isinstance(final, ToolResult) or final.call_id != result.call_id:
        log.error(
            "a %s listener returned %r for call %r; it must return a ToolResult for that call",
            AFTER_EXECUTE,
            final,
            result.call_id,
        )
        return _withheld(
            result,
            f"a {AFTER_EXECUTE.name} listener returned an invalid result; its result is withheld",
        )
    return final


def _withheld(result: ToolResult, why: str) -> ToolResult:
    return ToolResult(result.call_id, result.name, f"tool {result.name!r} ran, but {why}", True)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
