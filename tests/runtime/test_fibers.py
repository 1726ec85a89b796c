"""Plugins and fibers: forms, config, start failures, parent/child ownership."""

import asyncio
import types
from typing import Annotated

import pytest
from msgspec import Meta
from pydantic import BaseModel

from tether.runtime import (
    Context,
    FiberState,
    PluginConfigError,
    PluginDefinitionError,
    PluginStartError,
    Runtime,
)
from tether.runtime.keys import Notice, ServiceKey
from tether.runtime.schema import Schema

SOMETHING = Notice("something")
HALF_BUILT = ServiceKey("half_built")


class PortConfig(BaseModel):
    port: int = 8080
    host: str = "127.0.0.1"


async def test_module_object_class_and_function_plugins_all_mount(runtime: Runtime) -> None:
    seen: list[str] = []

    module = types.ModuleType("probe_module")
    module.apply = lambda ctx, config: seen.append("module")  # type: ignore[attr-defined]

    class ObjectPlugin:
        def apply(self, ctx: Context, config: None) -> None:
            seen.append("object")

    class ClassPlugin:
        def __init__(self, ctx: Context, config: None) -> None:
            seen.append("class")

        async def start(self) -> None:
            seen.append("class started")

    async def function_plugin(ctx: Context, config: None) -> None:
        seen.append("function")

    for plugin in (module, ObjectPlugin(), ClassPlugin, function_plugin):
        fiber = await runtime.ctx.plugin(plugin)
        assert fiber.state is FiberState.ACTIVE
    assert seen == ["module", "object", "class", "class started", "function"]


async def test_config_is_validated_and_defaults_fill_gaps(runtime: Runtime) -> None:
    received: list[PortConfig] = []

    class Server:
        name = "server"
        Config = PortConfig

        def apply(self, ctx: Context, config: PortConfig) -> None:
            received.append(config)

    await runtime.ctx.plugin(Server(), {"port": 9000})
    assert received == [PortConfig(port=9000, host="127.0.0.1")]
    with pytest.raises(PluginConfigError, match=r"plugin 'server'.*config\.port"):
        runtime.ctx.plugin(Server(), {"port": "not a number"})


class Widget:
    """A type with no JSON form."""


class SchemaPortConfig(Schema, frozen=True):
    port: Annotated[int, Meta(ge=1, le=65535)] = 8080
    host: str = "127.0.0.1"


async def test_a_schema_config_is_validated_and_defaults_fill_gaps(runtime: Runtime) -> None:
    received: list[SchemaPortConfig] = []

    class Server:
        name = "server"
        Config = SchemaPortConfig

        def apply(self, ctx: Context, config: SchemaPortConfig) -> None:
            received.append(config)

    await runtime.ctx.plugin(Server())
    await runtime.ctx.plugin(Server(), {"port": 9000})
    assert received == [SchemaPortConfig(), SchemaPortConfig(port=9000)]
    for raw, message in (
        ({"port": 0}, "config.port: must be at least 1, got 0"),
        ({"port": "eighty"}, "config.port: must be an integer, got 'eighty'"),
        ({"hots": "x"}, "config.hots: unknown field (the fields are: port, host)"),
    ):
        with pytest.raises(PluginConfigError) as caught:
            runtime.ctx.plugin(Server(), raw)
        assert str(caught.value) == f"plugin 'server': invalid config: {message}"
    with pytest.raises(PluginConfigError, match="config must be a mapping, got list"):
        runtime.ctx.plugin(Server(), [1])


async def test_config_must_be_a_schema_class(runtime: Runtime) -> None:
    class Loose:
        Config = dict

        def apply(self, ctx: Context, config: object) -> None:
            pass

    with pytest.raises(PluginDefinitionError, match="neither a Schema nor a pydantic model"):
        runtime.ctx.plugin(Loose())

    class Unsupported(Schema, frozen=True):
        tags: Widget | None = None

    class Odd:
        name = "odd"
        Config = Unsupported

        def apply(self, ctx: Context, config: object) -> None:
            pass

    # Refused when the plugin is defined, before any config reaches it.
    with pytest.raises(PluginDefinitionError, match=r"plugin 'odd': bad 'Config'.*tags"):
        runtime.ctx.plugin(Odd())


async def test_a_plugin_without_config_schema_rejects_config(runtime: Runtime) -> None:
    async def bare(ctx: Context, config: None) -> None:
        pass

    with pytest.raises(PluginConfigError, match="takes no config"):
        runtime.ctx.plugin(bare, {"x": 1})


async def test_non_plugin_is_refused_clearly(runtime: Runtime) -> None:
    with pytest.raises(PluginDefinitionError, match="is not a plugin"):
        runtime.ctx.plugin(42)


async def test_failed_apply_raises_and_rolls_back_its_registrations(runtime: Runtime) -> None:
    undone: list[str] = []

    async def failing(ctx: Context, config: None) -> None:
        await ctx.effect(lambda: lambda: undone.append("effect"))
        ctx.on(SOMETHING, lambda: None)
        ctx.provide(HALF_BUILT, object())
        raise ValueError("cannot start")

    fiber = runtime.ctx.plugin(failing)
    with pytest.raises(PluginStartError, match=r"failing.*cannot start"):
        await fiber
    assert fiber.state is FiberState.FAILED
    assert undone == ["effect"]
    assert runtime.events.count("something") == 0
    assert not runtime.services.has("half_built")


async def test_children_are_disposed_with_their_parent(runtime: Runtime) -> None:
    order: list[str] = []
    child_fibers = []

    async def child(ctx: Context, config: None) -> None:
        await ctx.effect(lambda: lambda: order.append("child cleaned"))

    async def parent(ctx: Context, config: None) -> None:
        child_fibers.append(await ctx.plugin(child))
        await ctx.effect(lambda: lambda: order.append("parent cleaned"))

    parent_fiber = await runtime.ctx.plugin(parent)
    await parent_fiber.dispose()
    assert sorted(order) == ["child cleaned", "parent cleaned"]
    assert child_fibers[0].state is FiberState.DISPOSED
    assert runtime.fibers == []


async def test_a_child_disposed_alone_leaves_its_parent_running(runtime: Runtime) -> None:
    async def child(ctx: Context, config: None) -> None:
        pass

    async def parent(ctx: Context, config: None) -> None:
        pass

    parent_fiber = await runtime.ctx.plugin(parent)
    child_fiber = await parent_fiber.ctx.plugin(child)
    await child_fiber.dispose()
    assert parent_fiber.state is FiberState.ACTIVE
    assert runtime.fibers == [parent_fiber]


async def test_dispose_during_load_cancels_apply_and_rolls_back(runtime: Runtime) -> None:
    entered = asyncio.Event()
    undone = asyncio.Event()

    async def slow(ctx: Context, config: None) -> None:
        await ctx.effect(lambda: undone.set)
        entered.set()
        await asyncio.Event().wait()

    fiber = runtime.ctx.plugin(slow)
    await entered.wait()
    assert fiber.state is FiberState.LOADING
    await fiber.dispose()
    assert fiber.state is FiberState.DISPOSED
    assert undone.is_set()


async def test_runtime_dispose_unloads_everything() -> None:
    cleaned: list[int] = []

    async def plugin(ctx: Context, config: None) -> None:
        await ctx.effect(lambda: lambda: cleaned.append(1))

    async with Runtime() as runtime:
        for _ in range(3):
            await runtime.ctx.plugin(plugin)
    assert cleaned == [1, 1, 1]
    assert runtime.fibers == []
