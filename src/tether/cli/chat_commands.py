"""The slash commands of ``tether chat``: its own, and those plugins register.

The chat's own commands are :data:`BUILTIN`; any other ``/name`` that a
plugin registered in the ``commands`` registry (:mod:`tether.agent.commands`)
runs that command, and its answer is shown. ``/help`` lists both, and Tab
completes both. A ``/word`` that names no command is refused with the list
(it never reaches the model).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from tether.agent.commands import CommandRegistry


class Builtin(NamedTuple):
    name: str
    hint: str | None
    description: str


BUILTIN = (
    Builtin("help", None, "list the commands and keys"),
    Builtin("steer", "TEXT", "deliver TEXT to the running turn at its next step"),
    Builtin("cancel", None, "cancel the running turn and what is queued (also Ctrl-C)"),
    Builtin("compact", None, "summarize the older part of the conversation now"),
    Builtin("output", "[N]", "show the whole output of tool result #N (default: the last)"),
    Builtin("thinking", "[on|off]", "show or hide the model's reasoning"),
    Builtin("cost", None, "tokens in context and the session's cost so far"),
    Builtin("model", "[MODEL]", "show the model, or switch the next request to MODEL"),
    Builtin("clear", None, "start the next request from an empty history (the log keeps all)"),
    Builtin("new", None, "start a new session in this chat"),
    Builtin(
        "diff",
        "[TURN]",
        "show what changed in the workspace since TURN started (default: the first)",
    ),
    Builtin(
        "rewind",
        "[TURN ...]",
        "list the turns, or go back to TURN's start: code, conversation or both (the "
        "default); force overwrites changes made outside the agent",
    ),
    Builtin("fork", "[TURN]", "go on in a branch of this session (before TURN, or from here)"),
    Builtin("sessions", None, "list the stored sessions"),
    Builtin("quit", None, "leave the chat (also /exit, Ctrl-D)"),
)
BUILTIN_NAMES = frozenset(b.name for b in BUILTIN) | {"exit"}

KEYS = (
    ("Enter", "send the line (queued while a turn runs)"),
    ("Ctrl-S", "send the line as steering for the running turn"),
    ("Alt-Enter", "new line (a paste keeps its newlines)"),
    ("Up / Down, Ctrl-R", "walk / search the history"),
    ("Tab", "complete a command or a path"),
    ("Ctrl-C", "cancel the running turn (else clear the line)"),
    ("Ctrl-D", "leave (on an empty line)"),
)


def offered(registry: CommandRegistry | None) -> list[tuple[str, str]]:
    """Every command the chat offers now: ``(name, description)``, its own first."""
    listed = [(b.name, b.description) for b in BUILTIN]
    for command in registry.list() if registry is not None else ():
        if command.name not in BUILTIN_NAMES:
            listed.append((command.name, command.description))
    return listed


def help_text(registry: CommandRegistry | None, *, keys: bool) -> str:
    """What ``/help`` shows: every command with its argument, and the keys (on a terminal)."""
    rows: list[tuple[str, str]] = [
        (f"/{b.name}" + (f" {b.hint}" if b.hint else ""), b.description) for b in BUILTIN
    ]
    for command in registry.list() if registry is not None else ():
        if command.name not in BUILTIN_NAMES:
            usage = f"/{command.name}" + (f" {command.hint}" if command.hint else "")
            rows.append((usage, command.description))
    rows.append(("!COMMAND", "run a shell command yourself; its output goes with your next prompt"))
    lines = ["commands:", *_table(rows)]
    if keys:
        lines += ["keys:", *_table(KEYS)]
    return "\n".join(lines)


def _table(rows: Iterable[tuple[str, str]]) -> list[str]:
    rows = list(rows)
    width = max(len(left) for left, _ in rows)
    return [f"  {left.ljust(width)}  {right}" for left, right in rows]
