"""A test plugin: the ``broken`` provider fails every request."""

from collections.abc import AsyncIterator

from tether.llm.chunks import Finish, StreamChunk
from tether.llm.request import ModelRequest
from tether.runtime import CancelSignal, Context

OVERLAY = (
    "plugins:\n  - id: broken\n    plugin: tests.cli.broken_model\n"
    "  - id: retry\n    plugin: tether.loop.retry\n"
    "    config: {base_delay: 0.01, max_delay: 0.05}\n"
)
"""A configuration overlay with this provider, whose failures are retried at once."""

name = "broken_model"
inject = ("llm",)


class BrokenModel:
    name = "broken"

    async def stream(
        self, request: ModelRequest, signal: CancelSignal
    ) -> AsyncIterator[StreamChunk]:
        yield Finish("error", error="the model is down", error_code="server")


async def apply(ctx: Context, config: None) -> None:
    await ctx.llm.register("broken", BrokenModel())
