"""What the prompt box offers, as JSON: the session's slash commands (``/``) and the
resources its MCP servers list (``@server:uri``).

Every text here comes from a plugin or a server: the page shows it as text, never
as HTML.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tether.agent.commands import Command
    from tether.front.prompting import ServerResources


def commands_json(commands: Sequence[Command]) -> list[dict[str, object]]:
    """``[{name, description, hint, arguments: [{name, description, required}]}]``."""
    return [
        {
            "name": command.name,
            "description": command.description,
            "hint": command.hint,
            "arguments": [
                {"name": a.name, "description": a.description, "required": a.required}
                for a in command.arguments
            ],
        }
        for command in commands
    ]


def resources_json(listed: Sequence[ServerResources]) -> list[dict[str, object]]:
    """``[{server, resources: [{uri, name, title, description, mime_type}], error}]``,
    ``error`` being ``null`` for a server that listed its resources."""
    return [
        {
            "server": server.server,
            "resources": [resource._asdict() for resource in server.resources],
            "error": server.error,
        }
        for server in listed
    ]
