"""The ``sandbox`` plugin: the policy every process started for an agent runs under.

Mount ``tether.plugins.sandbox`` (plugin name ``sandbox``); its config is
:class:`~tether.shell.sandbox.SandboxSettings` (``mode``, ``network``,
``writable_roots``, ``protected``, ``unreadable``, ``fallback``). It provides
``ctx.sandbox``; the bash tools, the MCP stdio servers and the file tools read
it when it is there. Its private temp dirs are removed when it unloads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.shell.confinement import landlock_abi, report_missing
from tether.shell.sandbox import SANDBOX, Sandbox, SandboxMode, SandboxSettings

if TYPE_CHECKING:
    from tether.runtime import Context

name = "sandbox"
provides = ("sandbox",)
Config = SandboxSettings


async def apply(ctx: Context, config: SandboxSettings) -> None:
    """Provide ``ctx.sandbox``; a kernel without Landlock is reported once, in one line."""
    sandbox = Sandbox(config)
    await ctx.effect(lambda: sandbox.close, label="remove sandbox temp dirs")
    if config.mode is not SandboxMode.FULL_ACCESS and landlock_abi() == 0:
        report_missing(config.fallback)
    ctx.provide(SANDBOX, sandbox)
