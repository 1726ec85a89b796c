"""Test doubles for the LLM seam: a scripted adapter and a plugin that registers it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterable, Sequence

from tether.llm import ModelAdapter, ModelRequest, StreamChunk, TextBlock, UserRoleMessage
from tether.runtime import CancelSignal, Context


class ScriptedAdapter:
    """Yields ``chunks``; then optionally blocks (ignoring the signal) or raises.

    ``closed`` is set in the generator's ``finally``; ``blocked`` is set right
    before it blocks, so a test can cancel while the adapter is stuck.
    """

    def __init__(
        self,
        chunks: Sequence[object] = (),
        *,
        name: str = "scripted",
        block: bool = False,
        fail: Exception | None = None,
    ) -> None:
        self.name = name
        self._chunks = chunks
        self._block = block
        self._fail = fail
        self.requests: list[ModelRequest] = []
        self.blocked = asyncio.Event()
        self.closed = False
        self.saw_cancel = False

    async def stream(
        self, request: ModelRequest, signal: CancelSignal
    ) -> AsyncGenerator[StreamChunk, None]:
        self.requests.append(request)
        try:
            for chunk in self._chunks:
                yield chunk  # type: ignore[misc]
            if self._block:
                self.blocked.set()
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    self.saw_cancel = True
                    raise
            if self._fail is not None:
                raise self._fail
        finally:
            self.closed = True


class AdapterPlugin:
    """A plugin that registers ``adapter`` as ``provider`` with ``ctx.llm``."""

    inject = ("llm",)

    def __init__(self, provider: str, adapter: ModelAdapter) -> None:
        self.name = f"adapter-{provider}"
        self._provider = provider
        self._adapter = adapter

    async def apply(self, ctx: Context, config: None) -> None:
        await ctx.llm.register(self._provider, self._adapter)


def prompt(text: str, model: str = "scripted:test", **kwargs: object) -> ModelRequest:
    return ModelRequest(model, (UserRoleMessage((TextBlock(text),)),), **kwargs)  # type: ignore[arg-type]


async def collect(stream: AsyncIterable[StreamChunk]) -> list[StreamChunk]:
    return [chunk async for chunk in stream]
