"""A permission question put to the editor (``session/request_permission``).

The question asker of the front layer (:mod:`tether.front.asking`) decides
everything but the medium: grants, the timeout, the withdrawal on a cancel,
the logged "allow always". This module presents a question to the client:
the call as a pending ``tool_call`` with its preview (locations and diff),
and the options allow once, allow always (when the call offers it) and
reject. It fails closed: a client that errors, goes away, or answers
anything but an allow option rejects the call (a client that does not
implement the method, ``-32601``, rejects it quietly: that is an answer,
not a failure).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgspec

from tether.acp.permissions import ALLOW_ALWAYS, ALLOW_ONCE, options_for
from tether.acp.wire import (
    ContentToolCallContent,
    PermissionOption,
    SelectedRequestPermissionOutcome,
    TextContentBlock,
)
from tether.front.asking import Answer
from tether.front.hook_output import asked_by_text

if TYPE_CHECKING:
    from tether.acp.record import ClientLink, SessionRecord
    from tether.front.asking import Question

log = logging.getLogger(__name__)


METHOD_NOT_FOUND = -32601


async def present_to_client(link: ClientLink, record: SessionRecord, question: Question) -> Answer:
    """Ask ``link``'s client about ``question`` in session ``record``; its answer."""
    preview = question.preview
    always = question.always
    options = [
        PermissionOption(option_id=option_id, name=label, kind=option_kind)
        for option_id, label, option_kind in options_for(always)
    ]
    call = record.pending_call(question.invocation, preview)
    asked_by = asked_by_text(question.asked_by)
    if asked_by is not None:  # a rule or a hook asks whatever the mode: say which, and why
        said = ContentToolCallContent(content=TextContentBlock(text=f"({asked_by})"))
        call = msgspec.structs.replace(call, content=[said, *(call.content or ())])
    try:
        response = await link.request_permission(record.id, call, options)
    except Exception as error:
        if getattr(error, "code", None) == METHOD_NOT_FOUND:
            log.debug("session %s: the client does not answer permission requests", record.id)
        else:
            log.warning(
                "session %s: the permission request failed (%s); rejected", record.id, error
            )
        return Answer.REJECT
    outcome = response.outcome
    if not isinstance(outcome, SelectedRequestPermissionOutcome):
        return Answer.REJECT
    if outcome.option_id == ALLOW_ALWAYS and always.rules:
        return Answer.ALWAYS
    return Answer.ONCE if outcome.option_id == ALLOW_ONCE else Answer.REJECT
