"""A test plugin: ``/shout TEXT`` answers TEXT in capitals (a plugin-contributed command)."""

from tether.agent.commands import COMMANDS, Command, CommandCall
from tether.runtime import Context

name = "shout_command"
inject = ("commands",)


async def shout(call: CommandCall) -> str:
    return call.argument.upper()


async def apply(ctx: Context, config: None) -> None:
    await ctx.service(COMMANDS).register(Command("shout", "Say it louder", shout, hint="TEXT"))
