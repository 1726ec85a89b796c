"""A server's request for input put to the editor (``elicitation/create``).

The elicitation asker of the front layer (:mod:`tether.front.eliciting`)
decides the timeout and the withdrawal; this module presents the question
to the client, in the session it is asked in, tied to the tool call it
belongs to when the client can see that call (a call of the session's own
agent).

A client that did not advertise ``elicitation`` for the question's mode
(``clientCapabilities.elicitation.form`` / ``.url``) is not asked: the
server's question is **declined**, and the reason logged with the answer
(a permission question could not carry a form, and sending the person to a
URL the editor does not show would leave them with nothing to answer). A
client that errors or goes away cancels it (one that does not implement the
method, ``-32601``, declines it); an action other than ``accept``,
``decline`` or ``cancel`` is a ``cancel``. What an accepted form holds is
checked against its schema before it is sent to the server
(:func:`tether.agent.elicitation.put`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

import msgspec

from tether.acp.wire import CreateElicitationRequest, ElicitationSchema
from tether.agent.elicitation import Action, Elicited, Value

if TYPE_CHECKING:
    from tether.acp.record import ClientLink
    from tether.front.eliciting import ElicitationQuestion

log = logging.getLogger(__name__)

METHOD_NOT_FOUND = -32601


async def elicit_from_client(
    link: ClientLink, session_id: str, question: ElicitationQuestion
) -> Elicited:
    """Ask ``link``'s client ``question`` in session ``session_id``; its answer."""
    elicitation = question.elicitation
    features = link.features
    able = features.elicitation_url if elicitation.mode == "url" else features.elicitation_form
    if not able:
        return Elicited(
            Action.DECLINE,
            reason=f"the editor does not answer {elicitation.mode} elicitations",
        )
    own_call = question.agent is question.governing
    request = CreateElicitationRequest(
        message=elicitation.message,
        mode=elicitation.mode,
        session_id=session_id,
        tool_call_id=elicitation.call_id if own_call else None,
        requested_schema=(
            msgspec.convert(dict(elicitation.schema), ElicitationSchema)
            if elicitation.mode == "form"
            else None
        ),
        url=elicitation.url,
        elicitation_id=elicitation.elicitation_id,
    )
    try:
        response = await link.create_elicitation(request)
    except Exception as error:
        if getattr(error, "code", None) == METHOD_NOT_FOUND:
            return Elicited(Action.DECLINE, reason="the editor does not answer elicitations")
        log.warning("session %s: the elicitation request failed (%s)", session_id, error)
        return Elicited(Action.CANCEL, reason=f"the editor failed to answer: {error}")
    try:
        action = Action(str(response.action))
    except ValueError:
        return Elicited(Action.CANCEL, reason=f"the editor answered {response.action!r}")
    content = response.content if action is Action.ACCEPT else None
    # What the form holds is checked against its schema by put(), for every front end.
    return Elicited(action, cast("Mapping[str, Value] | None", content))
