"""A test plugin: the ``slow`` provider streams one chunk, then waits for a cancel."""

import asyncio
from collections.abc import AsyncIterator

from tether.llm.chunks import Finish, StreamChunk, TextDelta
from tether.llm.request import ModelRequest
from tether.runtime import CancelSignal, Context

name = "slow_model"
inject = ("llm",)


class SlowModel:
    name = "slow"

    async def stream(
        self, request: ModelRequest, signal: CancelSignal
    ) -> AsyncIterator[StreamChunk]:
        yield TextDelta("thinking about it")
        await signal.wait()
        yield Finish("aborted")


async def apply(ctx: Context, config: None) -> None:
    await ctx.llm.register("slow", SlowModel())
    await asyncio.sleep(0)
