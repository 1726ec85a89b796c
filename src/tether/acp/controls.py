"""What a client changes in an open session: its mode and options, a slash command, a message
steered into the running turn or queued after it.

Each is logged or delivered through the session's record
(:class:`~tether.acp.record.SessionRecord`): a mode or model change is a
``session/config`` append (the next tool call, the next model request obeys
it), a steered or queued message is stored before the request answers
(:meth:`~tether.agent.Agent.submit`). The protocol server calls these with a
record the bridge found open.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.acp.commands import run_command
from tether.acp.errors import BridgeClosedError, SessionIdleError
from tether.acp.options import (
    OPTION_IDS,
    SandboxShown,
    UnknownOptionError,
    check_budget,
    check_model,
    config_options,
    model_choices,
    parse_mode,
    parse_sandbox,
)
from tether.agent import AgentDisposedError
from tether.agent.types import AgentStatus, Target
from tether.session.budget import BUDGET_OPTIONS
from tether.session.settings import MODE_OPTION, MODEL_OPTION, SANDBOX_OPTION

if TYPE_CHECKING:
    from tether.acp.permissions import Mode
    from tether.acp.record import SessionRecord
    from tether.agent import UserMessage
    from tether.agent.commands import Command, CommandRegistry


def options(record: SessionRecord) -> list[dict[str, object]]:
    """``record``'s ``configOptions`` now (see :mod:`tether.acp.options`)."""
    sandbox = record.sandbox
    shown = None
    if sandbox is not None:
        chosen = record.settings.options
        shown = SandboxShown(sandbox.mode_for(chosen), sandbox.network_summary(chosen))
    return config_options(
        record.catalog,
        configured=record.configured_model,
        model=record.model,
        mode=record.mode,
        sandbox=shown,
        budgets={option: record.budget_value(option) for option in BUDGET_OPTIONS},
    )


def set_mode(record: SessionRecord, mode: Mode) -> None:
    """Switch ``record``'s session to ``mode`` (the next tool call obeys it); the change is
    logged and the client told (:func:`option_changed`)."""
    if record.set_mode(mode):
        option_changed(record, MODE_OPTION)


def set_option(record: SessionRecord, option: str, value: object) -> list[dict[str, object]]:
    """Set configuration option ``option`` of ``record``'s session; the options after.

    ``model`` and the budget options take effect at the next model request, ``mode``
    at the next tool call, ``sandbox`` at the next process started (a command, a
    hook, an MCP server); all are logged (``session/config``). A mode or sandbox
    change is also told as updates (:func:`option_changed`), for clients that show it
    apart from the options.

    Raises:
        UnknownOptionError: an unknown option or value.
    """
    if not isinstance(value, str):
        raise UnknownOptionError(f"option {option!r} takes a string value, got {value!r}")
    if option == MODE_OPTION:
        set_mode(record, parse_mode(value))
    elif option == MODEL_OPTION:
        choices = model_choices(record.catalog, record.configured_model, record.model)
        record.set_model(check_model(value, choices))
    elif option == SANDBOX_OPTION:
        if record.set_sandbox(parse_sandbox(value)):
            option_changed(record, SANDBOX_OPTION)
    elif option in BUDGET_OPTIONS:
        entry = record.catalog.get(record.model)
        priced = entry is not None and entry.prices is not None and entry.prices.currency == "USD"
        record.set_budget(option, check_budget(option, value, priced))
    else:
        known = ", ".join(repr(each) for each in OPTION_IDS)
        raise UnknownOptionError(f"unknown config option {option!r}; the options are {known}")
    return options(record)


def option_changed(record: SessionRecord, option: str) -> None:
    """Tell the client that ``option`` of ``record`` changed: ``current_mode_update``
    for the mode, then ``config_option_update`` with every option."""
    if option == MODE_OPTION:
        mode = record.mode.value
        record.send({"sessionUpdate": "current_mode_update", "currentModeId": mode})
    record.send({"sessionUpdate": "config_option_update", "configOptions": options(record)})


def command_for(
    registry: CommandRegistry | None, message: UserMessage
) -> tuple[Command, str] | None:
    """The registered command ``message`` runs, with its argument, if it names one
    (:func:`tether.front.prompting.command_for`: as in the chat and the web page)."""
    from tether.front.prompting import command_for as named

    if len(message.content) != 1:
        return None
    return named(registry, message.plain_text)


async def run_in(record: SessionRecord, command: Command, argument: str) -> None:
    """Run ``command`` in ``record``'s session; its answer goes to the client.

    Raises:
        CommandError, BridgeError.
    """
    answer = await run_command(command, record, argument)
    if answer:
        text = {"type": "text", "text": answer}
        record.send({"sessionUpdate": "agent_message_chunk", "content": text})


async def steer(record: SessionRecord, message: UserMessage) -> None:
    """Deliver ``message`` to the running turn of ``record``'s session at its next step;
    return once it is stored (:meth:`~tether.agent.Agent.submit`).

    Raises:
        SessionIdleError: no turn runs and no prompt is in flight.
        BridgeClosedError: the agent is being disposed.
        NotStoredError (of the agent layer): it could not be stored; it never runs.
    """
    if record.agent.status is not AgentStatus.RUNNING and not record.answering:
        raise SessionIdleError(record.id)
    await _submit(record, message, Target.STEERING)


async def queue(record: SessionRecord, message: UserMessage) -> None:
    """Queue ``message`` as its own next turn of ``record``'s session; return once it is
    stored, without waiting for its turn (:meth:`~tether.agent.Agent.submit`).

    Raises:
        BridgeClosedError: the agent is being disposed.
        NotStoredError (of the agent layer): it could not be stored; it never runs.
    """
    await _submit(record, message, Target.QUEUED)


async def _submit(record: SessionRecord, message: UserMessage, target: Target) -> None:
    """``agent.submit``, a disposed agent being a closing bridge."""
    try:
        await record.agent.submit(message, target)
    except AgentDisposedError as exc:
        raise BridgeClosedError(str(exc)) from None
