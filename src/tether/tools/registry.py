"""The tool registry (``ctx.tools``): which tools exist, for whom, and how a call runs.

Registering a tool is an effect of the **caller's** fiber: the registry hands
every reader a view bound to its context (``for_caller``), and a tool
registered through ``ctx.tools`` disappears when the registering plugin
unloads, while the registry lives on.

A tool is registered globally or in a **scope** (an agent id). A scoped tool
is visible only to that agent, and for it shadows a global tool of the same
name. One name may be registered once globally and once per scope; anything
more is a :class:`~tether.tools.errors.ToolConflictError`.

Tools are listed by name, so the tool definitions a model reads do not change
order when a plugin reloads and registers its tools again.

Calls run through the pipeline of :mod:`tether.tools.execute`, whose events
(``tool/before-execute``, ``tool/after-execute``) are documented there.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from tether.runtime.keys import ServiceKey
from tether.tools.definition import Tool, ToolExec, ToolResult, ToolSpec
from tether.tools.errors import ToolConflictError
from tether.tools.execute import ScheduledCall, run_call, run_calls
from tether.tools.presentation import DEFAULT_SHOWN, ToolShown

if TYPE_CHECKING:
    from tether.content import ToolCallBlock
    from tether.runtime import Context


class _Registration(msgspec.Struct, frozen=True, eq=False):
    """One registered tool, the scope it is visible in, and the plugin that registered it."""

    tool: Tool[Any]
    scope: str | None
    owner: str
    """The name of the registering plugin, for conflict messages."""


class _Catalog:
    """The registrations, shared by the registry and every caller-bound view."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str | None, str], _Registration] = {}

    def add(self, registration: _Registration) -> Callable[[], None]:
        """Add ``registration``; return the function that removes exactly it.

        Raises:
            ToolConflictError: its name is taken in its scope.
        """
        key = (registration.scope, registration.tool.name)
        current = self._entries.get(key)
        if current is not None:
            where = "globally" if key[0] is None else f"in scope {key[0]!r}"
            raise ToolConflictError(
                f"tool {key[1]!r} is already registered {where} by plugin {current.owner!r}"
            )
        self._entries[key] = registration

        def remove() -> None:
            # A stale remover must not take out a later registration of the name.
            if self._entries.get(key) is registration:
                del self._entries[key]

        return remove

    def get(self, name: str, scope: str | None) -> Tool[Any] | None:
        """The tool ``name`` as ``scope`` sees it: its own first, then the global one."""
        registration = self._entries.get((scope, name)) if scope is not None else None
        if registration is None:
            registration = self._entries.get((None, name))
        return registration.tool if registration is not None else None

    def visible(self, scope: str | None) -> dict[str, Tool[Any]]:
        """The tools ``scope`` sees, by name, sorted by name."""
        tools = {name: r.tool for (s, name), r in self._entries.items() if s is None}
        if scope is not None:
            tools.update({name: r.tool for (s, name), r in self._entries.items() if s == scope})
        return dict(sorted(tools.items()))


Shown = Callable[[str], ToolShown]
"""How a front end looks up the presentation of a call by its tool's name."""


def shown_in(registry: ToolRegistry | None, scope: str | None = None) -> Shown:
    """The presentation lookup of the tools ``scope`` (an agent id) sees in ``registry``;
    without a registry (a runtime without tools), every tool is shown as
    :data:`~tether.tools.presentation.DEFAULT_SHOWN`."""
    if registry is None:
        return lambda name: DEFAULT_SHOWN
    return lambda name: registry.shown(name, scope)


TOOLS = ServiceKey["ToolRegistry"]("tools")
"""``ctx.tools``: the caller's view of the tool registry."""


class ToolRegistry:
    """Tools by name and scope; the ``tools`` service.

    Every instance is bound to a context: the provider's own, or a caller's
    (see :meth:`for_caller`). All instances of one registry share its tools.
    """

    __slots__ = ("_catalog", "_ctx")

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._catalog = _Catalog()

    def for_caller(self, ctx: Context) -> ToolRegistry:
        """This registry as seen by ``ctx``: what it registers is owned by ``ctx``'s fiber."""
        view = object.__new__(ToolRegistry)
        view._ctx = ctx
        view._catalog = self._catalog
        return view

    # -- registration ----------------------------------------------------------

    async def register(
        self, tool: Tool[Any], *, scope: str | None = None
    ) -> Callable[[], Awaitable[None]]:
        """Register ``tool`` as an effect of the bound context's fiber.

        The tool is removed when that fiber unloads, or when the returned
        function is awaited (whichever comes first; the other does nothing).

        Raises:
            TypeError: ``tool`` is not a :class:`Tool`, or ``scope`` is not a str.
            ToolConflictError: a tool with its name is already registered in
                ``scope`` (globally when ``scope`` is ``None``).
            FiberInactiveError: the bound fiber is unloading or gone.
        """
        if not isinstance(tool, Tool):
            raise TypeError(f"register() takes a Tool, got {tool!r}")
        if not isinstance(scope, str | None):
            raise TypeError(f"a tool's scope is an agent id (str) or None, got {scope!r}")
        registration = _Registration(tool, scope, self._ctx.fiber.name)
        effect = await self._ctx.effect(
            lambda: self._catalog.add(registration), label=f"tool:{tool.name}"
        )
        return effect.dispose

    # -- reads -----------------------------------------------------------------

    def get(self, name: str, scope: str | None = None) -> Tool[Any] | None:
        """The tool ``name`` as ``scope`` sees it (its own first, then the global one)."""
        return self._catalog.get(name, scope)

    def shown(self, name: str, scope: str | None = None) -> ToolShown:
        """How calls of the tool ``name`` that ``scope`` sees are shown; a tool that is
        not registered (its plugin unloaded, a replayed session's old tool) is shown
        as :data:`~tether.tools.presentation.DEFAULT_SHOWN`."""
        tool = self._catalog.get(name, scope)
        return DEFAULT_SHOWN if tool is None else tool.shown

    def is_concurrency_safe(self, name: str, scope: str | None = None) -> bool:
        """True when the tool ``name`` that ``scope`` sees may run beside other safe tools.

        An unknown name is not safe: a call of it is planned to run alone.
        """
        tool = self._catalog.get(name, scope)
        return tool is not None and tool.concurrency_safe

    def specs(
        self, scope: str | None = None, only: Sequence[str] | None = None
    ) -> builtins.list[ToolSpec]:
        """What the model is told about the tools ``scope`` sees, sorted by name.

        ``only`` narrows them to the given names; a name that is not
        registered is left out (its plugin may be reloading).

        Raises:
            TypeError: ``only`` is a single string rather than a sequence of names.
        """
        return [tool.spec() for tool in self._visible(scope, only).values()]

    def list(
        self, scope: str | None = None, only: Sequence[str] | None = None
    ) -> builtins.list[Tool[Any]]:
        """The tools ``scope`` sees (global ones and its own), sorted by name.

        ``only`` narrows them as it does for :meth:`specs`.

        Raises:
            TypeError: ``only`` is a single string rather than a sequence of names.
        """
        return builtins.list(self._visible(scope, only).values())

    # -- execution -------------------------------------------------------------

    async def execute(
        self, call: ToolCallBlock, exec: ToolExec, *, only: Sequence[str] | None = None
    ) -> ToolResult:
        """Run one call through the pipeline (see :mod:`tether.tools.execute`).

        The call may use the tools its agent's scope sees (``exec.agent.id``;
        only global tools without an agent), narrowed to ``only`` when given:
        a tool the model was not offered does not run. Every problem with the
        call becomes an error result.

        Raises:
            asyncio.CancelledError: the awaiting task was cancelled.
        """
        return await run_call(self._ctx, self._schedule(call, exec, only))

    async def execute_all(
        self,
        calls: Sequence[ToolCallBlock],
        exec_for: Callable[[ToolCallBlock], ToolExec],
        *,
        only: Sequence[str] | None = None,
        on_start: Callable[[Sequence[ScheduledCall]], Awaitable[None]] | None = None,
    ) -> builtins.list[ToolResult]:
        """Run ``calls`` and return their results in the same order.

        ``exec_for`` is called once per call, in order, before any call runs;
        ``on_start`` is awaited with each batch's calls before the batch starts.
        Consecutive concurrency-safe calls run concurrently; every other call
        runs alone, after the calls before it finished and before the calls
        after it start. Tools are looked up when the calls are planned.

        Raises:
            asyncio.CancelledError: the awaiting task was cancelled; calls
                still running are cancelled and awaited first.
        """
        scheduled = [self._schedule(call, exec_for(call), only) for call in calls]
        return await run_calls(self._ctx, scheduled, on_start)

    def _schedule(
        self, call: ToolCallBlock, exec: ToolExec, only: Sequence[str] | None
    ) -> ScheduledCall:
        scope = exec.agent.id if exec.agent is not None else None
        return ScheduledCall(call, exec, self._visible(scope, only))

    def _visible(self, scope: str | None, only: Sequence[str] | None) -> dict[str, Tool[Any]]:
        tools = self._catalog.visible(scope)
        if only is None:
            return tools
        if isinstance(only, str):
            raise TypeError(f"only must be a sequence of tool names, not the string {only!r}")
        allowed = set(only)
        return {name: tool for name, tool in tools.items() if name in allowed}


name = "tools"


def apply(ctx: Context, config: None) -> None:
    """Provide ``ctx.tools``."""
    ctx.provide(TOOLS, ToolRegistry(ctx))
