"""Why a front end closes a session: the ``reason`` its ``SessionEnd`` hooks read.

The values are Claude Code's: ``prompt_input_exit`` (the person left the
prompt: chat's ``/exit``, ``/quit`` or end of input), ``clear`` (the
conversation starts again: chat's ``/new``; a ``/clear`` is told by the
``history/cleared`` event in the log instead, see :mod:`tether.front.hook_session`),
``logout`` (never given: tether has no log-in of its own) and ``other``
(everything else: ``tether run`` ending, an editor closing its session or going
away, a web session deleted, a host stopping or draining). A front end emits
:data:`SESSION_ENDING` just before it disposes the agent; a session closed
without one ends ``other``.
"""

from __future__ import annotations

from typing import Literal

from tether.agent.types import Agent
from tether.runtime.keys import Notice

SessionEndReason = Literal["clear", "logout", "prompt_input_exit", "other"]

SESSION_ENDING = Notice[Agent, SessionEndReason]("session/ending")
"""``(agent, reason)``: a front end is about to close ``agent``'s session, for ``reason``."""
