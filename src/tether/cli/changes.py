"""``/diff`` in chat: what the agent changed in this session.

When the session's workspace has snapshots (the ``rewind`` plugin), ``/diff
[TURN]`` is the unified diff from the snapshot at the start of TURN (default:
the first) to the disk now (:func:`workspace_changes`): it sees what shell
commands and background tasks changed too, and names the files changed
outside the agent. Without snapshots it falls back to the log
(:func:`session_changes`): each file-tool call that changed a file and
succeeded (as its tool declares it:
:attr:`~tether.tools.presentation.ToolShown.change`), in the order it ran,
under the file's path, as the work view showed it; changes made by shell
commands are not seen then.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tether.cli.work import DIFF_STYLES, call_diff
from tether.front.rewind import Workspaces
from tether.front.rewind_commands import changes_notes, diff_request
from tether.frozen import thaw
from tether.rewind.plan import turn_points
from tether.session import ToolCallEvent, ToolResultEvent

if TYPE_CHECKING:
    from tether.cli.surface import Style
    from tether.session import Session
    from tether.tools.registry import Shown

__all__ = ["has_snapshots", "session_changes", "workspace_changes"]

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


def has_snapshots(session: Session) -> bool:
    """Whether a turn of ``session`` has a workspace snapshot."""
    return any(p.snapshot is not None for p in turn_points(session.events))


async def workspace_changes(
    workspaces: Workspaces, session: Session, argument: str
) -> list[tuple[str, Style]]:
    """The lines ``/diff [TURN]`` shows from the snapshots: notes, then the diff, coloured.

    Raises:
        CommandError: a bad turn, no snapshot, or git failed.
    """
    changes = await diff_request(workspaces, session, argument)
    lines: list[tuple[str, Style]] = [(note, "dim") for note in changes_notes(changes)]
    for line in changes.patch.splitlines():
        style: Style = "tool" if line.startswith("diff ") else DIFF_STYLES.get(line[:1], "output")
        lines.append((line, style))
    return lines
