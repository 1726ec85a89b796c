"""Asking the client whether a tool call may run (``session/request_permission``).

The question fails closed, and it always ends:

* a client that errors, goes away, or answers anything but an allow option
  rejects the call (a client that does not implement the method, ``-32601``,
  rejects it quietly: that is an answer, not a failure);
* a question left unanswered for ``answer_within`` seconds is a rejection;
* a cancel of the turn while the question is open withdraws it at once, and
  the call ends cancelled (the bridge does not report it as denied).

"Always allow" is logged in the session (``permission/granted``) for that
tool's later calls — or, for an edit, for every later edit — so a load or a
resume keeps it. The question shows the call's preview (locations and diff)
when the bridge has one for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from acp.schema import AllowedOutcome, PermissionOption

from tether.acp.permissions import (
    ALLOW_ALWAYS,
    ALLOW_ONCE,
    PermissionDecision,
    options_for,
)
from tether.tools.permission import granted, remembered_as

if TYPE_CHECKING:
    from tether.acp.record import ClientLink, SessionRecord
    from tether.tools.execute import ToolInvocation

log = logging.getLogger(__name__)


METHOD_NOT_FOUND = -32601


async def ask_client(
    link: ClientLink, record: SessionRecord, invocation: ToolInvocation, *, answer_within: float
) -> PermissionDecision:
    """Ask ``link``'s client about ``invocation`` in session ``record``; the decision
    (within ``answer_within`` seconds, or on the cancel of the call: see the module docs)."""
    tool = invocation.tool_name
    preview = record.previews.get(invocation.exec.call_id)
    if granted(record.always_allowed, tool, preview):
        return PermissionDecision.ALLOW
    remembered = remembered_as(tool, preview)
    kind = preview.kind if preview is not None else None
    options = [
        PermissionOption(option_id=option_id, name=label, kind=option_kind)
        for option_id, label, option_kind in options_for(kind, rememberable=remembered is not None)
    ]
    asking = asyncio.ensure_future(
        link.request_permission(record.id, record.pending_call(invocation, preview), options)
    )
    stopped = asyncio.ensure_future(invocation.exec.signal.wait())
    try:
        await asyncio.wait(
            {asking, stopped}, timeout=answer_within, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for waiter in (asking, stopped):
            waiter.cancel()
        await asyncio.gather(asking, stopped, return_exceptions=True)
    if asking.cancelled():
        if not stopped.cancelled() or invocation.exec.signal.cancelled:
            return PermissionDecision.REJECT
        log.warning(
            "session %s: the permission request for %s was not answered within %g s; rejected",
            record.id,
            tool,
            answer_within,
        )
        return PermissionDecision.REJECT
    if (error := asking.exception()) is not None:
        if getattr(error, "code", None) == METHOD_NOT_FOUND:
            log.debug("session %s: the client does not answer permission requests", record.id)
        else:
            log.warning(
                "session %s: the permission request failed (%s); rejected", record.id, error
            )
        return PermissionDecision.REJECT
    outcome = asking.result().outcome
    if not isinstance(outcome, AllowedOutcome):
        return PermissionDecision.REJECT
    if outcome.option_id == ALLOW_ALWAYS and remembered is not None:
        record.grant(remembered)
        return PermissionDecision.ALLOW
    if outcome.option_id == ALLOW_ONCE:
        return PermissionDecision.ALLOW
    return PermissionDecision.REJECT
