"""The execution pipeline: every problem with a call is an error result the model reads."""

from __future__ import annotations

import asyncio
from types import MappingProxyType
from typing import Annotated, Any

import msgspec
import pytest
from msgspec import Meta
from pydantic import BaseModel, ConfigDict, Field

from tether.content import ToolCallBlock
from tether.runtime import CancelSignal, Runtime, Veto
from tether.runtime.keys import Next
from tether.runtime.schema import Schema
from tether.tools import (
    AFTER_EXECUTE,
    BEFORE_EXECUTE,
    Tool,
    ToolExec,
    ToolInvocation,
    ToolOutput,
    ToolRegistry,
    ToolResult,
)

from .support import EchoArgs, Hang, call, echo_tool, exec_for, fake_agent, tool_running


class CountArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: int = Field(ge=1)
    unit: str = "items"


class Recorder:
    """A tool that records the arguments it was called with."""

    def __init__(self) -> None:
        self.calls: list[CountArgs] = []
        self.tool = Tool("count", "Count.", CountArgs, self.run)

    async def run(self, args: CountArgs, exec: ToolExec) -> str:
        self.calls.append(args)
        return f"{args.count} {args.unit}"


@pytest.fixture
async def recorder(registry: ToolRegistry) -> Recorder:
    recorder = Recorder()
    await registry.register(recorder.tool)
    return recorder


def error(call_id: str, name: str, content: str) -> ToolResult:
    return ToolResult(call_id, name, content, is_error=True)


async def test_valid_arguments_reach_the_tool_as_its_model(
    registry: ToolRegistry, recorder: Recorder
) -> None:
    result = await registry.execute(call("count", count=3), exec_for())
    assert result == ToolResult("c1", "count", "3 items", is_error=False)
    assert recorder.calls == [CountArgs(count=3)]


@pytest.mark.parametrize(
    ("arguments", "details"),
    [
        ({}, "arguments.count: Field required"),
        ({"count": 0}, "arguments.count: Input should be greater than or equal to 1"),
        (
            {"count": "many", "extra": 1},
            "arguments.count: Input should be a valid integer, unable to parse string as an "
            "integer; arguments.extra: Extra inputs are not permitted",
        ),
    ],
)
async def test_arguments_are_validated_before_execution(
    registry: ToolRegistry, recorder: Recorder, arguments: dict[str, object], details: str
) -> None:
    result = await registry.execute(ToolCallBlock("c1", "count", arguments), exec_for())
    # The refusal ends with the parameters a call takes: what to send instead.
    next_call = "Call count again with its parameters: count (integer, required), unit (string)."
    assert result == error(
        "c1", "count", f"invalid arguments for tool 'count': {details}. {next_call}"
    )
    assert recorder.calls == []


async def test_frozen_arguments_from_a_session_log_are_accepted_as_plain_data(
    registry: ToolRegistry,
) -> None:
    class Args(BaseModel):
        items: list[str]
        options: dict[str, Any]

    seen: list[Args] = []

    async def run(args: Args, exec: ToolExec) -> str:
        seen.append(args)
        return "ok"

    await registry.register(Tool("frozen", "d", Args, run))
    arguments = MappingProxyType(
        {"items": ("a", "b"), "options": MappingProxyType({"nested": ("x",)})}
    )
    result = await registry.execute(ToolCallBlock("c1", "frozen", arguments), exec_for())
    assert not result.is_error
    assert seen[0].items == ["a", "b"]
    assert seen[0].options == {"nested": ["x"]}
    assert type(seen[0].options["nested"]) is list


async def test_an_unknown_tool_is_answered_with_the_available_names(
    registry: ToolRegistry,
) -> None:
    await registry.register(echo_tool("read"))
    await registry.register(echo_tool("bash"))
    result = await registry.execute(call("wirte", "c9"), exec_for("c9"))
    assert result == error(
        "c9",
        "wirte",
        "unknown tool 'wirte'; available: bash, read. Call one of these by its exact name.",
    )


@pytest.mark.parametrize(
    ("called", "meant"),
    [("wirte", "write"), ("Read", "read"), ("functions.bash", "bash"), ("reed", "read")],
)
async def test_an_unknown_tool_names_the_tool_it_most_likely_misspells(
    registry: ToolRegistry, called: str, meant: str
) -> None:
    for name in ("read", "write", "bash"):
        await registry.register(echo_tool(name))
    result = await registry.execute(call(called), exec_for())
    assert result.content.startswith(f"unknown tool {called!r} (did you mean {meant!r}?); ")


async def test_an_unknown_tool_with_no_tools_says_so(registry: ToolRegistry) -> None:
    result = await registry.execute(call("read"), exec_for())
    assert result == error(
        "c1", "read", "unknown tool 'read'; no tools are available: answer without calling one"
    )


async def test_a_tool_outside_the_offered_names_does_not_run(
    registry: ToolRegistry, recorder: Recorder
) -> None:
    await registry.register(echo_tool("echo"))
    result = await registry.execute(call("count", count=1), exec_for(), only=["echo"])
    assert result == error(
        "c1", "count", "unknown tool 'count'; available: echo. Call one of these by its exact name."
    )
    assert recorder.calls == []


async def test_the_agent_of_the_exec_selects_the_scope(registry: ToolRegistry) -> None:
    await registry.register(echo_tool("echo", prefix="global:"))
    await registry.register(echo_tool("echo", prefix="mine:"), scope="agent-a")
    await registry.register(echo_tool("secret"), scope="agent-a")

    mine = exec_for(agent=fake_agent("agent-a"))
    theirs = exec_for(agent=fake_agent("agent-b"))
    assert (await registry.execute(call("echo", text="x"), mine)).content == "mine:x"
    assert (await registry.execute(call("echo", text="x"), theirs)).content == "global:x"
    assert (await registry.execute(call("echo", text="x"), exec_for())).content == "global:x"
    assert (await registry.execute(call("secret", text="x"), theirs)).is_error


async def test_a_raising_tool_becomes_an_error_result(registry: ToolRegistry) -> None:
    async def broken(args: EchoArgs, exec: ToolExec) -> str:
        raise KeyError("missing")

    await registry.register(tool_running("broken", broken))
    result = await registry.execute(call("broken", text="x"), exec_for())
    assert result == error("c1", "broken", "tool 'broken' failed: KeyError: 'missing'")


async def test_a_tool_returning_a_wrong_type_becomes_an_error_result(
    registry: ToolRegistry,
) -> None:
    async def sloppy(args: EchoArgs, exec: ToolExec) -> Any:
        return 42

    await registry.register(tool_running("sloppy", sloppy))
    result = await registry.execute(call("sloppy", text="x"), exec_for())
    assert result == error(
        "c1", "sloppy", "tool 'sloppy' failed: it returned int, not ToolOutput or str"
    )


async def test_a_tool_reports_its_own_errors_through_its_output(registry: ToolRegistry) -> None:
    async def picky(args: EchoArgs, exec: ToolExec) -> ToolOutput:
        return ToolOutput(f"no such file: {args.text}", is_error=True)

    await registry.register(tool_running("picky", picky))
    result = await registry.execute(call("picky", text="a.txt"), exec_for())
    assert result == error("c1", "picky", "no such file: a.txt")


async def test_a_veto_before_execution_denies_with_the_reason(
    runtime: Runtime, registry: ToolRegistry, recorder: Recorder
) -> None:
    seen: list[ToolInvocation] = []

    def deny(invocation: ToolInvocation, next_: Next[ToolInvocation]) -> ToolInvocation:
        seen.append(invocation)
        raise Veto("counting is not allowed here")

    runtime.ctx.on(BEFORE_EXECUTE, deny)
    exec = exec_for()
    result = await registry.execute(call("count", count=2), exec)

    assert result == error("c1", "count", "denied: counting is not allowed here")
    assert recorder.calls == []
    # Listeners see validated arguments as JSON data, defaults filled in.
    assert seen == [ToolInvocation("count", {"count": 2, "unit": "items"}, exec)]


async def test_before_execute_may_rewrite_arguments_which_are_validated_again(
    runtime: Runtime, registry: ToolRegistry, recorder: Recorder
) -> None:
    replacement: dict[str, object] = {"count": 5}

    async def rewrite(invocation: ToolInvocation, next_: Next[ToolInvocation]) -> ToolInvocation:
        return await next_(msgspec.structs.replace(invocation, args=replacement))

    runtime.ctx.on(BEFORE_EXECUTE, rewrite)
    assert (await registry.execute(call("count", count=1), exec_for())).content == "5 items"

    replacement = {"count": -1}
    result = await registry.execute(call("count", count=1), exec_for())
    assert result.is_error and result.content.startswith(
        "invalid arguments for tool 'count' (as rewritten by a tool/before-execute listener): "
        "arguments.count: Input should be greater than or equal to 1."
    )
    assert recorder.calls == [CountArgs(count=5)]


async def test_shown_arguments_are_the_calls_own_until_a_listener_rewrites_them(
    runtime: Runtime, registry: ToolRegistry, recorder: Recorder
) -> None:
    shown: list[dict[str, object]] = []

    async def rewrite(invocation: ToolInvocation, next_: Next[ToolInvocation]) -> ToolInvocation:
        shown.append(dict(invocation.shown_args))
        rewritten = msgspec.structs.replace(invocation, args={"count": 5})
        shown.append(dict(rewritten.shown_args))
        return await next_(rewritten)

    runtime.ctx.on(BEFORE_EXECUTE, rewrite)
    await registry.execute(call("count", count=1), exec_for())
    # As the model called it (no defaulted unit), then what will run instead.
    assert shown == [{"count": 1}, {"count": 5}]


async def test_before_execute_may_not_redirect_a_call(
    runtime: Runtime, registry: ToolRegistry, recorder: Recorder
) -> None:
    await registry.register(echo_tool("echo"))

    def redirect(invocation: ToolInvocation, next_: Next[ToolInvocation]) -> ToolInvocation:
        return msgspec.structs.replace(invocation, tool_name="echo")

    runtime.ctx.on(BEFORE_EXECUTE, redirect)
    result = await registry.execute(call("count", count=1), exec_for())
    assert result.is_error and "redirected it to 'echo', which is not supported" in result.content
    assert recorder.calls == []


async def test_a_failing_before_execute_listener_stops_the_call_with_an_error_result(
    runtime: Runtime, registry: ToolRegistry, recorder: Recorder
) -> None:
    def broken(invocation: ToolInvocation, next_: Next[ToolInvocation]) -> ToolInvocation:
        raise RuntimeError("policy store offline")

    runtime.ctx.on(BEFORE_EXECUTE, broken)
    result = await registry.execute(call("count", count=1), exec_for())
    assert result == error(
        "c1",
        "count",
        "tool 'count' was not run: a tool/before-execute listener failed: "
        "RuntimeError: policy store offline",
    )
    assert recorder.calls == []


async def test_after_execute_can_rewrite_the_result(
    runtime: Runtime, registry: ToolRegistry, recorder: Recorder
) -> None:
    seen: list[ToolInvocation] = []

    async def shout(
        result: ToolResult, next_: Next[ToolResult], invocation: ToolInvocation
    ) -> ToolResult:
        seen.append(invocation)
        final = await next_(result)
        return msgspec.structs.replace(final, content=final.content.upper())

    runtime.ctx.on(AFTER_EXECUTE, shout)
    result = await registry.execute(call("count", count=2, unit="apples"), exec_for())
    assert result == ToolResult("c1", "count", "2 APPLES", is_error=False)
    assert [i.args for i in seen] == [{"count": 2, "unit": "apples"}]


async def test_after_execute_is_not_dispatched_for_calls_that_did_not_run(
    runtime: Runtime, registry: ToolRegistry
) -> None:
    seen: list[ToolResult] = []

    def record(result: ToolResult, next_: Next[ToolResult], invocation: object) -> object:
        seen.append(result)
        return next_(result)

    runtime.ctx.on(AFTER_EXECUTE, record)
    await registry.execute(call("missing"), exec_for())
    assert seen == []


@pytest.mark.parametrize(
    ("listener", "why"),
    [
        ("veto", "its result was withheld: contains a secret"),
        (
            "raise",
            "a tool/after-execute listener failed (RuntimeError: boom); its result is withheld",
        ),
        (
            "readdress",
            "a tool/after-execute listener returned an invalid result; its result is withheld",
        ),
    ],
)
async def test_a_result_is_withheld_when_after_execute_vetoes_or_fails(
    runtime: Runtime, registry: ToolRegistry, recorder: Recorder, listener: str, why: str
) -> None:
    def after(result: ToolResult, next_: Next[ToolResult], invocation: object) -> ToolResult:
        if listener == "veto":
            raise Veto("contains a secret")
        if listener == "raise":
            raise RuntimeError("boom")
        return msgspec.structs.replace(result, call_id="other")

    runtime.ctx.on(AFTER_EXECUTE, after)
    result = await registry.execute(call("count", count=1), exec_for())
    assert result == error("c1", "count", f"tool 'count' ran, but {why}")
    assert len(recorder.calls) == 1


async def test_a_cancelled_signal_skips_execution(
    runtime: Runtime, registry: ToolRegistry, recorder: Recorder
) -> None:
    before: list[ToolInvocation] = []
    runtime.ctx.on(BEFORE_EXECUTE, lambda invocation, next_: before.append(invocation))
    signal = CancelSignal()
    signal.cancel("user")

    result = await registry.execute(call("count", count=1), exec_for(signal=signal))

    assert result == error("c1", "count", "tool 'count' was cancelled before it started (user)")
    assert recorder.calls == [] and before == []


async def test_a_cancel_while_listeners_decide_skips_execution(
    runtime: Runtime, registry: ToolRegistry, recorder: Recorder
) -> None:
    signal = CancelSignal()

    async def ask_a_person(
        invocation: ToolInvocation, next_: Next[ToolInvocation]
    ) -> ToolInvocation:
        signal.cancel("user")  # the person pressed Ctrl-C instead of answering
        return await next_(invocation)

    runtime.ctx.on(BEFORE_EXECUTE, ask_a_person)
    result = await registry.execute(call("count", count=1), exec_for(signal=signal))
    assert result == error("c1", "count", "tool 'count' was cancelled before it started (user)")
    assert recorder.calls == []


async def test_a_running_tool_gets_the_cancel_and_its_result_is_what_it_returns(
    registry: ToolRegistry,
) -> None:
    started = asyncio.Event()

    async def patient(args: EchoArgs, exec: ToolExec) -> str:
        started.set()
        reason = await exec.signal.wait()
        return f"stopped early ({reason}), partial output: {args.text}"

    await registry.register(tool_running("patient", patient))
    signal = CancelSignal()
    running = asyncio.create_task(
        registry.execute(call("patient", text="abc"), exec_for(signal=signal))
    )
    await started.wait()
    signal.cancel("user")
    result = await running
    assert result == ToolResult("c1", "patient", "stopped early (user), partial output: abc", False)


async def test_a_tool_that_raises_cancelled_reports_the_cancel(registry: ToolRegistry) -> None:
    async def strict(args: EchoArgs, exec: ToolExec) -> str:
        exec.signal.cancel("parent")
        exec.signal.raise_if_cancelled()
        return "unreachable"

    await registry.register(tool_running("strict", strict))
    result = await registry.execute(call("strict", text="x"), exec_for())
    assert result == error("c1", "strict", "tool 'strict' was cancelled (parent)")


async def test_asyncio_cancellation_is_not_turned_into_a_result(registry: ToolRegistry) -> None:
    hang = Hang()
    await registry.register(hang.tool)
    running = asyncio.create_task(registry.execute(call("hang", text="x"), exec_for("c1")))
    await hang.wait_running("c1")
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert hang.cleaned == ["c1"]


class SchemaCountArgs(Schema, frozen=True):
    count: Annotated[int, Meta(ge=1, description="how many")]
    unit: str = "items"


async def test_schema_arguments_are_validated_and_reach_listeners_as_json(
    runtime: Runtime, registry: ToolRegistry
) -> None:
    seen: list[SchemaCountArgs] = []
    invocations: list[ToolInvocation] = []

    async def run(args: SchemaCountArgs, exec: ToolExec) -> str:
        seen.append(args)
        return f"{args.count} {args.unit}"

    async def before(invocation: ToolInvocation, next: Next[ToolInvocation]) -> ToolInvocation:
        invocations.append(invocation)
        return await next(invocation)

    runtime.ctx.on(BEFORE_EXECUTE, before)
    await registry.register(Tool("count", "Count.", SchemaCountArgs, run))
    result = await registry.execute(call("count", count=2), exec_for())
    assert result == ToolResult("c1", "count", "2 items", is_error=False)
    assert seen == [SchemaCountArgs(2)]
    assert dict(invocations[0].args) == {"count": 2, "unit": "items"}
    for arguments, details in (
        ({}, "arguments.count: required"),
        ({"count": 0}, "arguments.count: must be at least 1, got 0"),
        ({"count": 1, "colour": 1}, "arguments.colour: unknown field (the fields are: count,"),
    ):
        result = await registry.execute(ToolCallBlock("c2", "count", arguments), exec_for("c2"))
        assert result.is_error
        assert result.content.startswith(f"invalid arguments for tool 'count': {details}")
    assert len(seen) == 1


async def test_a_listener_reads_the_preview_of_the_arguments_as_they_stand_computed_once(
    runtime: Runtime, registry: ToolRegistry
) -> None:
    from tether.tools.preview import Location, ToolPreview

    async def run(args: CountArgs, exec: ToolExec) -> str:
        return f"ran with approved={exec.approved}"

    previews: list[int] = []

    async def preview(args: CountArgs, exec: ToolExec) -> ToolPreview:
        previews.append(args.count)
        return ToolPreview(kind="read", title=f"count {args.count}", locations=(Location("/x"),))

    await registry.register(Tool("previewed", "Previewed.", CountArgs, run, preview=preview))
    await registry.register(echo_tool("plain"))
    seen: list[ToolPreview | None] = []

    async def look(invocation: ToolInvocation, next_: Next[ToolInvocation]) -> ToolInvocation:
        seen.append(await invocation.preview())
        if invocation.tool_name == "previewed":
            rewritten = msgspec.structs.replace(invocation, args={"count": 9})
            seen.append(await rewritten.preview())
            approved = msgspec.structs.replace(
                rewritten, exec=msgspec.structs.replace(rewritten.exec, approved=True)
            )
            seen.append(await approved.preview())
            return await next_(approved)
        return await next_(invocation)

    runtime.ctx.on(BEFORE_EXECUTE, look)
    result = await registry.execute(call("previewed", count=2), exec_for())
    assert result.content == "ran with approved=True"
    await registry.execute(call("plain", text="hi"), exec_for())
    titles = [p.title if p is not None else None for p in seen]
    assert titles == ["count 2", "count 9", "count 9", None]
    assert previews == [2, 9]  # once per arguments: an approved copy shares the preview


def test_a_preview_must_be_callable() -> None:
    with pytest.raises(TypeError, match="preview must be an async function"):
        Tool("bad", "Bad.", CountArgs, Recorder().run, preview="nope")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="approved must be bool"):
        ToolExec(agent=None, call_id="c", signal=CancelSignal(), cwd=None, approved="yes")  # type: ignore[arg-type]


def test_an_invocation_compares_hashes_and_shows_without_its_tool() -> None:
    exec = exec_for("c1")
    args = MappingProxyType({"text": "hi"})
    with_tool = ToolInvocation("echo", args, exec, echo_tool())
    without = ToolInvocation("echo", args, exec)
    assert with_tool == without
    assert hash(with_tool) == hash(without)
    assert with_tool != ToolInvocation("echo", MappingProxyType({"text": "other"}), exec)
    assert with_tool != ToolInvocation("echo", args, exec_for("c2"))
    assert repr(with_tool) == repr(without)
    assert "Tool(" not in repr(with_tool)
