"""A server's request for input (an elicitation), put to a person the same way everywhere.

An MCP server may ask the person something during a tool call (see
:mod:`tether.agent.elicitation`, which logs the question and its answer).
This module is the front layer's side, shared by the editor, the web page
and the terminal, as :mod:`tether.front.asking` is for permission questions:
the front end only *presents* the question (:data:`PresentElicitation`);
everything else is decided here, once:

* **it always ends** — unanswered for ``within`` seconds (the front end's
  question timeout, or the ``mcp`` plugin's ``elicitation_timeout_ms`` if
  shorter) it is answered ``cancel``; withdrawn while open (the call it
  belongs to was cancelled, the server went away) it is answered ``cancel``
  at once and the presentation is cancelled; a presentation that fails is a
  ``cancel`` too (the reason is logged with the answer);
* **it is asked where its session is governed** — a child agent's server
  asks in its root's session (:meth:`SessionHost.governing
  <tether.front.host.SessionHost.governing>`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tether.agent.elicitation import Action, Elicitation, Elicited

if TYPE_CHECKING:
    from tether.agent.types import Agent

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class ElicitationQuestion:
    """An elicitation put to a person: whose server asks, and where it is asked."""

    agent: Agent
    """The agent whose server asks."""
    governing: Agent
    """The agent whose session is asked (a child's root; else ``agent``)."""
    elicitation: Elicitation


PresentElicitation = Callable[[ElicitationQuestion], Awaitable[Elicited]]
"""A front end's way of putting an :class:`ElicitationQuestion` to a person; cancelled
when the question is withdrawn or times out.

Raises: anything, when the person cannot be reached (it is then answered ``cancel``).
"""


async def ask_elicitation(
    question: ElicitationQuestion, present: PresentElicitation, *, within: float | None
) -> Elicited:
    """``question`` answered through ``present`` (see the module docs for the timeout
    and the withdrawal); never raises but for the caller's own cancellation."""
    elicitation = question.elicitation
    limit = _sooner(within, elicitation.within)
    signal = elicitation.signal
    asking = asyncio.ensure_future(present(question))
    withdrawn = asyncio.ensure_future(signal.wait())
    try:
        await asyncio.wait({asking, withdrawn}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in (asking, withdrawn):
            waiter.cancel()
        await asyncio.gather(asking, withdrawn, return_exceptions=True)
    if asking.cancelled():
        if signal.cancelled:
            return Elicited(Action.CANCEL, reason=f"withdrawn: {signal.reason}")
        return Elicited(Action.CANCEL, reason=f"not answered within {limit:g} s")
    failure = asking.exception()
    if failure is not None:
        log.warning(
            "session %s: the question of %s could not be asked: %s",
            question.governing.id,
            elicitation.server,
            failure,
        )
        return Elicited(Action.CANCEL, reason=f"it could not be asked: {failure}")
    return asking.result()


def _sooner(first: float | None, second: float | None) -> float | None:
    if first is None:
        return second
    return first if second is None else min(first, second)
