"""Asking the person at the editor before a tool runs.

A **policy** decides that a tool call needs approval; a **frontend** asks
someone. They meet at one event:

* ``permission/request`` — **serial**; args ``(agent, invocation)`` where
  ``invocation`` is the :class:`~tether.tools.execute.ToolInvocation` about to
  run. The first listener that returns a :class:`PermissionDecision` answers;
  a listener returns ``None`` for agents it does not serve. When nobody
  answers, the asking policy must **fail closed** (treat it as a rejection).

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

import enum

from acp.schema import PermissionOptionKind

from tether.agent.types import Agent
from tether.runtime.keys import Serial
from tether.tools.execute import ToolInvocation


class PermissionDecision(enum.StrEnum):
    ALLOW = "allow"
    REJECT = "reject"


PERMISSION_REQUEST = Serial[PermissionDecision, Agent, ToolInvocation]("permission/request")
"""Serial event ``(agent, invocation) -> PermissionDecision | None`` (see the module docs)."""


class Mode(enum.StrEnum):
    """A session's permission mode (ACP ``session/set_mode``)."""

    ASK = "ask"
    """Ask the client before every tool call."""
    AUTO = "auto"
    """Run tool calls without asking."""


MODE_DESCRIPTIONS = {
    Mode.ASK: ("Ask", "Ask for permission before every tool call (shell commands included)."),
    Mode.AUTO: ("Auto", "Run tool calls without asking."),
}

UNASKED_TOOLS = frozenset({"todo"})
"""Tools that run without asking in ``ask`` mode: they change nothing outside the
session (``todo`` only updates the session's plan)."""

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

EDITS = "kind:edit"
"""What "allow always" remembers for an edit: every call whose preview is an edit."""


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
