"""Events: emit isolation, serial, parallel, gather, waterfall, dispatch snapshots, listening
inside an effect."""

import asyncio
import logging
from collections.abc import Callable, Iterator

import pytest

from tether.runtime import Context, Runtime, Veto
from tether.runtime.keys import Gather, Notice, Parallel, Serial, Waterfall

DECIDE = Serial("decide")
FLUSH = Parallel("flush")
PARTS = Gather[str]("parts")
LOAD = Waterfall("load")
PING = Notice("ping")
POLICY = Waterfall("policy")
SHAPE = Waterfall("shape")
UNHEARD = Waterfall("unheard")


async def test_emit_isolates_a_raising_listener(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    heard: list[str] = []

    def broken(value: str) -> None:
        raise RuntimeError("listener bug")

    runtime.ctx.on(PING, lambda value: heard.append(f"first {value}"))
    runtime.ctx.on(PING, broken)
    runtime.ctx.on(PING, lambda value: heard.append(f"third {value}"))
    with caplog.at_level(logging.ERROR):
        runtime.ctx.emit(PING, "x")
    assert heard == ["first x", "third x"]
    assert "listener bug" in caplog.text


async def test_emit_refuses_async_listeners_loudly(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    async def async_listener() -> None:
        raise AssertionError("never awaited")

    runtime.ctx.on(PING, async_listener)
    with caplog.at_level(logging.ERROR):
        runtime.ctx.emit(PING)
    assert "must be synchronous" in caplog.text


async def test_prepend_puts_a_listener_first(runtime: Runtime) -> None:
    heard: list[str] = []
    runtime.ctx.on(PING, lambda: heard.append("appended"))
    runtime.ctx.on(PING, lambda: heard.append("prepended"), prepend=True)
    runtime.ctx.emit(PING)
    assert heard == ["prepended", "appended"]


async def test_listener_list_is_snapshotted_at_dispatch_start(runtime: Runtime) -> None:
    heard: list[str] = []

    def adds_another() -> None:
        heard.append("first")
        runtime.ctx.on(PING, lambda: heard.append("late"))

    runtime.ctx.on(PING, adds_another)
    runtime.ctx.emit(PING)
    assert heard == ["first"]
    runtime.ctx.emit(PING)
    assert heard == ["first", "first", "late"]


async def test_listeners_unwind_with_their_fiber(runtime: Runtime) -> None:
    async def listener_plugin(ctx: Context, config: None) -> None:
        ctx.on(PING, lambda: None)

    fiber = await runtime.ctx.plugin(listener_plugin)
    assert runtime.events.count("ping") == 1
    await fiber.dispose()
    assert runtime.events.count("ping") == 0


async def test_remover_is_idempotent(runtime: Runtime) -> None:
    off = runtime.ctx.on(PING, lambda: None)
    off()
    off()
    assert runtime.events.count("ping") == 0


async def test_serial_returns_first_non_none_and_stops(runtime: Runtime) -> None:
    called: list[str] = []

    async def abstain() -> None:
        called.append("abstain")

    def answer() -> str:
        called.append("answer")
        return "yes"

    def never() -> str:
        called.append("never")
        return "no"

    for fn in (abstain, answer, never):
        runtime.ctx.on(DECIDE, fn)
    assert await runtime.ctx.serial(DECIDE) == "yes"
    assert called == ["abstain", "answer"]


async def test_parallel_runs_all_and_raises_failures_together(runtime: Runtime) -> None:
    finished: list[str] = []

    async def ok() -> None:
        finished.append("ok")

    async def fails() -> None:
        raise OSError("disk full")

    runtime.ctx.on(FLUSH, fails)
    runtime.ctx.on(FLUSH, ok)
    with pytest.raises(ExceptionGroup) as info:
        await runtime.ctx.parallel(FLUSH)
    assert finished == ["ok"]
    assert isinstance(info.value.exceptions[0], OSError)


async def test_parallel_with_one_listener_fails_and_cancels_as_with_many(
    runtime: Runtime,
) -> None:
    async def fails() -> None:
        raise OSError("disk full")

    remove = runtime.ctx.on(FLUSH, fails)
    with pytest.raises(ExceptionGroup) as info:
        await runtime.ctx.parallel(FLUSH)
    assert [type(e) for e in info.value.exceptions] == [OSError]
    remove()

    started, release = asyncio.Event(), asyncio.Event()
    cancelled: list[bool] = []

    async def waits() -> None:
        started.set()
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    runtime.ctx.on(FLUSH, waits)
    dispatch = asyncio.ensure_future(runtime.ctx.parallel(FLUSH))
    await started.wait()
    dispatch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await dispatch
    assert cancelled == [True]


async def test_gather_returns_the_answers_in_registration_order_without_none(
    runtime: Runtime,
) -> None:
    release = asyncio.Event()

    async def slow() -> str:
        await release.wait()
        return "slow"

    async def fast() -> str:
        release.set()
        return "fast"

    runtime.ctx.on(PARTS, slow)
    runtime.ctx.on(PARTS, lambda: None)
    runtime.ctx.on(PARTS, fast)
    assert await runtime.ctx.gather(PARTS) == ("slow", "fast")


async def test_gather_raises_failures_together_once_all_have_ended(runtime: Runtime) -> None:
    finished: list[str] = []

    async def ok() -> str:
        finished.append("ok")
        return "ok"

    async def fails() -> str:
        raise OSError("disk full")

    runtime.ctx.on(PARTS, fails)
    runtime.ctx.on(PARTS, ok)
    with pytest.raises(ExceptionGroup) as info:
        await runtime.ctx.gather(PARTS)
    assert finished == ["ok"]
    assert [type(e) for e in info.value.exceptions] == [OSError]


async def test_listen_inside_an_effect_unwinds_in_the_effects_lifo_order(
    runtime: Runtime,
) -> None:
    heard: list[str] = []
    order: list[str] = []

    def closing() -> None:
        # Yielded after the listener: runs first, while the listener stands.
        runtime.ctx.emit(PING, "closing")
        order.append("closed")

    def lifecycle() -> Iterator[Callable[[], None]]:
        yield runtime.ctx.listen(PING, heard.append)
        yield closing

    effect = await runtime.ctx.effect(lifecycle)
    runtime.ctx.emit(PING, "live")
    await effect.dispose()
    runtime.ctx.emit(PING, "after")
    assert heard == ["live", "closing"]
    assert order == ["closed"]


async def test_listen_refuses_an_event_named_by_a_string(runtime: Runtime) -> None:
    with pytest.raises(TypeError, match="named by keys"):
        runtime.ctx.listen("ping", print)  # type: ignore[call-overload]


async def test_waterfall_listeners_replace_the_value(runtime: Runtime) -> None:
    async def double(value: int, next_):  # type: ignore[no-untyped-def]
        return await next_(value * 2)

    async def add_one_after(value: int, next_):  # type: ignore[no-untyped-def]
        return (await next_(value)) + 1

    runtime.ctx.on(SHAPE, add_one_after)
    runtime.ctx.on(SHAPE, double)
    assert await runtime.ctx.waterfall(SHAPE, 5) == 11


async def test_waterfall_veto_reaches_the_caller_and_skips_the_rest(runtime: Runtime) -> None:
    later: list[int] = []

    def deny(value: int, next_):  # type: ignore[no-untyped-def]
        raise Veto("not allowed")

    async def record(value: int, next_):  # type: ignore[no-untyped-def]
        later.append(value)
        return await next_(value)

    runtime.ctx.on(POLICY, deny)
    runtime.ctx.on(POLICY, record)
    with pytest.raises(Veto, match="not allowed"):
        await runtime.ctx.waterfall(POLICY, 1)
    assert later == []


async def test_waterfall_short_circuit_without_next(runtime: Runtime) -> None:
    async def cached(value: str, next_):  # type: ignore[no-untyped-def]
        return "from cache"

    async def expensive(value: str, next_):  # type: ignore[no-untyped-def]
        raise AssertionError("not reached")

    runtime.ctx.on(LOAD, cached)
    runtime.ctx.on(LOAD, expensive)
    assert await runtime.ctx.waterfall(LOAD, "key") == "from cache"
    assert await runtime.ctx.waterfall(UNHEARD, "value") == "value"


async def test_emit_isolates_a_listener_that_raises_cancelled_error(runtime: Runtime) -> None:
    import asyncio

    heard: list[str] = []

    def stray(value: str) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.cancel()
        future.result()

    runtime.ctx.on(PING, stray)
    runtime.ctx.on(PING, heard.append)
    runtime.ctx.emit(PING, "x")
    assert heard == ["x"]
