"""The LLM seam (``ctx.llm``): model adapters by provider name, and the guarded stream.

This module is also the plugin that provides the service::

    await runtime.ctx.plugin(tether.llm.service)   # provides ``llm``

An **adapter** (:class:`ModelAdapter`) turns one provider's API into normalized
:mod:`~tether.llm.chunks`. A plugin that brings one injects ``llm`` and
registers it::

    await ctx.llm.register("deepseek", DeepSeekAdapter(...))

The registration is an effect of the **registering plugin's fiber** (the
service is caller-bound, see :meth:`LlmService.for_caller`): when that plugin
unloads, its provider disappears while the service and the other providers
live on. When the service itself goes away, every plugin that injects it
unloads first, so no registration outlives it.

:meth:`LlmService.stream` routes a request by the provider part of its model
reference and gives its caller a stream of a fixed shape, whatever the
adapter does; see there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol

import msgspec

from tether.llm.assemble import MISSING_FINISH
from tether.llm.catalog import ModelCatalog, ModelEntry
from tether.llm.chunks import (
    Finish,
    ReasoningDelta,
    RedactedReasoning,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from tether.llm.errors import ProviderConflictError, UnknownProviderError
from tether.llm.request import ModelRequest, check_provider_name
from tether.llm.spend import PURPOSE, SPENDING, SpendGate
from tether.runtime.keys import ServiceKey
from tether.runtime.schema import Schema
from tether.runtime.signal import CancelSignal

if TYPE_CHECKING:
    from tether.runtime import Context

__all__ = ["Config", "LlmService", "LlmView", "ModelAdapter", "apply", "name"]

log = logging.getLogger(__name__)

_CHUNK_TYPES = (TextDelta, ReasoningDelta, RedactedReasoning, ToolCallDelta, Usage, Finish)


class ModelAdapter(Protocol):
    """One provider's models, as a stream of normalized chunks.

    ``stream`` is usually an async generator. It should end with one
    :class:`Finish` (usage before it) and stop soon after ``signal`` is
    cancelled; :meth:`LlmService.stream` enforces both for its callers, so an
    adapter that fails to is contained, not trusted. An adapter signals a
    failed request by raising or by yielding ``Finish("error", ...)``.
    """

    @property
    def name(self) -> str:
        """A name for diagnostics (typically the provider it serves)."""
        ...

    def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamChunk]:
        """Stream the answer to ``request``."""
        ...


LLM = ServiceKey["LlmView"]("llm")
"""``ctx.llm``: the caller's :class:`LlmView` of the adapters."""


class LlmService:
    """The registered adapters by provider name; the ``llm`` service.

    Plugins reach it as ``ctx.llm``, which is the :class:`LlmView` bound to
    the reading plugin's context. Registering is only possible through such a
    view, so every registration has an owning fiber.
    """

    __slots__ = ("_adapters", "catalog")

    def __init__(self, catalog: ModelCatalog | None = None) -> None:
        self._adapters: dict[str, ModelAdapter] = {}
        self.catalog = catalog or ModelCatalog()
        """The models the settings list (context windows, prices)."""

    def for_caller(self, ctx: Context) -> LlmView:
        """The view of this service whose registrations ``ctx``'s fiber owns."""
        return LlmView(self, ctx)

    def providers(self) -> list[str]:
        """The registered provider names, sorted."""
        return sorted(self._adapters)

    def adapter(self, provider: str) -> ModelAdapter:
        """The adapter registered as ``provider``.

        Raises:
            UnknownProviderError: none is; the error lists those that are.
        """
        adapter = self._adapters.get(provider)
        if adapter is None:
            raise UnknownProviderError(provider, self._adapters)
        return adapter

    def stream(
        self, request: ModelRequest, signal: CancelSignal
    ) -> AsyncGenerator[StreamChunk, None]:
        """Stream the answer to ``request`` from the adapter of its provider.

        The adapter is looked up now; the stream starts when iterated. What the
        caller is guaranteed:

        * the stream ends with exactly one :class:`Finish` and has nothing
          after it (chunks an adapter yields after its own finish are dropped);
        * once ``signal`` is cancelled the stream stops promptly, even while the
          adapter is blocked waiting on its provider, and ends with
          ``Finish("aborted")``;
        * an adapter that raises (or yields something that is not a chunk)
          ends the stream with ``Finish("error", error=<message>)``; one that
          stops without a finish ends it with an ``"error"`` finish too;
        * the adapter's iterator is closed (``aclose``) before the final
          :class:`Finish` is yielded, and also when the caller stops early and
          closes this generator (``contextlib.aclosing`` does that).

        Cancelling the caller's asyncio task is not a cancel of the stream: the
        :class:`asyncio.CancelledError` propagates (the adapter is still
        closed) and no finish is yielded. Use ``signal`` to stop a stream.

        When a spend gate is set (:data:`~tether.llm.spend.SPENDING`), it admits
        the request before it is sent and settles it after; a request it
        refuses is never sent, and its stream is one ``Finish("error")`` with
        ``error_code`` ``budget`` (see :mod:`tether.llm.spend`).

        Raises:
            UnknownProviderError: no adapter is registered for the provider.
        """
        adapter = self.adapter(request.provider)
        gate = SPENDING.get()
        if gate is None:
            return _guarded(adapter, request, signal)
        return _gated(gate, adapter, request, signal)

    def _attach(self, provider: str, adapter: ModelAdapter) -> Callable[[], None]:
        """Register ``adapter``; return the function that unregisters exactly it."""
        current = self._adapters.get(provider)
        if current is not None:
            raise ProviderConflictError(
                f"model provider {provider!r} is already registered (adapter {current.name!r})"
            )
        self._adapters[provider] = adapter

        def detach() -> None:
            if self._adapters.get(provider) is adapter:
                del self._adapters[provider]

        return detach


class LlmView:
    """:class:`LlmService` as one caller sees it: what it registers, its fiber owns."""

    __slots__ = ("_caller", "_service")

    def __init__(self, service: LlmService, caller: Context) -> None:
        self._service = service
        self._caller = caller

    async def register(self, provider: str, adapter: ModelAdapter) -> Callable[[], Awaitable[None]]:
        """Register ``adapter`` as ``provider`` until the caller's fiber unloads.

        Returns the function that unregisters it earlier.

        Raises:
            ValueError: ``provider`` is not a valid provider name.
            TypeError: ``adapter`` has no ``stream`` method.
            ProviderConflictError: ``provider`` is already registered.
            FiberInactiveError: the caller's fiber is unloading or gone.
        """
        check_provider_name(provider)
        if not callable(getattr(adapter, "stream", None)):
            raise TypeError(f"model adapter {adapter!r} has no stream() method")
        effect = await self._caller.effect(
            lambda: self._service._attach(provider, adapter), label=f"llm provider {provider!r}"
        )
        return effect.dispose

    def providers(self) -> list[str]:
        """See :meth:`LlmService.providers`."""
        return self._service.providers()

    @property
    def catalog(self) -> ModelCatalog:
        """See :attr:`LlmService.catalog`."""
        return self._service.catalog

    def adapter(self, provider: str) -> ModelAdapter:
        """See :meth:`LlmService.adapter`."""
        return self._service.adapter(provider)

    def stream(
        self, request: ModelRequest, signal: CancelSignal
    ) -> AsyncGenerator[StreamChunk, None]:
        """See :meth:`LlmService.stream`."""
        return self._service.stream(request, signal)


async def _gated(
    gate: SpendGate, adapter: ModelAdapter, request: ModelRequest, signal: CancelSignal
) -> AsyncGenerator[StreamChunk, None]:
    """:func:`_guarded`, after ``gate`` admitted the request; settled however it ends."""
    if signal.cancelled:
        yield Finish("aborted")
        return
    admission = await gate.admit(request, PURPOSE.get())
    if admission.refusal is not None:
        yield Finish("error", error=admission.refusal, error_code=admission.code)
        return
    usage: Usage | None = None
    answered = False
    try:
        async for chunk in _guarded(adapter, admission.request, signal):
            if isinstance(chunk, Usage):
                usage = chunk
            elif not isinstance(chunk, Finish):
                answered = True
            yield chunk
    finally:
        gate.settle(admission, usage, answered)


async def _guarded(
    adapter: ModelAdapter, request: ModelRequest, signal: CancelSignal
) -> AsyncGenerator[StreamChunk, None]:
    if signal.cancelled:
        yield Finish("aborted")
        return
    log.debug(
        "model request to %s: %d messages, %d tools",
        request.model,
        len(request.messages),
        len(request.tools),
    )
    try:
        chunks = adapter.stream(request, signal)
    except Exception as exc:
        yield _failure(adapter, signal, exc)
        return
    try:
        while not isinstance(chunk := await _next_chunk(adapter, chunks, signal), Finish):
            yield chunk
    finally:
        await _close(adapter, chunks)
    log.debug("model answer from %s ended: %s", request.model, chunk.reason)
    yield chunk


async def _next_chunk(
    adapter: ModelAdapter, chunks: AsyncIterator[StreamChunk], signal: CancelSignal
) -> StreamChunk:
    """The adapter's next chunk, or the :class:`Finish` that ends the stream here.

    A cancel interrupts the wait by cancelling the awaiting task, exactly as a
    timeout does: the adapter sees :class:`asyncio.CancelledError` where it is
    blocked. ``asyncio.timeout`` keeps the task's cancellation count straight,
    so an unrelated cancel of the task still propagates.
    """
    if signal.cancelled:
        return Finish("aborted")
    loop = asyncio.get_running_loop()
    interrupt = asyncio.timeout(None)
    try:
        async with interrupt:
            remove = signal.on_cancel(lambda _reason: interrupt.reschedule(loop.time()))
            try:
                chunk = await anext(chunks)
            finally:
                remove()
    except TimeoutError as exc:
        if interrupt.expired():
            return Finish("aborted")
        return _failure(adapter, signal, exc)
    except StopAsyncIteration:
        return Finish("aborted") if signal.cancelled else Finish("error", error=MISSING_FINISH)
    except Exception as exc:
        return _failure(adapter, signal, exc)
    if not isinstance(chunk, _CHUNK_TYPES):
        error = TypeError(f"model adapter {adapter.name!r} yielded a non-chunk: {chunk!r}")
        return _failure(adapter, signal, error)
    return chunk


def _failure(adapter: ModelAdapter, signal: CancelSignal, exc: Exception) -> Finish:
    if signal.cancelled:
        # Whatever the adapter raised while being interrupted, the caller asked
        # for this stop.
        return Finish("aborted")
    log.warning("model adapter %r failed: %s", adapter.name, exc, exc_info=exc)
    return Finish("error", error=str(exc) or type(exc).__name__)


async def _close(adapter: ModelAdapter, chunks: AsyncIterator[StreamChunk]) -> None:
    aclose: Callable[[], Awaitable[object]] | None = getattr(chunks, "aclose", None)
    if aclose is None:
        return
    try:
        await aclose()
    except Exception:
        # The stream's outcome is already decided; a failing cleanup must not
        # replace it, but it must be seen.
        log.warning("model adapter %r failed while closing its stream", adapter.name, exc_info=True)


name = "llm"


class Config(Schema, frozen=True):
    """Configuration of the ``llm`` service."""

    models: Mapping[str, ModelEntry] = msgspec.field(default_factory=dict)


async def apply(ctx: Context, config: Config) -> None:
    """Provide ``ctx.llm``, with no providers registered and the configured catalog."""
    ctx.provide(LLM, LlmService(ModelCatalog(config.models)))
