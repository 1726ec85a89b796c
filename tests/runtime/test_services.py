"""Services: inject, restart cascade, optional reads, caller binding."""

import asyncio

import pytest

from tether.runtime import (
    Context,
    FiberState,
    Runtime,
    ServiceConflictError,
    ServiceError,
)
from tether.runtime.keys import Notice, ServiceKey, Waterfall

THING_CHANGED = Notice("thing/changed")
THING_SHAPE = Waterfall("thing/shape")
COUNTER = ServiceKey("counter")
MISSING = ServiceKey("missing")


class Counter:
    def __init__(self) -> None:
        self.value = 0


def provider_plugin(service: object, name: str = "counter"):  # type: ignore[no-untyped-def]
    async def provider(ctx: Context, config: None) -> None:
        ctx.provide(ServiceKey(name), service)

    return provider


class Consumer:
    name = "consumer"
    inject = ("counter",)

    def __init__(self) -> None:
        self.applies = 0
        self.unloads = 0

    async def apply(self, ctx: Context, config: None) -> None:
        self.applies += 1
        ctx.counter.value += 1

        def unload() -> None:
            self.unloads += 1
            # A dependent can still use the service while it unloads.
            ctx.counter.value -= 1

        await ctx.effect(lambda: unload)


async def test_fiber_stays_pending_until_its_services_are_provided(runtime: Runtime) -> None:
    consumer = Consumer()
    fiber = await runtime.ctx.plugin(consumer)
    assert fiber.state is FiberState.PENDING
    counter = Counter()
    await runtime.ctx.plugin(provider_plugin(counter))
    await runtime.idle()
    assert fiber.state is FiberState.ACTIVE
    assert counter.value == 1


async def test_service_restart_cascades_to_dependents(runtime: Runtime) -> None:
    counter = Counter()
    provider = await runtime.ctx.plugin(provider_plugin(counter))
    consumer = Consumer()
    fiber = await runtime.ctx.plugin(consumer)
    assert fiber.state is FiberState.ACTIVE

    await provider.dispose()
    assert fiber.state is FiberState.PENDING
    assert (consumer.applies, consumer.unloads, counter.value) == (1, 1, 0)

    await runtime.ctx.plugin(provider_plugin(counter))
    await runtime.idle()
    assert fiber.state is FiberState.ACTIVE
    assert (consumer.applies, counter.value) == (2, 1)


async def test_reading_a_service_that_is_not_injected_raises(runtime: Runtime) -> None:
    await runtime.ctx.plugin(provider_plugin(Counter()))
    errors: list[Exception] = []

    async def nosy(ctx: Context, config: None) -> None:
        try:
            _ = ctx.counter
        except ServiceError as exc:
            errors.append(exc)
        assert ctx.get(COUNTER) is not None
        assert ctx.get(MISSING) is None

    await runtime.ctx.plugin(nosy)
    assert "without injecting it" in str(errors[0])


async def test_two_providers_of_one_name_conflict(runtime: Runtime) -> None:
    await runtime.ctx.plugin(provider_plugin(Counter()))

    async def second(ctx: Context, config: None) -> None:
        ctx.provide(COUNTER, Counter())

    with pytest.raises(Exception, match="already provided") as info:
        await runtime.ctx.plugin(second)
    assert isinstance(info.value.__cause__, ServiceConflictError)


class Timers:
    """A service that registers effects on behalf of whoever calls it."""

    def __init__(self) -> None:
        self.active: set[str] = set()

    def for_caller(self, ctx: Context) -> "TimersView":
        return TimersView(self, ctx)


class TimersView:
    def __init__(self, timers: Timers, caller: Context) -> None:
        self._timers = timers
        self._caller = caller

    async def start(self, key: str) -> None:
        def body():  # type: ignore[no-untyped-def]
            self._timers.active.add(key)
            yield lambda: self._timers.active.discard(key)

        await self._caller.effect(body)


async def test_registrations_made_through_a_service_are_owned_by_the_caller(
    runtime: Runtime,
) -> None:
    timers = Timers()
    provider = await runtime.ctx.plugin(provider_plugin(timers, "timers"))

    class Caller:
        name = "caller"
        inject = ("timers",)

        async def apply(self, ctx: Context, config: None) -> None:
            await ctx.timers.start("tick")

    caller = await runtime.ctx.plugin(Caller())
    assert timers.active == {"tick"}
    await caller.dispose()
    assert timers.active == set()
    assert provider.state is FiberState.ACTIVE


async def test_withdrawal_waits_for_dependents_to_unload(runtime: Runtime) -> None:
    counter = Counter()
    provider = await runtime.ctx.plugin(provider_plugin(counter))
    release = asyncio.Event()

    class SlowConsumer:
        name = "slow"
        inject = ("counter",)

        async def apply(self, ctx: Context, config: None) -> None:
            async def dispose() -> None:
                await release.wait()
                ctx.counter.value = 42  # still reachable during its teardown

            await ctx.effect(lambda: dispose)

    await runtime.ctx.plugin(SlowConsumer())
    disposal = asyncio.ensure_future(provider.dispose())
    await asyncio.sleep(0)
    assert runtime.services.provider_of("counter") is provider
    release.set()
    await disposal
    assert counter.value == 42
    assert runtime.services.provider_of("counter") is None


async def test_a_scope_unwinds_only_when_its_owner_disposes_it(runtime: Runtime) -> None:
    async def parent(ctx: Context, config: None) -> None:
        pass

    parent_fiber = await runtime.ctx.plugin(parent)
    scope = runtime.scope(parent_fiber, "scope:x")
    undone = asyncio.Event()
    await scope.ctx.effect(lambda: undone.set)
    assert scope.state is FiberState.ACTIVE
    await scope.dispose()
    assert undone.is_set()
    assert parent_fiber.state is FiberState.ACTIVE


async def test_scope_listeners_hear_only_what_the_filter_accepts(runtime: Runtime) -> None:
    mine, theirs = object(), object()
    scope = runtime.scope(
        runtime.root, "scope:mine", event_filter=lambda name, args: args[0] is mine
    )
    heard: list[object] = []
    scope.ctx.on(THING_CHANGED, heard.append)

    async def shape(value: int, next_, subject):  # type: ignore[no-untyped-def]
        return await next_(value + 1)

    scope.ctx.on(THING_SHAPE, shape)
    runtime.ctx.emit(THING_CHANGED, theirs)
    runtime.ctx.emit(THING_CHANGED, mine)
    assert heard == [mine]
    assert await runtime.ctx.waterfall(THING_SHAPE, 1, theirs) == 1
    assert await runtime.ctx.waterfall(THING_SHAPE, 1, mine) == 2
    await scope.dispose()


class SlowProvider:
    """Declares ``counter`` and provides it once ``go`` is set (or fails, with ``fail``)."""

    name = "slow_provider"
    provides = ("counter",)

    def __init__(self, *, fail: bool = False) -> None:
        self.go = asyncio.Event()
        self.fail = fail
        self.counter = Counter()

    async def apply(self, ctx: Context, config: None) -> None:
        await self.go.wait()
        if self.fail:
            raise RuntimeError("cannot reach the counter")
        ctx.provide(COUNTER, self.counter)


class OptionalReader:
    """Reads ``counter`` when there is one, as it loads."""

    name = "optional_reader"
    optional = ("counter",)

    def __init__(self) -> None:
        self.seen: list[object] = []

    async def apply(self, ctx: Context, config: None) -> None:
        self.seen.append(ctx.get(COUNTER))


async def test_an_optional_service_a_mounted_fiber_promises_is_there_when_its_reader_loads(
    runtime: Runtime,
) -> None:
    reader = OptionalReader()
    provider = SlowProvider()
    # Mounted first, the reader still waits for the provider declared after it.
    reader_fiber = runtime.ctx.plugin(reader)
    runtime.ctx.plugin(provider)
    await reader_fiber
    assert reader_fiber.state is FiberState.PENDING
    assert reader.seen == []
    provider.go.set()
    await runtime.idle()
    assert reader_fiber.state is FiberState.ACTIVE
    assert reader.seen == [provider.counter]


async def test_an_optional_service_whose_provider_fails_leaves_its_reader_to_load_without(
    runtime: Runtime,
) -> None:
    reader = OptionalReader()
    provider = SlowProvider(fail=True)
    runtime.ctx.plugin(provider)
    reader_fiber = runtime.ctx.plugin(reader)
    await reader_fiber
    assert reader_fiber.state is FiberState.PENDING
    provider.go.set()
    await runtime.idle()
    assert reader_fiber.state is FiberState.ACTIVE
    assert reader.seen == [None]


async def test_an_optional_service_nobody_promises_is_not_waited_for(runtime: Runtime) -> None:
    reader = OptionalReader()
    fiber = await runtime.ctx.plugin(reader)
    assert fiber.state is FiberState.ACTIVE
    assert reader.seen == [None]


async def test_an_optional_reader_waits_no_longer_once_the_promising_fiber_is_disposed(
    runtime: Runtime,
) -> None:
    reader = OptionalReader()
    provider_fiber = runtime.ctx.plugin(SlowProvider())
    reader_fiber = await runtime.ctx.plugin(reader)
    assert reader_fiber.state is FiberState.PENDING
    await provider_fiber.dispose()
    await runtime.idle()
    assert reader_fiber.state is FiberState.ACTIVE
    assert reader.seen == [None]
