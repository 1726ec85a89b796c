"""A test plugin: the ``slow`` provider streams one chunk, then waits for a cancel.

The chunk is longer than a memory page: the interrupted answer the cancel
stores then never fits in the slack of a page a log file already holds, so a
disk filled mid-turn fails that write whether or not the log was created
before the disk filled.
"""

import asyncio
from collections.abc import AsyncIterator

from tether.llm.chunks import Finish, StreamChunk, TextDelta
from tether.llm.request import ModelRequest
from tether.runtime import CancelSignal, Context

ANSWER = "thinking about it" + " ." * 3_000

name = "slow_model"
inject = ("llm",)


class SlowModel:
    name = "slow"

    async def stream(
        self, request: ModelRequest, signal: CancelSignal
    ) -> AsyncIterator[StreamChunk]:
        yield TextDelta(ANSWER)
        await signal.wait()
        yield Finish("aborted")


async def apply(ctx: Context, config: None) -> None:
    await ctx.llm.register("slow", SlowModel())
    await asyncio.sleep(0)
