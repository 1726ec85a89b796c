"""A test plugin: ``/shout TEXT`` answers TEXT in capitals; ``/boom`` fails (a bug)."""

from tether.agent.commands import COMMANDS, Command, CommandCall
from tether.runtime import Context

name = "shout_command"
inject = ("commands",)


async def shout(call: CommandCall) -> str:
    return call.argument.upper()


async def boom(call: CommandCall) -> str:
    raise RuntimeError("kaboom")


async def apply(ctx: Context, config: None) -> None:
    commands = ctx.service(COMMANDS)
    await commands.register(Command("shout", "Say it louder", shout, hint="TEXT"))
    await commands.register(Command("boom", "Fail", boom))
