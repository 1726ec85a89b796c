"""The slash command registry: registrations owned by the registering plugin, unique names."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tether.agent import commands as commands_plugin
from tether.agent.commands import (
    COMMANDS,
    COMMANDS_CHANGED,
    Command,
    CommandCall,
    CommandConflictError,
    CommandRegistry,
    parse_command,
)
from tether.runtime import Context, PluginStartError, Runtime


async def _answer(call: CommandCall) -> str:
    return call.argument


@dataclass
class Contributor:
    """A plugin that adds one command when it loads."""

    command: str
    name: str = "contributor"
    inject: tuple[str, ...] = ("commands",)

    async def apply(self, ctx: Context, config: None) -> None:
        await ctx.service(COMMANDS).register(Command(self.command, "A command.", _answer))


async def test_a_plugins_commands_go_when_it_unloads_and_listeners_hear_each_change() -> None:
    async with Runtime() as runtime:
        await runtime.ctx.plugin(commands_plugin)
        registry = runtime.ctx.get(COMMANDS)
        assert isinstance(registry, CommandRegistry)
        changes: list[list[str]] = []
        runtime.ctx.on(COMMANDS_CHANGED, lambda r: changes.append([c.name for c in r.list()]))

        first = await runtime.ctx.plugin(Contributor("compact"))
        await runtime.ctx.plugin(Contributor("review", name="second"))
        assert [command.name for command in registry.list()] == ["compact", "review"]
        await first.dispose()

        assert [command.name for command in registry.list()] == ["review"]
        assert changes == [["compact"], ["compact", "review"], ["review"]]


async def test_a_taken_name_is_refused_naming_the_plugin_that_holds_it() -> None:
    async with Runtime() as runtime:
        await runtime.ctx.plugin(commands_plugin)
        await runtime.ctx.plugin(Contributor("compact"))
        with pytest.raises(PluginStartError) as refused:
            await runtime.ctx.plugin(Contributor("compact", name="second"))
        cause = refused.value.__cause__
        assert isinstance(cause, CommandConflictError) and "'contributor'" in str(cause)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("/clear", ("clear", "")),
        ("/model  deepseek:deepseek-chat ", ("model", "deepseek:deepseek-chat")),
        ("/shout two\nlines", ("shout", "two\nlines")),
        ("hello /clear", None),
        ("/", None),
        ("/ clear", None),
        ("/Clear", None),
    ],
)
def test_a_prompt_names_a_command_only_when_it_starts_with_one(
    text: str, parsed: tuple[str, str] | None
) -> None:
    assert parse_command(text) == parsed


def test_command_names_are_checked() -> None:
    with pytest.raises(ValueError, match="invalid command name"):
        Command("Bad Name", "x", _answer)
