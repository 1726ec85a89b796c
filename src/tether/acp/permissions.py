"""Asking the person at the editor before a tool runs.

The decision, the ``permission/request`` event and the modes are shared with
every front end (:mod:`tether.tools.permission`, :mod:`tether.front.asking`);
this module holds what is ACP's own: the options offered and their labels.

The ACP bridge answers for its own sessions with ``session/request_permission``
(options: allow once, allow always, reject once). A client that answers
``cancelled``, fails, or goes away, and a turn cancelled while the question is
open, all count as a rejection. "Allow always" is remembered for that tool in
that session — for an edit (a call whose preview's kind is ``edit``: the
``write`` and ``edit`` tools), for every edit in that session. The question
carries the call's preview: its locations, and for an edit the diff, so the
person approves exactly the change that will be applied.

The bridge also brings a policy of its own, the session **mode**: in ``ask``
mode every tool call is put to the client first; in ``auto`` mode none is —
except a call whose preview says it needs approval whatever the mode (a file
outside the workspace): that one is always asked, with no "allow always".
"""

from __future__ import annotations

from tether.acp.wire import PermissionOptionKind
from tether.front.asking import PERMISSION_REQUEST, PermissionDecision
from tether.tools.permission import EDITS, UNASKED_TOOLS, Mode

__all__ = [
    "ALLOW_ALWAYS",
    "ALLOW_ONCE",
    "EDITS",
    "EDIT_ALWAYS_LABEL",
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
    (ALLOW_ALWAYS, "Always allow this tool in this session", "allow_always"),
    (REJECT_ONCE, "Reject", "reject_once"),
)
"""The options offered with a request: ``(option id, label, ACP kind)``."""

EDIT_ALWAYS_LABEL = "Always allow edits in this session"
"""The label of "allow always" when the call is an edit (it covers every edit)."""


def options_for(
    kind: str | None, *, rememberable: bool
) -> tuple[tuple[str, str, PermissionOptionKind], ...]:
    """The options of a request about a call of ``kind`` (its preview's, if any).

    Without ``rememberable`` there is no "allow always".
    """
    return tuple(
        (
            option_id,
            EDIT_ALWAYS_LABEL if option_id == ALLOW_ALWAYS and kind == "edit" else label,
            option_kind,
        )
        for option_id, label, option_kind in OPTIONS
        if option_id != ALLOW_ALWAYS or rememberable
    )
