"""What a user hook is told of a tool, and what it said: its exit code and stdout read by
Claude Code's documented rules.

* exit code 2 — a block, with the hook's stderr as the reason;
* exit code 0 — success; its stdout may be JSON (``decision``, ``reason``,
  ``continue``, ``stopReason``, ``hookSpecificOutput``) or, for the events
  that take context (:data:`PLAIN_CONTEXT`), plain text added as context;
* any other exit code, or JSON that cannot be read — a failed hook, logged
  in one line and otherwise ignored (``None``).

What a block *means* is the event's business (:mod:`tether.front.hooks`): a
denied tool call, a blocked prompt, or, for ``Stop``, a turn that goes on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = [
    "HOOK_ASKS",
    "PLAIN_CONTEXT",
    "STOP_EVENTS",
    "TOOL_NAMES",
    "Verdict",
    "asked_by_text",
    "hook_asks",
    "read_verdict",
    "shown_name",
]

log = logging.getLogger(__name__)

PLAIN_CONTEXT = frozenset({"UserPromptSubmit", "SessionStart"})
"""The events whose hooks may print plain text (not JSON) as context for the model."""
STOP_EVENTS = frozenset({"Stop", "SubagentStop"})
"""The events whose block keeps the agent going (``continue: false`` then does not)."""
NO_REASON = "(the hook gave no reason)"

HOOK_ASKS = "hook "
"""How a hook's entry of :attr:`ToolExec.asked_by <tether.tools.ToolExec.asked_by>`
begins (a permission rule's is the rule's text): ``hook 'COMMAND': REASON``."""


def hook_asks(asker: str) -> bool:
    """Whether ``asker`` (an entry of ``asked_by``) names a hook rather than a rule."""
    return asker.startswith(HOOK_ASKS)


def asked_by_text(asked_by: tuple[str, ...]) -> str | None:
    """Who asks about a call whatever the mode, as every front end words it: the
    permission rules, and each hook with its reason; ``None`` when nothing does.

    ``asked_by`` is :attr:`ToolExec.asked_by <tether.tools.ToolExec.asked_by>`.
    """
    hooks = [asker for asker in asked_by if hook_asks(asker)]
    rules = [asker for asker in asked_by if not hook_asks(asker)]
    said = [f"a permission rule asks: {', '.join(rules)}"] if rules else []
    said += [f"asked by the PreToolUse {asker}" for asker in hooks]
    return "; ".join(said) or None


TOOL_NAMES: Mapping[str, str] = {
    "bash": "Bash",
    "read": "Read",
    "write": "Write",
    "edit": "Edit",
    "glob": "Glob",
    "grep": "Grep",
    "todo": "TodoWrite",
    "task": "Task",
    "web_fetch": "WebFetch",
    "web_search": "WebSearch",
}
"""tether's tools under the names Claude Code gives its own: what a hook is told, and
what a matcher may name (a tool's own name matches too)."""


def shown_name(tool: str) -> str:
    """The name a hook is told for tether's ``tool``."""
    return TOOL_NAMES.get(tool, tool)


class Verdict(NamedTuple):
    """What one hook said."""

    command: str
    """The hook's command."""
    block: str | None = None
    """The reason it blocks what the event is about (for ``Stop``: why to go on)."""
    decision: str | None = None
    """``allow``, ``deny`` or ``ask`` (``PreToolUse``)."""
    updated_input: Mapping[str, object] | None = None
    context: str | None = None
    reason: str | None = None
    """``permissionDecisionReason`` of an ``allow`` or ``ask`` (``PreToolUse``)."""


def read_verdict(
    event: str, command: str, exit_code: int | None, stdout: str, stderr: str
) -> Verdict | None:
    """What the hook ``command`` of ``event`` said, having ended with ``exit_code``
    (``None``: it did not exit by itself) and printed ``stdout`` and ``stderr``;
    ``None``: nothing, or it failed (logged in one line)."""
    if exit_code == 2:
        return Verdict(command, block=stderr.strip() or NO_REASON)
    if exit_code != 0:
        lines = stderr.strip().splitlines()
        log.warning(
            "hook %r failed (exit %s): %s",
            command,
            exit_code,
            lines[-1] if lines else "no message",
        )
        return None
    text = stdout.strip()
    if not text:
        return None
    if not text.startswith("{"):
        return Verdict(command, context=text) if event in PLAIN_CONTEXT else None
    try:
        said = json.loads(text)
    except ValueError as exc:
        log.warning("hook %r printed JSON that cannot be read: %s", command, exc)
        return None
    if not isinstance(said, dict):
        return None
    return _from_json(event, command, said)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _from_json(event: str, command: str, said: dict[str, Any]) -> Verdict:
    """A :class:`Verdict` from a hook's JSON output (fields of the wrong type are ignored)."""
    specific = said.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    block: str | None = None
    decision: str | None = None
    if said.get("decision") == "block":
        block = _text(said.get("reason")) or NO_REASON
    elif said.get("decision") == "approve":
        decision = "allow"
    if said.get("continue") is False:
        # Claude Code's "stop everything": for a Stop hook, that is not going on.
        block = (
            None if event in STOP_EVENTS else _text(said.get("stopReason")) or block or NO_REASON
        )
    why = _text(specific.get("permissionDecisionReason"))
    permission = specific.get("permissionDecision")
    if event == "PreToolUse" and permission in ("allow", "deny", "ask"):
        decision = permission
        if permission == "deny":
            block = why or NO_REASON
    updated = specific.get("updatedInput")
    return Verdict(
        command,
        block=block,
        decision=decision,
        updated_input=updated if event == "PreToolUse" and isinstance(updated, dict) else None,
        context=_text(specific.get("additionalContext")),
        reason=why,
    )
