"""A composed tether for agent tests: store, JSONL persistence, llm, tools, agents, loop.

The model is a scripted adapter the test drives: each request takes the next
script from a queue; a script yields chunks and may wait on events, so tests
can hold a stream or a tool open at an exact point and cancel there.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tether.agent import registry as agents_plugin
from tether.llm import service as llm_plugin
from tether.llm.chunks import Finish, StreamChunk, TextDelta, ToolCallDelta
from tether.llm.request import ModelRequest
from tether.loop import plugin as loop_plugin
from tether.persist import jsonl as jsonl_plugin
from tether.runtime import CancelSignal, Context, Fiber, Runtime, ServiceKey
from tether.runtime.compose import Composer, PluginRow
from tether.session.store import apply as store_plugin
from tether.tools import Tool, ToolExec, ToolOutput
from tether.tools import registry as tools_plugin

Script = Callable[[ModelRequest, CancelSignal], AsyncIterator[StreamChunk]]


def say(text: str, *, pieces: int = 2) -> Script:
    """A script that streams ``text`` in ``pieces`` chunks and stops."""

    async def script(request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamChunk]:
        size = max(1, len(text) // pieces)
        for start in range(0, len(text), size):
            yield TextDelta(text[start : start + size])
        yield Finish("stop")

    return script


def call(name: str, arguments: str, call_id: str = "c1") -> Script:
    async def script(request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamChunk]:
        yield ToolCallDelta(index=0, id=call_id, name=name, args_delta=arguments)
        yield Finish("tool-calls")

    return script


def calls(*items: tuple[str, str, str]) -> Script:
    async def script(request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamChunk]:
        for index, (call_id, name, arguments) in enumerate(items):
            yield ToolCallDelta(index=index, id=call_id, name=name, args_delta=arguments)
        yield Finish("tool-calls")

    return script


def held(text: str, reached: asyncio.Event, release: asyncio.Event) -> Script:
    """Stream ``text``, then signal ``reached`` and wait for ``release`` mid-stream."""

    async def script(request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamChunk]:
        yield TextDelta(text)
        reached.set()
        await release.wait()
        yield TextDelta(" and more")
        yield Finish("stop")

    return script


def fails(message: str) -> Script:
    async def script(request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamChunk]:
        yield Finish("error", error=message, error_code="server")

    return script


@dataclass
class ScriptedModel:
    """The ``scripted`` provider: answers each request with the next queued script."""

    scripts: asyncio.Queue[Script] = field(default_factory=asyncio.Queue)
    requests: list[ModelRequest] = field(default_factory=list)

    @property
    def name(self) -> str:
        return "scripted"

    def queue(self, *scripts: Script) -> None:
        for script in scripts:
            self.scripts.put_nowait(script)

    async def stream(
        self, request: ModelRequest, signal: CancelSignal
    ) -> AsyncIterator[StreamChunk]:
        self.requests.append(request)
        script = await self.scripts.get()
        async for chunk in script(request, signal):
            yield chunk


class EchoArgs(BaseModel):
    text: str


class WaitArgs(BaseModel):
    key: str


@dataclass
class Gates:
    """Events a ``wait`` tool call reaches and waits on, by key."""

    reached: dict[str, asyncio.Event] = field(default_factory=dict)
    release: dict[str, asyncio.Event] = field(default_factory=dict)
    saw_cancel: list[str] = field(default_factory=list)

    def get(self, key: str) -> tuple[asyncio.Event, asyncio.Event]:
        reached = self.reached.setdefault(key, asyncio.Event())
        release = self.release.setdefault(key, asyncio.Event())
        return reached, release


def test_tools(gates: Gates, executed: list[str]) -> list[Tool[Any]]:
    async def echo(args: EchoArgs, exec: ToolExec) -> ToolOutput:
        executed.append(f"echo:{args.text}")
        return ToolOutput(args.text)

    async def wait(args: WaitArgs, exec: ToolExec) -> ToolOutput:
        executed.append(f"wait:{args.key}")
        reached, release = gates.get(args.key)
        reached.set()
        stop = asyncio.ensure_future(exec.signal.wait())
        try:
            await asyncio.wait(
                {stop, asyncio.ensure_future(release.wait())}, return_when="FIRST_COMPLETED"
            )
        finally:
            stop.cancel()
        if exec.signal.cancelled:
            gates.saw_cancel.append(args.key)
            return ToolOutput(f"{args.key} stopped by cancel", is_error=True)
        return ToolOutput(f"{args.key} done")

    return [
        Tool(
            name="echo",
            description="Echo text back.",
            args=EchoArgs,
            execute=echo,
            concurrency_safe=True,
        ),
        Tool(name="wait", description="Wait on a gate.", args=WaitArgs, execute=wait),
    ]


@dataclass
class World:
    runtime: Runtime
    model: ScriptedModel
    gates: Gates
    executed: list[str]
    data_dir: Path
    loop: Fiber
    composer: Composer

    @property
    def ctx(self) -> Context:
        return self.runtime.ctx

    def get(self, name: str) -> Any:
        """The service ``name`` as the root sees it (tests read services by their names)."""
        return self.runtime.ctx.get(ServiceKey(name))


async def build_world(
    data_dir: Path,
    *,
    loop_config: dict[str, Any] | None = None,
    shell: dict[str, Any] | None = None,
    llm_config: dict[str, Any] | None = None,
) -> World:
    """Compose a world; with ``shell`` (tool_bash's config), the shell executor and
    the bash tools are mounted as composition rows ``shell`` and ``tool_bash``;
    ``llm_config`` configures the ``llm`` service (its model catalog)."""
    runtime = Runtime()
    model = ScriptedModel()
    gates = Gates()
    executed: list[str] = []
    ctx = runtime.ctx
    await ctx.plugin(store_plugin)
    await ctx.plugin(jsonl_plugin, {"data_dir": str(data_dir), "batch_window_ms": 1})
    await ctx.plugin(llm_plugin, llm_config)
    await ctx.plugin(tools_plugin)
    await ctx.plugin(agents_plugin)

    async def fixtures(fctx: Context, config: None) -> None:
        await fctx.llm.register("scripted", model)
        for tool in test_tools(gates, executed):
            await fctx.tools.register(tool)

    fixtures.inject = ("llm", "tools")  # type: ignore[attr-defined]
    await ctx.plugin(fixtures)
    loop = await ctx.plugin(loop_plugin, {"model": "scripted", **(loop_config or {})})
    composer = Composer(ctx)
    if shell is not None:
        report = await composer.apply(
            [
                PluginRow(id="shell", plugin="tether.shell.local"),
                PluginRow(id="tool_bash", plugin="tether.plugins.tool_bash", config=shell),
            ]
        )
        assert report.ok, report.problems
    return World(runtime, model, gates, executed, data_dir, loop, composer)
