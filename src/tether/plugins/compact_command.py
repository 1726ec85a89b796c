"""``/compact``: compact a session's conversation by hand, from any frontend with slash commands.

The agent loop's compaction (:mod:`tether.loop.compaction`) summarizes the
older turns into a ``context/compacted`` event; this plugin offers it as a
slash command (:mod:`tether.agent.commands`), so an editor lists it beside
``/clear`` and ``/model``. The session must be idle; the answer says what was
summarized, or why nothing was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.agent.commands import COMMANDS, Command, CommandCall, CommandError

if TYPE_CHECKING:
    from tether.runtime import Context

name = "compact_command"
inject = ("commands",)


def compact_command(ctx: Context) -> Command:
    """The ``/compact`` command, using the agent loop's compaction service of ``ctx``."""

    async def run(call: CommandCall) -> str:
        from tether.loop.compaction import COMPACTION, CompactionCancelledError, CompactionError

        compaction = ctx.get(COMPACTION)
        if compaction is None:
            raise CommandError("compaction is not available: no agent loop is mounted")
        try:
            compacted = await compaction.compact(call.agent)
        except CompactionCancelledError:
            return "compaction cancelled; nothing changed"
        except CompactionError as exc:
            raise CommandError(str(exc)) from None
        if compacted is None:
            return "nothing to compact yet"
        return (
            f"compacted events {compacted.first_seq} to {compacted.last_seq} into a summary "
            f"(about {compacted.tokens_before} tokens before)"
        )

    return Command("compact", "Summarize the older turns to free the context window", run)


async def apply(ctx: Context, config: None) -> None:
    await ctx.service(COMMANDS).register(compact_command(ctx))
