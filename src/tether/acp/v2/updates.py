"""Session updates in their protocol version 2 shape.

The bridge maps a session's events to updates once (:mod:`tether.acp.updates`);
a version 2 client gets each of them reshaped here, so both versions show the
same session the same way:

=============================  ====================================================
version 1                      version 2
=============================  ====================================================
``*_message_chunk``,           the same (every chunk carries its message's
``agent_thought_chunk``        ``messageId``: an upsert of that message)
``tool_call``                  ``tool_call_update`` (version 2 merged the two: the
                               first update of an id creates the call)
``tool_call_update``           the same; ``diff`` content is a list of ``changes``
                               with the edit as a ``git_patch`` of absolute paths
``plan``                       ``plan_update`` of the session's one plan (id ``plan``)
``available_commands_update``  the same, each command tagged ``type: command`` (and
                               its input ``type: text``)
``config_option_update``       the same, each option's ``id`` as ``configId``
``current_mode_update``        nothing: the mode is the ``mode`` config option, and
                               its ``config_option_update`` follows
``session_info_update``,       the same
``usage_update``,
``state_update``
=============================  ====================================================

Anything else (``notice`` and ``compaction_update``, which a version 2 client is
never offered) is left out and logged: version 2 has no such update.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping, Sequence
from typing import cast

from tether.acp.updates import SessionUpdate

log = logging.getLogger(__name__)

PLAN_ID = "plan"
"""The id of a session's plan: tether keeps one plan per session, replaced whole."""

_SAME = frozenset(
    {
        "agent_message_chunk",
        "agent_thought_chunk",
        "user_message_chunk",
        "session_info_update",
        "usage_update",
        "state_update",  # version 2's own (the server sends it, see tether.acp.v2.server)
    }
)


def to_v2(update: SessionUpdate) -> SessionUpdate | None:
    """``update`` (version 1) as version 2 shows it; ``None`` when version 2 shows
    nothing for it (see the module's table)."""
    kind = update.get("sessionUpdate")
    if kind in _SAME:
        return update
    if kind in ("tool_call", "tool_call_update"):
        reshaped: SessionUpdate = {**update, "sessionUpdate": "tool_call_update"}
        content = update.get("content")
        if isinstance(content, list):
            reshaped["content"] = [_tool_content(item) for item in content]
        return reshaped
    if kind == "plan":
        plan = {"type": "items", "planId": PLAN_ID, "entries": update.get("entries", [])}
        return {"sessionUpdate": "plan_update", "plan": plan}
    if kind == "available_commands_update":
        commands = cast(Sequence[Mapping[str, object]], update.get("availableCommands", []))
        return {"sessionUpdate": kind, "availableCommands": available_commands(commands)}
    if kind == "config_option_update":
        options = cast(Sequence[Mapping[str, object]], update.get("configOptions", []))
        return {"sessionUpdate": kind, "configOptions": config_options(options)}
    if kind == "current_mode_update":
        return None
    log.warning("a %r update has no version 2 form: not sent", kind)
    return None


def config_options(options: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """Version 1 ``configOptions`` as version 2's (``id`` is ``configId``)."""
    reshaped = []
    for option in options:
        fields = {key: value for key, value in option.items() if key != "id"}
        reshaped.append({"configId": option["id"], **fields})
    return reshaped


def available_commands(commands: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """Version 1 ``availableCommands`` as version 2's: each tagged ``type: command``, its
    input (version 1's unstructured ``{hint}``) tagged ``type: text``."""
    reshaped = []
    for command in commands:
        entry: dict[str, object] = {"type": "command", **command}
        hint = command.get("input")
        if isinstance(hint, Mapping):
            entry["input"] = {"type": "text", **hint}
        reshaped.append(entry)
    return reshaped


def _tool_content(item: object) -> object:
    """One item of a tool call's content as version 2 shows it: a ``diff`` as
    ``changes`` and a ``git`` patch; the rest as it is."""
    if not isinstance(item, dict) or item.get("type") != "diff":
        return item
    path = str(item["path"])
    old = item.get("oldText")
    new = str(item.get("newText", ""))
    operation = "add" if old is None else "modify"
    return {
        "type": "diff",
        "changes": [{"operation": operation, "path": path}],
        "patch": {
            "format": "git_patch",
            "text": git_patch(path, None if old is None else str(old), new),
        },
    }


def git_patch(path: str, old: str | None, new: str) -> str:
    """The change of ``path`` from ``old`` (``None``: the file is new) to ``new`` as a
    ``diff --git`` section with absolute paths and no ``a/``/``b/`` prefixes, as the
    version 2 ``git`` patch format prescribes."""
    header = [f"diff --git {path} {path}\n"]
    if old is None:
        header.append("new file mode 100644\n")
    before = [] if old is None else old.splitlines(keepends=True)
    after = new.splitlines(keepends=True)
    lines = difflib.unified_diff(
        before, after, fromfile="/dev/null" if old is None else path, tofile=path
    )
    body = [
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    ]
    return "".join(header + body)
