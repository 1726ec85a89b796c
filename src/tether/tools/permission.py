"""Asking a person before a tool runs: the decision, the event that asks, the modes.

A **policy** decides that a tool call needs approval; a **frontend** asks
someone. They meet at one event:

* ``permission/request`` — **serial**; args ``(agent, invocation)`` where
  ``invocation`` is the :class:`~tether.tools.execute.ToolInvocation` about to
  run. The first listener that returns a :class:`PermissionDecision` answers;
  a listener returns ``None`` for agents it does not serve. When nobody
  answers, the asking policy must **fail closed** (treat it as a rejection).

The frontends are the ACP bridge (:mod:`tether.acp.permissions`) and the web
app (:mod:`tether.web.questions`); both apply the session **mode**: in ``ask``
mode every tool call is put to the person first (except :data:`UNASKED_TOOLS`);
in ``auto`` mode none is — except a call whose preview says it needs approval
whatever the mode (a file outside the workspace).
"""

from __future__ import annotations

import enum
from dataclasses import replace
from typing import TYPE_CHECKING

from tether.agent.types import Agent
from tether.runtime.errors import Veto
from tether.runtime.keys import Serial
from tether.tools.execute import ToolInvocation

if TYPE_CHECKING:
    from tether.runtime import Context


class PermissionDecision(enum.StrEnum):
    ALLOW = "allow"
    REJECT = "reject"


PERMISSION_REQUEST = Serial[PermissionDecision, Agent, ToolInvocation]("permission/request")
"""Serial event ``(agent, invocation) -> PermissionDecision | None`` (see the module docs)."""


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


async def approve(
    ctx: Context, agent: Agent, invocation: ToolInvocation, mode: Mode, approval: str | None
) -> ToolInvocation | None:
    """Apply ``mode`` to ``invocation`` (whose preview asked for ``approval``, if any):
    the invocation to run on — marked ``approved`` when it was asked and allowed, as it
    is when nothing needed asking — or ``None`` when the question was withdrawn by a
    cancel of the call (the pipeline then ends it as cancelled, not denied).

    Raises:
        Veto: the person (or, failing closed, nobody) did not allow the call.
    """
    if not needs_asking(mode, invocation.tool_name, approval):
        return invocation
    decision = await ctx.serial(PERMISSION_REQUEST, agent, invocation)
    if decision is not PermissionDecision.ALLOW:
        if invocation.exec.signal.cancelled:
            return None
        raise Veto(f"the user did not allow this {invocation.tool_name} call")
    return replace(invocation, exec=replace(invocation.exec, approved=True))
