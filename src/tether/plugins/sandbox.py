"""The ``sandbox`` plugin: the policy every process started for an agent runs under.

Mount ``tether.plugins.sandbox`` (plugin name ``sandbox``); its config is
:class:`~tether.shell.sandbox.SandboxSettings` (``mode``, ``network``,
``allowed_hosts``, ``writable_roots``, ``protected``, ``unreadable``,
``fallback``). It provides ``ctx.sandbox``; the bash tools, the MCP stdio
servers and the file tools read it when it is there. Its private temp dirs are
removed, and its allow-list proxy stopped, when it unloads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.shell.sandbox import SANDBOX, Sandbox, SandboxSettings

if TYPE_CHECKING:
    from tether.runtime import Context

name = "sandbox"
provides = ("sandbox",)
Config = SandboxSettings


async def apply(ctx: Context, config: SandboxSettings) -> None:
    """Provide ``ctx.sandbox``. The kernel is asked for Landlock by the first confined
    spawn, not here (start-up stays free of it); a kernel without it is reported then,
    once, in one line."""
    sandbox = Sandbox(config)
    await ctx.effect(lambda: sandbox.aclose, label="stop the sandbox's proxy, remove its temp dirs")
    ctx.provide(SANDBOX, sandbox)
