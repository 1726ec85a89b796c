"""Running an answer's tool calls: the model's order, safe calls together, unsafe alone."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.content import ToolCallBlock
from tether.runtime import CancelSignal, Runtime
from tether.tools import Tool, ToolExec, ToolRegistry, ToolResult
from tether.tools import registry as tools_plugin
from tether.tools.registry import TOOLS

from .support import EchoArgs, Hang, call, echo_tool, exec_for, tool_running


class Probe:
    """Tools that record which of them run at the same time.

    Safe tools of one batch wait until every tool of the batch has started, so
    a pipeline that ran them one after another would never finish (and the
    barrier's timeout fails the test); an unsafe tool checks that it is alone
    when it starts and again after giving any wrongly scheduled call the
    chance to start.
    """

    def __init__(self, kinds: list[bool]) -> None:
        self.kinds = kinds
        self.started = [asyncio.Event() for _ in kinds]
        self.active: set[int] = set()
        self.violations: list[str] = []
        self.tools = [
            tool_running(f"t{index}", self._runner(index), safe=safe)
            for index, safe in enumerate(kinds)
        ]

    def batch_of(self, index: int) -> range:
        start = index
        while start > 0 and self.kinds[start - 1] and self.kinds[index]:
            start -= 1
        end = index + 1
        while end < len(self.kinds) and self.kinds[end] and self.kinds[index]:
            end += 1
        return range(start, end)

    def _runner(self, index: int):  # type: ignore[no-untyped-def]
        async def run(args: EchoArgs, exec: ToolExec) -> str:
            batch = self.batch_of(index)
            self.active.add(index)
            self.started[index].set()
            try:
                if not self.active <= set(batch):
                    self.violations.append(f"t{index} started beside {sorted(self.active)}")
                async with asyncio.timeout(2):
                    for other in batch:
                        await self.started[other].wait()
                for _ in range(3):
                    await asyncio.sleep(0)  # a yield, so a misplaced call would show up
                if not self.active <= set(batch):
                    self.violations.append(f"t{index} ran beside {sorted(self.active)}")
            finally:
                self.active.discard(index)
            return args.text

        return run


def calls_for(count: int) -> list[ToolCallBlock]:
    return [call(f"t{index}", f"c{index}", text=f"out{index}") for index in range(count)]


def by_call(call: ToolCallBlock) -> ToolExec:
    return exec_for(call.id)


async def test_results_keep_the_model_order_while_safe_tools_overlap(
    registry: ToolRegistry,
) -> None:
    started = [asyncio.Event() for _ in range(3)]
    finished = [asyncio.Event() for _ in range(3)]
    completion: list[int] = []

    def reader(index: int) -> Tool[EchoArgs]:
        async def run(args: EchoArgs, exec: ToolExec) -> str:
            started[index].set()
            async with asyncio.timeout(2):
                # Every read has started: they overlap. Each then waits for the
                # later ones, so they finish in reverse order.
                await asyncio.gather(*(event.wait() for event in started))
                await asyncio.gather(*(event.wait() for event in finished[index + 1 :]))
            completion.append(index)
            finished[index].set()
            return args.text

        return tool_running(f"t{index}", run, safe=True)

    for index in range(3):
        await registry.register(reader(index))

    results = await registry.execute_all(calls_for(3), by_call)

    assert completion == [2, 1, 0]
    assert results == [ToolResult(f"c{i}", f"t{i}", f"out{i}", False) for i in range(3)]


@pytest.mark.parametrize(
    "kinds",
    [
        [True, True, False, True, True],
        [False, False, False],
        [True, False, True],
        [False, True, True, True, False],
    ],
    ids=lambda kinds: "".join("s" if safe else "U" for safe in kinds),
)
async def test_unsafe_calls_never_overlap_with_anything(
    registry: ToolRegistry, kinds: list[bool]
) -> None:
    probe = Probe(kinds)
    for tool in probe.tools:
        await registry.register(tool)

    results = await registry.execute_all(calls_for(len(kinds)), by_call)

    assert probe.violations == []
    assert [r.content for r in results] == [f"out{i}" for i in range(len(kinds))]


@settings(max_examples=40, deadline=None)
@given(kinds=st.lists(st.booleans(), min_size=1, max_size=7))
async def test_any_mix_of_calls_is_answered_in_order_with_unsafe_calls_alone(
    kinds: list[bool],
) -> None:
    async with Runtime() as runtime:
        await runtime.ctx.plugin(tools_plugin)
        registry = runtime.ctx.get(TOOLS)
        probe = Probe(kinds)
        for tool in probe.tools:
            await registry.register(tool)

        results = await registry.execute_all(calls_for(len(kinds)), by_call)

    assert probe.violations == []
    assert [(r.call_id, r.content) for r in results] == [
        (f"c{i}", f"out{i}") for i in range(len(kinds))
    ]


async def test_exec_for_is_asked_once_per_call_in_the_model_order(
    registry: ToolRegistry,
) -> None:
    await registry.register(echo_tool("echo", safe=True))
    asked: list[str] = []

    def exec_of(block: ToolCallBlock) -> ToolExec:
        asked.append(block.id)
        return exec_for(block.id)

    calls = [call("echo", f"c{i}", text=str(i)) for i in range(4)]
    await registry.execute_all(calls, exec_of)
    assert asked == ["c0", "c1", "c2", "c3"]


async def test_calls_that_cannot_run_are_answered_in_their_place(
    registry: ToolRegistry,
) -> None:
    await registry.register(echo_tool("echo", safe=True))
    calls = [
        call("echo", "c0", text="a"),
        call("nope", "c1"),
        call("echo", "c2"),
        call("echo", "c3", text="d"),
    ]
    results = await registry.execute_all(calls, by_call)
    assert [(r.call_id, r.is_error) for r in results] == [
        ("c0", False),
        ("c1", True),
        ("c2", True),
        ("c3", False),
    ]
    assert results[1].content.startswith("unknown tool 'nope'; available: echo.")
    assert results[2].content.startswith("invalid arguments for tool 'echo'")


async def test_a_cancel_during_one_call_keeps_later_calls_from_starting(
    registry: ToolRegistry,
) -> None:
    signal = CancelSignal()
    ran: list[str] = []

    async def cancel_turn(args: EchoArgs, exec: ToolExec) -> str:
        ran.append(args.text)
        signal.cancel("user")
        return "done before the cancel was seen"

    await registry.register(tool_running("first", cancel_turn))
    await registry.register(echo_tool("later", safe=True))
    calls = [call("first", "c0", text="first"), call("later", "c1", text="x")]

    results = await registry.execute_all(calls, lambda block: exec_for(block.id, signal=signal))

    assert ran == ["first"]
    assert results == [
        ToolResult("c0", "first", "done before the cancel was seen", False),
        ToolResult("c1", "later", "tool 'later' was cancelled before it started (user)", True),
    ]


async def test_cancelling_execute_all_cancels_and_awaits_the_running_calls(
    registry: ToolRegistry,
) -> None:
    hang = Hang(safe=True)
    await registry.register(hang.tool)
    running = asyncio.create_task(
        registry.execute_all([call("hang", "c0", text=""), call("hang", "c1", text="")], by_call)
    )
    await hang.wait_running("c0", "c1")
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert sorted(hang.cleaned) == ["c0", "c1"]


async def test_an_infrastructure_failure_in_one_call_cancels_and_awaits_the_others(
    registry: ToolRegistry,
) -> None:
    hang = Hang(safe=True)

    class InfrastructureFailure(BaseException):
        """Not an ``Exception``: no tool problem, so it must propagate."""

    async def crash(args: EchoArgs, exec: ToolExec) -> str:
        await hang.wait_running("c0")
        raise InfrastructureFailure

    await registry.register(hang.tool)
    await registry.register(tool_running("crash", crash, safe=True))

    with pytest.raises(InfrastructureFailure):
        await registry.execute_all(
            [call("hang", "c0", text=""), call("crash", "c1", text="")], by_call
        )
    assert hang.cleaned == ["c0"]


async def test_a_stray_cancelled_error_from_a_tool_is_its_error_result(
    registry: ToolRegistry,
) -> None:
    async def stray(args: EchoArgs, exec: ToolExec) -> str:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        future.cancel()
        return future.result()  # raises CancelledError; nobody cancelled the tool

    await registry.register(tool_running("stray", stray, safe=True))

    async def fine(args: EchoArgs, exec: ToolExec) -> str:
        return "ok"

    await registry.register(tool_running("fine", fine, safe=True))
    results = await registry.execute_all(
        [call("stray", "c0", text=""), call("fine", "c1", text="")], by_call
    )
    assert [(r.call_id, r.is_error) for r in results] == [("c0", True), ("c1", False)]
    assert "raised CancelledError without being cancelled" in results[0].content


async def test_an_empty_answer_runs_nothing(registry: ToolRegistry) -> None:
    assert await registry.execute_all([], by_call) == []


async def test_no_call_of_a_batch_starts_before_on_start_has_returned() -> None:
    """The loop makes a batch's started records durable in ``on_start``: a tool that
    started before it returned could leave an effect the log says never ran."""
    order: list[str] = []

    async def run(args: EchoArgs, exec: ToolExec) -> str:
        order.append(f"run {exec.call_id}")
        return args.text

    async def on_start(batch: object) -> None:
        order.append("on_start")
        await asyncio.sleep(0.01)
        order.append("on_start done")

    async with Runtime() as runtime:
        await runtime.ctx.plugin(tools_plugin)
        registry = runtime.ctx.get(TOOLS)
        assert registry is not None
        await registry.register(Tool("slow", "Echo.", EchoArgs, run))
        results = await registry.execute_all(
            [call("slow", "c1", text="a"), call("slow", "c2", text="b")],
            lambda block: exec_for(block.id),
            on_start=on_start,
        )
    assert [r.content for r in results] == ["a", "b"]
    assert order == ["on_start", "on_start done", "run c1", "on_start", "on_start done", "run c2"]
