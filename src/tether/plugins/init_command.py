"""``/init``: ask the agent to write the project's AGENTS.md, from any frontend with slash commands.

The agent reads the repository with its own tools and writes (or improves)
``AGENTS.md`` at the root of the session's directory: the instructions file
tether — and the other harnesses that read AGENTS.md — give every later
session of the project (see docs/context.md). The command queues one prompt
saying so; the work is an ordinary turn, shown and stored like any other.
Anything after ``/init`` is added to the prompt (``/init focus on the tests``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tether.agent import UserMessage
from tether.agent.commands import COMMANDS, Command, CommandCall

if TYPE_CHECKING:
    from tether.runtime import Context

name = "init_command"
inject = ("commands",)

INSTRUCTIONS = "AGENTS.md"

PROMPT = """\
{verb} {path}: the instructions every later coding session in this project starts from.
Look at the repository first with your tools (its layout, build and package files, \
README, CI configuration, existing docs, a few representative source and test files), \
then write a short, specific file that says:
- what the project is, in two or three sentences;
- how to set it up, build it, run it, run its tests (one test too) and its linters, \
as exact commands;
- where things are: the main directories and what each holds;
- the conventions a change must follow (style, naming, tests, commits) that the \
repository shows or states;
- anything surprising a newcomer would get wrong.
Only what is true of this repository; no generic advice. {keep}"""


def init_prompt(cwd: Path, extra: str) -> str:
    """The prompt ``/init`` queues for a session working in ``cwd``."""
    path = cwd / INSTRUCTIONS
    exists = path.is_file()
    prompt = PROMPT.format(
        verb="Improve" if exists else "Write",
        path=INSTRUCTIONS,
        keep="Keep what the existing file says that is still true." if exists else "",
    ).rstrip()
    return f"{prompt}\n{extra.strip()}" if extra.strip() else prompt


async def init(call: CommandCall) -> str:
    cwd = Path(call.agent.session.header.cwd or ".")
    call.agent.followup(UserMessage.text(init_prompt(cwd, call.argument)))
    verb = "improve" if (cwd / INSTRUCTIONS).is_file() else "write"
    return f"Asked the agent to {verb} {cwd / INSTRUCTIONS}."


async def apply(ctx: Context, config: None) -> None:
    await ctx.service(COMMANDS).register(
        Command("init", "Have the agent write the project's AGENTS.md", init, hint="[focus]")
    )
