"""The tool registry: ownership of registrations, scopes, conflicts and specs."""

from __future__ import annotations

import pytest

from tether.runtime import Context, FiberState, PluginStartError, Runtime
from tether.tools import ToolConflictError, ToolRegistry, ToolSpec

from .support import echo_tool, mount


async def test_a_registration_is_owned_by_the_registering_plugin(
    runtime: Runtime, registry: ToolRegistry
) -> None:
    registrar = await mount(runtime, echo_tool("echo"))
    assert registry.get("echo") is not None

    await registrar.dispose()

    assert registry.get("echo") is None
    provider = runtime.services.provider_of("tools")
    assert provider is not None and provider.state is FiberState.ACTIVE
    # The registry lives on: the name is free again.
    await mount(runtime, echo_tool("echo"), name="second")
    assert registry.get("echo") is not None


async def test_registrations_of_other_plugins_survive_an_unload(
    runtime: Runtime, registry: ToolRegistry
) -> None:
    first = await mount(runtime, echo_tool("one"), name="first")
    await mount(runtime, echo_tool("two"), name="second")
    await first.dispose()
    assert [tool.name for tool in registry.list()] == ["two"]


async def test_the_returned_function_unregisters_once(registry: ToolRegistry) -> None:
    unregister = await registry.register(echo_tool("echo"))
    await unregister()
    assert registry.get("echo") is None
    again = await registry.register(echo_tool("echo"))
    await unregister()  # single-shot: the newer registration stays
    assert registry.get("echo") is not None
    await again()
    assert registry.list() == []


async def test_a_scoped_tool_is_visible_only_to_its_scope_and_shadows_the_global_one(
    registry: ToolRegistry,
) -> None:
    global_echo = echo_tool("echo", description="Global echo.")
    scoped_echo = echo_tool("echo", description="Scoped echo.")
    await registry.register(global_echo)
    await registry.register(scoped_echo, scope="agent-a")
    await registry.register(echo_tool("private"), scope="agent-a")

    assert registry.get("echo") is global_echo
    assert registry.get("echo", "agent-a") is scoped_echo
    assert registry.get("echo", "agent-b") is global_echo
    assert registry.get("private") is None
    assert registry.get("private", "agent-b") is None
    assert [t.name for t in registry.list("agent-a")] == ["echo", "private"]
    assert registry.list("agent-a")[0] is scoped_echo
    assert registry.list("agent-b") == [global_echo]
    assert [s.description for s in registry.specs("agent-a")] == ["Scoped echo.", "Echo."]


async def test_two_global_tools_with_one_name_are_a_conflict(
    runtime: Runtime, registry: ToolRegistry
) -> None:
    first = echo_tool("echo")
    await mount(runtime, first, name="first")

    with pytest.raises(PluginStartError) as info:
        await mount(runtime, echo_tool("echo"), name="second")

    assert isinstance(info.value.__cause__, ToolConflictError)
    assert str(info.value.__cause__) == (
        "tool 'echo' is already registered globally by plugin 'first'"
    )
    assert registry.get("echo") is first


async def test_one_name_twice_in_one_scope_conflicts_but_not_across_scopes(
    registry: ToolRegistry,
) -> None:
    await registry.register(echo_tool("echo"), scope="agent-a")
    await registry.register(echo_tool("echo"), scope="agent-b")
    await registry.register(echo_tool("echo"))
    with pytest.raises(ToolConflictError, match="already registered in scope 'agent-a'"):
        await registry.register(echo_tool("echo"), scope="agent-a")


async def test_a_failed_registration_leaves_nothing_behind(
    runtime: Runtime, registry: ToolRegistry
) -> None:
    await registry.register(echo_tool("taken"))

    class Partial:
        name = "partial"
        inject = ("tools",)

        async def apply(self, ctx: Context, config: None) -> None:
            await ctx.tools.register(echo_tool("fresh"))
            await ctx.tools.register(echo_tool("taken"))

    with pytest.raises(PluginStartError):
        await runtime.ctx.plugin(Partial())
    assert [tool.name for tool in registry.list()] == ["taken"]


async def test_register_takes_only_tools(registry: ToolRegistry) -> None:
    with pytest.raises(TypeError, match="takes a Tool"):
        await registry.register("echo")  # type: ignore[arg-type]


async def test_tools_are_listed_by_name_whatever_the_registration_order(
    registry: ToolRegistry,
) -> None:
    for name in ("zeta", "alpha", "mid"):
        await registry.register(echo_tool(name))
    assert [tool.name for tool in registry.list()] == ["alpha", "mid", "zeta"]


async def test_specs_can_be_narrowed_to_named_tools(registry: ToolRegistry) -> None:
    for name in ("alpha", "beta", "gamma"):
        await registry.register(echo_tool(name))

    specs = registry.specs(only=["gamma", "alpha", "not-registered"])

    assert specs == [
        ToolSpec("alpha", "Echo.", echo_tool().parameters),
        ToolSpec("gamma", "Echo.", echo_tool().parameters),
    ]
    assert registry.specs(only=[]) == []
    with pytest.raises(TypeError, match="sequence of tool names"):
        registry.specs(only="alpha")
    assert [tool.name for tool in registry.list(only=["gamma", "alpha", "nope"])] == [
        "alpha",
        "gamma",
    ]
    with pytest.raises(TypeError, match="sequence of tool names"):
        registry.list(only="alpha")


async def test_concurrency_safety_is_read_from_the_visible_tool(registry: ToolRegistry) -> None:
    await registry.register(echo_tool("read", safe=True))
    await registry.register(echo_tool("read", safe=False), scope="agent-a")
    assert registry.is_concurrency_safe("read")
    assert not registry.is_concurrency_safe("read", scope="agent-a")
    assert not registry.is_concurrency_safe("unknown")
