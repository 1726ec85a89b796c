"""Tools, calls and plugins shared by the tool tests."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

from pydantic import BaseModel

from tether.agent.types import Agent
from tether.content import ToolCallBlock
from tether.runtime import CancelSignal, Context, Fiber, Runtime
from tether.tools import Tool, ToolExec, ToolOutput


class EchoArgs(BaseModel):
    text: str


def echo_tool(
    name: str = "echo", *, safe: bool = False, prefix: str = "", description: str = "Echo."
) -> Tool[EchoArgs]:
    async def run(args: EchoArgs, exec: ToolExec) -> str:
        return prefix + args.text

    return Tool(name, description, EchoArgs, run, concurrency_safe=safe)


def call(name: str, call_id: str = "c1", **arguments: object) -> ToolCallBlock:
    return ToolCallBlock(call_id, name, arguments)


def fake_agent(agent_id: str, cwd: str = "/work") -> Agent:
    """Just enough of an agent for tools: an id and a session header with a cwd."""
    session = SimpleNamespace(header=SimpleNamespace(cwd=cwd))
    return cast(Agent, SimpleNamespace(id=agent_id, session=session))


def exec_for(
    call_id: str = "c1", *, signal: CancelSignal | None = None, agent: Agent | None = None
) -> ToolExec:
    return ToolExec.for_call(call_id, signal or CancelSignal(), agent)


@dataclass
class Registrar:
    """A plugin that registers ``tools`` (in ``scope``) when it loads."""

    tools: tuple[Tool[Any], ...]
    scope: str | None = None
    name: str = "registrar"
    inject: tuple[str, ...] = ("tools",)

    async def apply(self, ctx: Context, config: None) -> None:
        for tool in self.tools:
            await ctx.tools.register(tool, scope=self.scope)


async def mount(
    runtime: Runtime, *tools: Tool[Any], scope: str | None = None, name: str = "registrar"
) -> Fiber:
    """Mount a :class:`Registrar` for ``tools`` and wait until it is active."""
    return await runtime.ctx.plugin(Registrar(tools, scope, name))


RunTool = Callable[[EchoArgs, ToolExec], Awaitable[ToolOutput | str]]


def tool_running(
    name: str, run: RunTool, *, safe: bool = False, args: type[EchoArgs] = EchoArgs
) -> Tool[EchoArgs]:
    return Tool(name, f"The {name} tool.", args, run, concurrency_safe=safe)


class Hang:
    """A tool that runs until its task is cancelled, then cleans up (awaiting)."""

    def __init__(self, name: str = "hang", *, safe: bool = False) -> None:
        self.running: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.cleaned: list[str] = []
        self.tool = tool_running(name, self._run, safe=safe)

    async def wait_running(self, *call_ids: str) -> None:
        async with asyncio.timeout(2):
            for call_id in call_ids:
                await self.running[call_id].wait()

    async def _run(self, args: EchoArgs, exec: ToolExec) -> str:
        self.running[exec.call_id].set()
        try:
            await asyncio.Event().wait()
        finally:
            # Cleanup that itself awaits must still finish before the caller returns.
            await asyncio.sleep(0)
            self.cleaned.append(exec.call_id)
        return "never"
