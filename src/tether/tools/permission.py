"""The permission policy: the modes, what needs asking, and what "always allow" covers.

A **policy** decides that a tool call needs approval (:func:`needs_asking`);
a front end asks someone through the question asker of the front layer
(:mod:`tether.front.asking`, which also defines ``permission/request``).
In ``ask`` mode every tool call is put to the person first (except
:data:`UNASKED_TOOLS`); in ``auto`` mode none is — except a call whose
preview says it needs approval whatever the mode (a file outside the
workspace).

"Always allow" is logged in the session whose mode rules the call as
``permission/granted`` (:func:`grant`), for what :func:`remembered_as` says
the call stands for (the tool, or every edit), so a load or a resume keeps
it; a later call that a grant covers is allowed without asking
(:func:`granted`).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection

    from tether.session.log import Session
    from tether.tools.preview import ToolPreview


class Mode(enum.StrEnum):
    """A session's permission mode (ACP ``session/set_mode``, the web app's new session)."""

    ASK = "ask"
    """Ask before every tool call."""
    AUTO = "auto"
    """Run tool calls without asking."""


UNASKED_TOOLS = frozenset({"todo"})
"""Tools that run without asking in ``ask`` mode: they change nothing outside the
session (``todo`` only updates the session's plan)."""


def needs_asking(mode: Mode, tool_name: str, approval: str | None) -> bool:
    """Whether a call of ``tool_name`` is put to the person first: in ``ask`` mode
    unless the tool is unasked; in any mode when its preview needs ``approval``."""
    return approval is not None or (mode is Mode.ASK and tool_name not in UNASKED_TOOLS)


EDITS = "kind:edit"
"""What "allow always" remembers for an edit: every call whose preview is an edit."""


def remembered_as(tool: str, preview: ToolPreview | None) -> str | None:
    """What "allow always" covers for a call of ``tool`` (with ``preview``, if any):
    every edit, the tool, or — for a call that needs approval whatever the mode —
    nothing (it is asked every time)."""
    if preview is not None and preview.approval is not None:
        return None
    if preview is not None and preview.kind == "edit":
        return EDITS
    return tool


def granted(grants: Collection[str], tool: str, preview: ToolPreview | None) -> bool:
    """Whether ``grants`` (a session's ``permission/granted`` tools) cover the call."""
    remembered = remembered_as(tool, preview)
    return remembered is not None and remembered in grants


def grant(session: Session, grants: Collection[str], remembered: str) -> None:
    """Log in ``session`` (whose grants are ``grants``) that calls ``remembered``
    covers run without asking from now on; nothing when it is granted already."""
    from tether.session.settings import PermissionGranted

    if remembered not in grants:
        session.append(PermissionGranted(tool=remembered))
