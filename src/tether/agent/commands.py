"""Slash commands (``ctx.commands``): what a person can ask of a session besides a prompt.

A **command** is a name (``compact``, typed ``/compact``), a description, an
optional hint for its argument, and an async function run with the agent and
the text after the name. Frontends (the ACP bridge, a chat) offer the
registered commands and run one when a prompt starts with ``/<name>``; the
command's answer (a short text, or ``None``) is shown to the person, not to
the model. What a command changes that must last, it writes to the session
log itself (``/clear`` appends ``history/cleared``).

Any plugin adds commands::

    inject = ("commands",)

    async def apply(ctx, config):
        await ctx.service(COMMANDS).register(Command("compact", "Summarize the history", run))

A registration is an effect of the **registering plugin's fiber** (the
service is caller-bound): when that plugin unloads, its commands go. Names
are unique; a second registration of a name is a :class:`CommandConflictError`
naming the plugin that holds it.

Events:

* ``commands/changed (registry)`` — emit; after every registration and removal,
  so a frontend can tell its clients what is available now.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec

from tether.agent.errors import AgentError
from tether.agent.types import Agent
from tether.runtime.keys import Notice, ServiceKey

if TYPE_CHECKING:
    from tether.runtime import Context

__all__ = [
    "COMMANDS",
    "COMMANDS_CHANGED",
    "Command",
    "CommandArgument",
    "CommandCall",
    "CommandConflictError",
    "CommandError",
    "CommandRegistry",
    "parse_command",
]

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


class CommandError(AgentError):
    """A command refused its input or could not run; the message says why, for the person."""


class CommandConflictError(CommandError):
    """A command of that name is already registered."""


class CommandCall(msgspec.Struct, frozen=True):
    """One run of a command: the agent it acts on and the text after its name."""

    agent: Agent
    argument: str


CommandFunction = Callable[[CommandCall], Awaitable[str | None]]
"""Runs a command; returns what to show the person (or ``None``); raises
:class:`CommandError` for input it refuses."""


class CommandArgument(msgspec.Struct, frozen=True):
    """One named argument a command declares (a server's prompt declares its own)."""

    name: str
    description: str | None = None
    required: bool = False


class Command(msgspec.Struct, frozen=True, eq=False):
    """A slash command.

    Raises:
        ValueError: ``name`` is not a lowercase letter followed by up to 31
            lowercase letters, digits, ``-`` or ``_``.
    """

    name: str
    description: str
    run: CommandFunction
    hint: str | None = None
    """What the argument is, shown while the person types it; ``None``: it takes none."""
    arguments: tuple[CommandArgument, ...] = ()
    """The named arguments it takes, for a front end that offers them one by one."""
    offered_to: Callable[[Agent], bool] | None = None
    """Whether a front end offers it in ``agent``'s session (``None``: in every one); a
    server's prompt is offered where that server lists it."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(
                f"invalid command name {self.name!r}: use a lowercase letter followed by up "
                "to 31 lowercase letters, digits, '-' or '_'"
            )


def parse_command(text: str) -> tuple[str, str] | None:
    """``(name, argument)`` when ``text`` is ``/name`` or ``/name argument``, else ``None``."""
    if not text.startswith("/"):
        return None
    head = text[1:].split(maxsplit=1)[0] if text[1:].strip() else ""
    if not _NAME.match(head) or not text[1:].startswith(head):
        return None
    return head, text[1 + len(head) :].strip()


COMMANDS_CHANGED = Notice["CommandRegistry"]("commands/changed")
"""Emit ``(registry)``: a command was registered or removed."""


class _Commands:
    """The registrations, shared by the registry and every caller-bound view."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[Command, str]] = {}


class CommandRegistry:
    """Commands by name; the ``commands`` service.

    Every instance is bound to a context: the provider's, or a caller's (see
    :meth:`for_caller`); all instances of one registry share its commands.
    """

    __slots__ = ("_ctx", "_shared")

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._shared = _Commands()

    def for_caller(self, ctx: Context) -> CommandRegistry:
        """This registry as ``ctx`` sees it: what it registers, ``ctx``'s fiber owns."""
        view = object.__new__(CommandRegistry)
        view._ctx = ctx
        view._shared = self._shared
        return view

    async def register(self, command: Command) -> Callable[[], Awaitable[None]]:
        """Register ``command`` until the bound context's fiber unloads.

        Returns the function that removes it earlier.

        Raises:
            CommandConflictError: its name is taken.
            FiberInactiveError: the bound fiber is unloading or gone.
        """
        entries = self._shared.entries
        owner = f"plugin {self._ctx.fiber.name!r}"

        def attach() -> Callable[[], None]:
            current = entries.get(command.name)
            if current is not None:
                raise CommandConflictError(
                    f"command /{command.name} is already registered by {current[1]}"
                )
            entries[command.name] = (command, owner)
            self._ctx.emit(COMMANDS_CHANGED, self)

            def detach() -> None:
                # A stale remover must not take out a later registration of the name.
                held = entries.get(command.name)
                if held is not None and held[0] is command:
                    del entries[command.name]
                    self._ctx.emit(COMMANDS_CHANGED, self)

            return detach

        effect = await self._ctx.effect(attach, label=f"command /{command.name}")
        return effect.dispose

    def get(self, name: str) -> Command | None:
        """The command ``name`` (without its slash), or ``None``."""
        entry = self._shared.entries.get(name)
        return None if entry is None else entry[0]

    def list(self) -> list[Command]:
        """The registered commands, sorted by name."""
        return [command for _, (command, _owner) in sorted(self._shared.entries.items())]


COMMANDS = ServiceKey[CommandRegistry]("commands")
"""``ctx.commands``: the caller's view of the command registry."""

name = "commands"


def apply(ctx: Context, config: None) -> None:
    """Provide ``ctx.commands``, empty."""
    ctx.provide(COMMANDS, CommandRegistry(ctx))
