"""A test plugin: the ``effect`` model and the ``append_line`` tool it calls once a turn.

``append_line`` has a side effect outside the session: it appends its call's
idempotency key as a line to the file ``$TETHER_TEST_EFFECTS`` (flushed to
disk), then lingers ``$TETHER_TEST_EFFECT_PAUSE`` seconds before it answers,
the window in which a kill leaves an effect without a logged result. The
``effect`` model calls it when the last message is not a tool result, and
answers ``done`` once it is.
"""

from __future__ import annotations

import asyncio
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


class EffectModel:
    name = "effect"

    async def stream(
        self, request: ModelRequest, signal: CancelSignal
    ) -> AsyncIterator[StreamChunk]:
        if request.messages and isinstance(request.messages[-1], ToolMessage):
            yield TextDelta("done")
            yield Finish("stop")
            return
        call_id = f"call-{uuid.uuid4().hex[:12]}"
        yield ToolCallDelta(0, call_id, "append_line", "{}")
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
    await asyncio.sleep(float(os.environ.get("TETHER_TEST_EFFECT_PAUSE", "0")))
    return ToolOutput("appended")


async def apply(ctx: Context, config: None) -> None:
    await ctx.llm.register("effect", EffectModel())
    await ctx.service(TOOLS).register(
        Tool(
            name="append_line",
            description="Append a line to the effects file.",
            args=NoArgs,
            execute=append_line,
            shown=ToolShown(kind="edit"),
        )
    )
