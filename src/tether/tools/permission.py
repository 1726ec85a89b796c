"""The permission policy: the modes, and what needs asking.

A **policy** decides that a tool call needs approval (:func:`needs_asking`);
a front end asks someone through the question asker of the front layer
(:mod:`tether.front.asking`, which also defines ``permission/request``).
In ``ask`` mode every tool call is put to the person first (except
:data:`UNASKED_TOOLS`); in ``auto`` mode none is — except a call whose
preview says it needs approval whatever the mode (a file outside the
workspace).

"Always allow" writes a permission rule the session keeps
(:mod:`tether.front.always`): a later call it covers is allowed without
asking.
"""

from __future__ import annotations

import enum


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
