"""Slash commands in the editor: ``available_commands_update`` and running ``/name`` prompts.

The commands are those of the ``commands`` registry
(:mod:`tether.agent.commands`), which any plugin adds to; the bridge
registers four of its own:

===========  ==============================================================
command      what it does
===========  ==============================================================
``/clear``   later requests start from an empty history: appends
             ``history/cleared`` (the earlier turns stay in the log and in a
             replay); refused while a turn runs
``/model``   without an argument, lists the models offered; ``/model M``
             switches the next request to ``M`` (as ``session/set_config_option``)
``/mode``    without an argument, shows the mode; ``/mode ask|auto`` switches
``/cost``    the tokens in context and the session's cost so far
``/rewind``  without an argument, lists the turns and which have a workspace
             snapshot; ``/rewind N [code|conversation|both] [force]`` takes
             the workspace (``code``), the conversation (a branch stored as a
             new session, to load) or both back to the start of turn N
``/diff``    ``/diff [N]``: what changed in the workspace since turn N
             started (default: the first), shell changes included
===========  ==============================================================

``/rewind`` and ``/diff`` run :mod:`tether.front.rewind_commands`, as the
chat does: a rewind that would overwrite a file changed outside the agent
since the snapshot refuses and names the files (``force`` overwrites them);
files no snapshot holds are listed, never touched. They are offered when
the ``rewind`` plugin is composed.

A prompt whose text is ``/name`` or ``/name argument``, for a registered
``name``, runs that command instead of a turn: its answer is sent as an
``agent_message_chunk``, and the prompt answers ``end_turn`` once whatever the
command logged is on disk. A command that refuses its input answers invalid
params with its reason. A prompt that names no registered command is an
ordinary prompt (the model reads it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from tether.acp.errors import BridgeError
from tether.acp.options import UnknownOptionError, check_model, model_choices, parse_mode
from tether.acp.updates import SessionUpdate
from tether.agent.commands import Command, CommandCall, CommandError, CommandRegistry
from tether.agent.types import AgentStatus
from tether.front.rewind_commands import (
    REWIND_USAGE,
    changes_notes,
    diff_request,
    rewind_request,
)
from tether.session.settings import MODE_OPTION, MODEL_OPTION, HistoryCleared

if TYPE_CHECKING:
    from tether.acp.record import SessionRecord
    from tether.agent import Agent
    from tether.front.rewind import Workspaces
    from tether.persist.service import Persistence

__all__ = ["available_commands", "builtin_commands", "rewind_commands", "run_command"]

T = TypeVar("T")


def available_commands(registry: CommandRegistry | None, agent: Agent | None) -> SessionUpdate:
    """The ``available_commands_update`` listing ``registry``'s commands offered in
    ``agent``'s session now (:func:`tether.front.prompting.offered_now`: a server's
    prompt where that server lists it; every command when ``agent`` is ``None``)."""
    from tether.front.prompting import offered_now

    if agent is None:
        offered = [] if registry is None else registry.list()
    else:
        offered = offered_now(agent, registry)
    commands: list[dict[str, object]] = []
    for command in offered:
        entry: dict[str, object] = {"name": command.name, "description": command.description}
        if command.hint is not None:
            entry["input"] = {"hint": command.hint}
        commands.append(entry)
    return {"sessionUpdate": "available_commands_update", "availableCommands": commands}


RecordOf = Callable[["Agent"], "SessionRecord | None"]
Changed = Callable[["SessionRecord", str], None]
"""Called after a command changed option ``option`` of a session (to tell the client)."""


def builtin_commands(record_of: RecordOf, changed: Changed) -> tuple[Command, ...]:
    """``/clear``, ``/model``, ``/mode``, ``/cost`` for the sessions ``record_of`` finds."""

    def session(call: CommandCall) -> SessionRecord:
        record = record_of(call.agent)
        if record is None:
            raise CommandError("this command works in editor sessions only")
        return record

    async def clear(call: CommandCall) -> str:
        record = session(call)
        if record.agent.status is AgentStatus.RUNNING:
            raise CommandError("a turn is running: wait for it to end, or cancel it, then /clear")
        record.agent.session.append(HistoryCleared())
        return (
            "The conversation is cleared: the next request starts from an empty history. "
            "Earlier turns stay in the session log."
        )

    async def model(call: CommandCall) -> str:
        record = session(call)
        choices = model_choices(record.catalog, record.configured_model, record.model)
        if not call.argument:
            listed = "\n".join(
                f"{'*' if choice == record.model else '-'} {choice}" for choice in choices
            )
            return f"Models (the current one starred):\n{listed}"
        chosen = _option(lambda: check_model(call.argument, choices))
        if record.set_model(chosen):
            changed(record, MODEL_OPTION)
        return f"The next request goes to {chosen}."

    async def mode(call: CommandCall) -> str:
        record = session(call)
        if not call.argument:
            return f"The mode is {record.mode.value}."
        chosen = _option(lambda: parse_mode(call.argument))
        if record.set_mode(chosen):
            changed(record, MODE_OPTION)
        return f"The mode is now {chosen.value}."

    async def cost(call: CommandCall) -> str:
        return session(call).meter.describe()

    return (
        Command("clear", "Start the next request from an empty history", clear),
        Command("model", "Show or switch the model of the next request", model, hint="model"),
        Command("mode", "Show or switch the permission mode (ask, auto)", mode, hint="ask|auto"),
        Command("cost", "Show the tokens in context and the session's cost", cost),
    )


def rewind_commands(
    workspaces: Workspaces, persistence: Callable[[], Persistence | None]
) -> tuple[Command, ...]:
    """``/rewind`` and ``/diff`` on the workspace snapshots of ``workspaces`` (branches
    stored through ``persistence``, looked up when one is made)."""

    async def rewind(call: CommandCall) -> str:
        done = await rewind_request(workspaces, persistence(), call.agent.session, call.argument)
        lines = done.lines
        if done.branch is not None:
            lines = [*lines, f"load session {done.branch} to go on in the branch"]
        return "\n".join(lines)

    async def diff(call: CommandCall) -> str:
        changes = await diff_request(workspaces, call.agent.session, call.argument)
        notes = "\n".join(changes_notes(changes))
        patch = changes.patch
        return notes + (f"\n```diff\n{patch}```" if patch else "")

    return (
        Command(
            "rewind",
            "List the turns, or take the workspace and/or conversation back to a turn's start",
            rewind,
            hint=REWIND_USAGE.removeprefix("/rewind "),
        ),
        Command("diff", "What changed in the workspace since a turn started", diff, hint="[TURN]"),
    )


def _option(choose: Callable[[], T]) -> T:
    try:
        return choose()
    except UnknownOptionError as exc:
        raise CommandError(str(exc)) from None


async def run_command(command: Command, record: SessionRecord, argument: str) -> str | None:
    """Run ``command`` in ``record``'s session; its answer for the person.

    Raises:
        CommandError: the command refused its input.
        BridgeError: it failed (the message names it).
    """
    from tether.front.prompting import CommandFailedError
    from tether.front.prompting import run_command as run

    try:
        return await run(command, record.agent, argument)
    except CommandFailedError as exc:
        raise BridgeError(f"/{command.name} {exc}") from exc
