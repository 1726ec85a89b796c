"""Asking the person at the editor before a tool runs.

The decision, the ``permission/request`` event and the modes are shared with
every front end (:mod:`tether.tools.permission`, :mod:`tether.front.asking`);
this module holds what is ACP's own: the options offered and their labels.

The ACP bridge answers for its own sessions with ``session/request_permission``
(options: allow once, allow always, reject once). A client that answers
``cancelled``, fails, or goes away, and a turn cancelled while the question is
open, all count as a rejection. "Allow always" writes the permission rules
its option names (``Always allow Bash(git status:*)``, ``Always allow
Edit(src/**)``; see :mod:`tether.front.always`) into the session's allow
list; where it could write none, it is not offered and "allow" says why. The question
carries the call's preview: its locations, and for an edit the diff, so the
person approves exactly the change that will be applied.

The bridge also brings a policy of its own, the session **mode**: in ``ask``
mode every tool call is put to the client first; in ``auto`` mode none is —
except a call whose preview says it needs approval whatever the mode (a file
outside the workspace): that one is always asked, with no "allow always".
"""

from __future__ import annotations

from tether.acp.wire import PermissionOptionKind
from tether.front.always import Always
from tether.front.asking import PERMISSION_REQUEST, PermissionDecision
from tether.tools.permission import UNASKED_TOOLS, Mode

__all__ = [
    "ALLOW_ALWAYS",
    "ALLOW_ONCE",
    "MODE_DESCRIPTIONS",
    "OPTIONS",
    "PERMISSION_REQUEST",
    "REJECT_ONCE",
    "UNASKED_TOOLS",
    "Mode",
    "PermissionDecision",
    "options_for",
]


MODE_DESCRIPTIONS = {
    Mode.ASK: ("Ask", "Ask for permission before every tool call (shell commands included)."),
    Mode.AUTO: ("Auto", "Run tool calls without asking."),
}

ALLOW_ONCE = "allow-once"
ALLOW_ALWAYS = "allow-always"
REJECT_ONCE = "reject-once"

OPTIONS: tuple[tuple[str, str, PermissionOptionKind], ...] = (
    (ALLOW_ONCE, "Allow", "allow_once"),
    (ALLOW_ALWAYS, "Always allow", "allow_always"),
    (REJECT_ONCE, "Reject", "reject_once"),
)
"""The options offered with a request: ``(option id, label, ACP kind)``; the label of
"allow always" names the rules it writes."""


def options_for(always: Always) -> tuple[tuple[str, str, PermissionOptionKind], ...]:
    """The options of a request whose "always" is ``always``: "allow always" named by
    the rules it writes (``Always allow Bash(git status:*)``), or — when it writes
    none — left out, with "allow" saying why."""
    if always.rules:
        labels = {ALLOW_ALWAYS: always.label}
    else:
        labels = (
            {ALLOW_ONCE: f"Allow once (not always: {always.why_not})"} if always.why_not else {}
        )
    return tuple(
        (option_id, labels.get(option_id, label), option_kind)
        for option_id, label, option_kind in OPTIONS
        if option_id != ALLOW_ALWAYS or always.rules
    )
