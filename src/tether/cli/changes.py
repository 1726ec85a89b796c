"""``/diff`` in chat: what the agent's file tools changed in this session.

Each call that changed a file and succeeded (its tool declares the change it
makes: :attr:`~tether.tools.presentation.ToolShown.change`) is shown in the
order it ran, under the file's path, as the work view showed it: a coloured
diff whose hunk headers give the lines of the file. Changes made by shell
commands are not seen: only the log's file-tool calls are read, never the disk
or a version-control system.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tether.cli.work import call_diff
from tether.frozen import thaw
from tether.session import ToolCallEvent, ToolResultEvent

if TYPE_CHECKING:
    from tether.cli.surface import Style
    from tether.session import Session
    from tether.tools.registry import Shown

__all__ = ["session_changes"]

NO_CHANGES = "(no file was changed by the agent's file tools in this session)"


def session_changes(session: Session, shown: Shown) -> list[tuple[str, Style]]:
    """The lines ``/diff`` shows for ``session``: each successful file change, in order,
    under its path; one line saying so when there is none."""
    calls: dict[str, ToolCallEvent] = {}
    lines: list[tuple[str, Style]] = []
    cwd = session.header.cwd
    for event in session.events:
        payload = event.payload
        if isinstance(payload, ToolCallEvent) and shown(payload.name).change is not None:
            calls[payload.id] = payload
        elif isinstance(payload, ToolResultEvent) and not payload.is_error:
            call = calls.pop(payload.id, None)
            if call is not None:
                lines += _change(call, shown, cwd)
    return lines or [(NO_CHANGES, "dim")]


def _change(call: ToolCallEvent, shown: Shown, cwd: str | None) -> list[tuple[str, Style]]:
    arguments = thaw(call.arguments)
    args: Mapping[str, object] = arguments if isinstance(arguments, dict) else {}
    declared = shown(call.name)
    locations = declared.locations(args, cwd)
    path = locations[0].path if locations else None
    diff = call_diff(declared, args, path)
    if not diff:
        return []
    return [(f"● {call.name} {path or '?'}", "tool"), *diff]
