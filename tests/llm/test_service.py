"""The llm service: routing, caller-owned registration, and the guarded stream."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest

import tether.llm.service
from tether.llm import (
    Finish,
    LlmView,
    ProviderConflictError,
    TextDelta,
    UnknownProviderError,
    Usage,
)
from tether.llm.assemble import MISSING_FINISH
from tether.llm.service import LLM
from tether.runtime import CancelSignal, FiberState, PluginStartError, Runtime

from .fakes import AdapterPlugin, ScriptedAdapter, collect, prompt


async def mount_llm(runtime: Runtime) -> LlmView:
    await runtime.ctx.plugin(tether.llm.service)
    llm = runtime.ctx.get(LLM)
    assert isinstance(llm, LlmView)
    return llm


async def test_stream_routes_by_the_provider_of_the_model_reference(runtime: Runtime) -> None:
    llm = await mount_llm(runtime)
    alpha = ScriptedAdapter([TextDelta("from alpha"), Finish("stop")], name="alpha")
    beta = ScriptedAdapter([TextDelta("from beta"), Finish("stop")], name="beta")
    await runtime.ctx.plugin(AdapterPlugin("alpha", alpha))
    await runtime.ctx.plugin(AdapterPlugin("beta", beta))
    assert llm.providers() == ["alpha", "beta"]

    chunks = await collect(llm.stream(prompt("hi", model="beta:big"), CancelSignal()))

    assert chunks == [TextDelta("from beta"), Finish("stop")]
    assert [request.model for request in beta.requests] == ["beta:big"]
    assert alpha.requests == []


async def test_unknown_provider_error_lists_the_registered_providers(runtime: Runtime) -> None:
    llm = await mount_llm(runtime)
    await runtime.ctx.plugin(AdapterPlugin("alpha", ScriptedAdapter()))
    await runtime.ctx.plugin(AdapterPlugin("beta", ScriptedAdapter()))

    with pytest.raises(UnknownProviderError) as caught:
        llm.stream(prompt("hi", model="gamma:x"), CancelSignal())

    assert caught.value.provider == "gamma"
    assert caught.value.known == ("alpha", "beta")
    assert "unknown model provider 'gamma' (registered providers: alpha, beta)" in str(caught.value)


async def test_registration_is_owned_by_the_registering_plugins_fiber(runtime: Runtime) -> None:
    service_fiber = await runtime.ctx.plugin(tether.llm.service)
    llm = runtime.ctx.get(LLM)
    adapter_fiber = await runtime.ctx.plugin(AdapterPlugin("alpha", ScriptedAdapter()))
    assert llm.providers() == ["alpha"]

    await adapter_fiber.dispose()

    assert llm.providers() == []
    assert service_fiber.state is FiberState.ACTIVE
    with pytest.raises(UnknownProviderError):
        llm.stream(prompt("hi", model="alpha"), CancelSignal())


async def test_registrations_come_back_with_the_service(runtime: Runtime) -> None:
    service_fiber = await runtime.ctx.plugin(tether.llm.service)
    adapter_fiber = await runtime.ctx.plugin(AdapterPlugin("alpha", ScriptedAdapter()))

    await service_fiber.dispose()
    assert adapter_fiber.state is FiberState.PENDING

    await runtime.ctx.plugin(tether.llm.service)
    await runtime.idle()
    assert adapter_fiber.state is FiberState.ACTIVE  # type: ignore[comparison-overlap]
    assert runtime.ctx.get(LLM).providers() == ["alpha"]


async def test_registering_a_provider_twice_is_a_clear_error(runtime: Runtime) -> None:
    llm = await mount_llm(runtime)
    await runtime.ctx.plugin(AdapterPlugin("alpha", ScriptedAdapter(name="first")))

    with pytest.raises(ProviderConflictError, match="'alpha' is already registered"):
        await llm.register("alpha", ScriptedAdapter(name="second"))
    with pytest.raises(PluginStartError) as caught:
        await runtime.ctx.plugin(AdapterPlugin("alpha", ScriptedAdapter(name="third")))
    assert isinstance(caught.value.__cause__, ProviderConflictError)
    assert llm.adapter("alpha").name == "first"


async def test_register_rejects_bad_provider_names_and_non_adapters(runtime: Runtime) -> None:
    llm = await mount_llm(runtime)
    with pytest.raises(ValueError, match="invalid provider name"):
        await llm.register("Alpha", ScriptedAdapter())
    with pytest.raises(TypeError, match="no stream"):
        await llm.register("alpha", object())  # type: ignore[arg-type]
    assert llm.providers() == []


async def test_register_returns_a_function_that_unregisters(runtime: Runtime) -> None:
    llm = await mount_llm(runtime)
    unregister = await llm.register("alpha", ScriptedAdapter())
    await unregister()
    assert llm.providers() == []


async def test_adapter_exception_becomes_an_error_finish(runtime: Runtime) -> None:
    llm = await mount_llm(runtime)
    adapter = ScriptedAdapter([TextDelta("par")], fail=RuntimeError("connection reset"))
    await llm.register("scripted", adapter)

    chunks = await collect(llm.stream(prompt("hi"), CancelSignal()))

    assert chunks == [TextDelta("par"), Finish("error", error="connection reset")]
    assert adapter.closed


async def test_an_adapter_that_stops_without_finish_ends_with_an_error_finish(
    runtime: Runtime,
) -> None:
    llm = await mount_llm(runtime)
    await llm.register("scripted", ScriptedAdapter([TextDelta("a"), Usage(1, 1)]))

    chunks = await collect(llm.stream(prompt("hi"), CancelSignal()))

    assert chunks == [TextDelta("a"), Usage(1, 1), Finish("error", error=MISSING_FINISH)]


async def test_the_stream_ends_with_exactly_one_finish(runtime: Runtime) -> None:
    llm = await mount_llm(runtime)
    adapter = ScriptedAdapter([TextDelta("a"), Finish("stop"), TextDelta("late"), Finish("stop")])
    await llm.register("scripted", adapter)

    chunks = await collect(llm.stream(prompt("hi"), CancelSignal()))

    assert chunks == [TextDelta("a"), Finish("stop")]
    assert adapter.closed


async def test_a_non_chunk_from_an_adapter_becomes_an_error_finish(runtime: Runtime) -> None:
    llm = await mount_llm(runtime)
    await llm.register("scripted", ScriptedAdapter(["not a chunk"]))

    chunks = await collect(llm.stream(prompt("hi"), CancelSignal()))

    assert len(chunks) == 1
    assert isinstance(chunks[0], Finish)
    assert chunks[0].reason == "error"
    assert "yielded a non-chunk: 'not a chunk'" in (chunks[0].error or "")


async def test_cancel_mid_stream_yields_aborted_finish_and_closes_the_adapter(
    runtime: Runtime,
) -> None:
    llm = await mount_llm(runtime)
    # The adapter blocks without ever looking at the signal: the service must
    # interrupt it.
    adapter = ScriptedAdapter([TextDelta("partial")], block=True)
    await llm.register("scripted", adapter)
    signal = CancelSignal()

    async with aclosing(llm.stream(prompt("hi"), signal)) as stream:
        assert await anext(stream) == TextDelta("partial")
        waiting = asyncio.ensure_future(anext(stream))
        await adapter.blocked.wait()
        signal.cancel("user")
        assert await waiting == Finish("aborted")
        assert adapter.closed
        assert adapter.saw_cancel
        with pytest.raises(StopAsyncIteration):
            await anext(stream)


async def test_an_interrupted_stream_leaves_the_consumer_task_uncancelled(
    runtime: Runtime,
) -> None:
    llm = await mount_llm(runtime)
    adapter = ScriptedAdapter(block=True)
    await llm.register("scripted", adapter)
    signal = CancelSignal()

    async def consume() -> tuple[list[object], int]:
        chunks = await collect(llm.stream(prompt("hi"), signal))
        task = asyncio.current_task()
        assert task is not None
        # A later await in the same task must not be hit by the interrupt.
        await asyncio.sleep(0)
        return list(chunks), task.cancelling()

    consumer = asyncio.ensure_future(consume())
    await adapter.blocked.wait()
    signal.cancel("user")
    assert await consumer == ([Finish("aborted")], 0)


async def test_a_stream_whose_signal_is_already_cancelled_never_starts_the_adapter(
    runtime: Runtime,
) -> None:
    llm = await mount_llm(runtime)
    adapter = ScriptedAdapter([TextDelta("never")])
    await llm.register("scripted", adapter)
    signal = CancelSignal()
    signal.cancel("user")

    assert await collect(llm.stream(prompt("hi"), signal)) == [Finish("aborted")]
    assert adapter.requests == []


async def test_stopping_early_closes_the_adapter_generator(runtime: Runtime) -> None:
    llm = await mount_llm(runtime)
    adapter = ScriptedAdapter([TextDelta("a"), TextDelta("b"), Finish("stop")])
    await llm.register("scripted", adapter)

    async with aclosing(llm.stream(prompt("hi"), CancelSignal())) as stream:
        async for _chunk in stream:
            break

    assert adapter.closed


async def test_cancelling_the_consumer_task_propagates_and_closes_the_adapter(
    runtime: Runtime,
) -> None:
    llm = await mount_llm(runtime)
    adapter = ScriptedAdapter(block=True)
    await llm.register("scripted", adapter)

    consumer = asyncio.ensure_future(collect(llm.stream(prompt("hi"), CancelSignal())))
    await adapter.blocked.wait()
    consumer.cancel()

    with pytest.raises(asyncio.CancelledError):
        await consumer
    assert adapter.closed
