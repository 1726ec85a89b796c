"""A test plugin: the ``effect`` model and the ``append_line`` tool it calls once a turn.

``append_line`` has a side effect outside the session: it appends its call's
idempotency key as a line to the file ``$TETHER_TEST_EFFECTS`` (flushed to
disk), then lingers ``$TETHER_TEST_EFFECT_PAUSE`` seconds before it answers,
the window in which a kill leaves an effect without a logged result (a stop
of the turn ends it early). The
``effect`` model calls it when the last message is not a tool result, and
answers ``done`` once it is. The ``shell`` model does the same with the
``bash`` tool, running ``$TETHER_TEST_SHELL``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator

from tether.content import ToolMessage
from tether.llm.chunks import Finish, StreamChunk, TextDelta, ToolCallDelta
from tether.llm.request import ModelRequest
from tether.runtime import CancelSignal, Context
from tether.runtime.schema import Schema
from tether.tools import Tool, ToolExec, ToolOutput
from tether.tools.presentation import ToolShown
from tether.tools.registry import TOOLS

name = "effect_tool"
inject = ("llm", "tools")


class OneCallModel:
    """Calls ``tool`` once a turn (its arguments from :meth:`arguments`), then answers
    ``done`` once the last message is the call's result."""

    def __init__(self, name: str, tool: str) -> None:
        self.name = name
        self.tool = tool

    def arguments(self) -> str:
        if self.tool == "bash":
            return json.dumps({"command": os.environ["TETHER_TEST_SHELL"], "timeout_ms": 600_000})
        return "{}"

    async def stream(
        self, request: ModelRequest, signal: CancelSignal
    ) -> AsyncIterator[StreamChunk]:
        if request.messages and isinstance(request.messages[-1], ToolMessage):
            yield TextDelta("done")
            yield Finish("stop")
            return
        yield ToolCallDelta(0, f"call-{uuid.uuid4().hex[:12]}", self.tool, self.arguments())
        yield Finish("tool-calls")


class NoArgs(Schema, frozen=True):
    pass


async def append_line(args: NoArgs, exec: ToolExec) -> ToolOutput:
    fd = os.open(os.environ["TETHER_TEST_EFFECTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{exec.idempotency_key}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    pause = float(os.environ.get("TETHER_TEST_EFFECT_PAUSE", "0"))
    if pause > 0:  # the pause ends early when the turn is stopped, as a real tool's would
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(exec.signal.wait(), pause)
    return ToolOutput("appended")


async def apply(ctx: Context, config: None) -> None:
    await ctx.llm.register("effect", OneCallModel("effect", "append_line"))
    await ctx.llm.register("shell", OneCallModel("shell", "bash"))
    await ctx.service(TOOLS).register(
        Tool(
            name="append_line",
            description="Append a line to the effects file.",
            args=NoArgs,
            execute=append_line,
            shown=ToolShown(kind="edit"),
        )
    )
