"""Effects: LIFO within one effect, concurrency between siblings, single-shot disposal."""

import asyncio

import pytest

from tether.runtime import Context, FiberInactiveError, FiberState, Runtime
from tether.runtime.keys import Notice, ServiceKey

X = Notice("x")
THING = ServiceKey("thing")


async def mount(runtime: Runtime, apply: object) -> Context:
    class Plugin:
        name = "probe"

    Plugin.apply = staticmethod(apply)  # type: ignore[attr-defined]
    fiber = await runtime.ctx.plugin(Plugin())
    return fiber.ctx


async def test_disposers_of_one_effect_run_lifo_and_sequentially(runtime: Runtime) -> None:
    log: list[str] = []

    def disposer(name: str):  # type: ignore[no-untyped-def]
        async def dispose() -> None:
            log.append(f"{name} start")
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            log.append(f"{name} end")

        return dispose

    async def body():  # type: ignore[no-untyped-def]
        for name in ("a", "b", "c"):
            await asyncio.sleep(0)
            yield disposer(name)

    ctx = await mount(runtime, lambda ctx, config: None)
    await ctx.effect(body)
    await ctx.fiber.dispose()
    assert log == ["c start", "c end", "b start", "b end", "a start", "a end"]


async def test_sibling_effects_are_disposed_concurrently(runtime: Runtime) -> None:
    started = {"x": asyncio.Event(), "y": asyncio.Event()}

    def sibling(me: str, other: str):  # type: ignore[no-untyped-def]
        def body():  # type: ignore[no-untyped-def]
            async def dispose() -> None:
                started[me].set()
                # Completes only if the other sibling's disposer runs at the same time.
                await started[other].wait()

            return dispose

        return body

    ctx = await mount(runtime, lambda ctx, config: None)
    await ctx.effect(sibling("x", "y"))
    await ctx.effect(sibling("y", "x"))
    await asyncio.wait_for(ctx.fiber.dispose(), timeout=5)
    assert ctx.fiber.state is FiberState.DISPOSED


async def test_fiber_dispose_returns_after_async_cleanup(runtime: Runtime) -> None:
    release = asyncio.Event()
    cleaned = asyncio.Event()

    async def body():  # type: ignore[no-untyped-def]
        async def dispose() -> None:
            await release.wait()
            cleaned.set()

        return dispose

    ctx = await mount(runtime, lambda ctx, config: None)
    await ctx.effect(body)
    disposal = asyncio.ensure_future(ctx.fiber.dispose())
    await asyncio.sleep(0)
    assert not disposal.done()
    release.set()
    await disposal
    assert cleaned.is_set()


async def test_disposers_are_single_shot(runtime: Runtime) -> None:
    calls = 0

    def body():  # type: ignore[no-untyped-def]
        async def dispose() -> None:
            nonlocal calls
            calls += 1
            await asyncio.sleep(0)

        return dispose

    ctx = await mount(runtime, lambda ctx, config: None)
    effect = await ctx.effect(body)
    await asyncio.gather(effect.dispose(), effect.dispose(), ctx.fiber.dispose())
    await effect.dispose()
    assert calls == 1


async def test_registering_on_an_inactive_fiber_raises(runtime: Runtime) -> None:
    ctx = await mount(runtime, lambda ctx, config: None)
    await ctx.fiber.dispose()
    with pytest.raises(FiberInactiveError, match="probe"):
        await ctx.effect(lambda: None)
    with pytest.raises(FiberInactiveError):
        ctx.on(X, lambda: None)
    with pytest.raises(FiberInactiveError):
        ctx.provide(THING, object())
    with pytest.raises(FiberInactiveError):
        ctx.plugin(lambda: None)


async def test_body_raising_part_way_rolls_back_what_it_registered(runtime: Runtime) -> None:
    undone: list[str] = []

    def body():  # type: ignore[no-untyped-def]
        yield lambda: undone.append("first")
        yield lambda: undone.append("second")
        raise RuntimeError("boom")

    ctx = await mount(runtime, lambda ctx, config: None)
    with pytest.raises(RuntimeError, match="boom"):
        await ctx.effect(body)
    assert undone == ["second", "first"]


async def test_effect_finishing_after_unload_began_is_rolled_back(runtime: Runtime) -> None:
    gate = asyncio.Event()
    undone = asyncio.Event()

    async def body():  # type: ignore[no-untyped-def]
        await gate.wait()
        return undone.set

    ctx = await mount(runtime, lambda ctx, config: None)
    registering = asyncio.ensure_future(ctx.effect(body))
    await asyncio.sleep(0)
    disposal = asyncio.ensure_future(ctx.fiber.dispose())
    await asyncio.sleep(0)
    gate.set()
    with pytest.raises(FiberInactiveError):
        await registering
    await disposal
    assert undone.is_set()


async def test_a_raising_disposer_does_not_stop_the_chain(runtime: Runtime) -> None:
    ran: list[str] = []

    def body():  # type: ignore[no-untyped-def]
        yield lambda: ran.append("last")

        def broken() -> None:
            raise RuntimeError("disposer failed")

        yield broken

    ctx = await mount(runtime, lambda ctx, config: None)
    await ctx.effect(body)
    await ctx.fiber.dispose()
    assert ran == ["last"]


async def test_a_stray_cancelled_error_in_a_disposer_does_not_skip_the_rest() -> None:
    from tether.runtime import Effect

    log: list[str] = []

    async def stray() -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.cancel()
        await future  # CancelledError, though nobody cancelled the chain

    effect = Effect("probe")
    effect.push(lambda: log.append("last"))
    effect.push(stray)
    effect.push(lambda: log.append("first"))
    await effect.dispose()
    assert log == ["first", "last"]


async def test_a_base_exception_in_a_disposer_is_raised_after_the_whole_chain_ran() -> None:
    from tether.runtime import Effect

    class Fatal(BaseException):
        pass

    log: list[str] = []

    def fatal() -> None:
        raise Fatal

    effect = Effect("probe")
    effect.push(lambda: log.append("last"))
    effect.push(fatal)
    with pytest.raises(Fatal):
        await effect.dispose()
    assert log == ["last"]
    with pytest.raises(Fatal):  # a later awaiter gets the same outcome
        await effect.dispose()
    assert log == ["last"]  # and nothing ran twice
