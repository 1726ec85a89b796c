"""The notifications an agent sends, as typed keys (all ``emit``: listeners are synchronous).

Every event's first argument is the agent it is about — the public
:class:`~tether.agent.Agent`, never the loop's driver — so a scoped listener
(``agent.ctx.on``) hears only its own agent's.
"""

from __future__ import annotations

from tether.agent.types import Agent, AgentStatus, CancelCause, Target, UserMessage
from tether.runtime.keys import Gather, Notice, Parallel
from tether.session.receipt import StopParts

AGENT_CREATED = Notice[Agent]("agent/created")
"""``(agent)``: the agent was published (its session entered and announced)."""

AGENT_SETUP = Parallel[Agent]("agent/setup")
"""``(agent)``, parallel: the agent is built and its creator's ``setup`` has run, but
nothing is published yet. Listeners compose its scoped world (``agent.ctx``:
scoped tools, resources such as MCP servers) and are awaited together; one
that raises rolls the creation back, so a listener contains its own failures."""

AGENT_SESSION_START = Notice[Agent]("agent/session-start")
"""``(agent)``: right after ``agent/created``, before the driver starts."""

AGENT_STOPPING = Gather[StopParts, Agent]("agent/stopping")
"""``(agent)``, gather: the agent's teardown began. Its turn, if one runs, is
cancelled (``disposed``) and closes after this; the session is still live, so
a listener may still write to it. Listeners are awaited together before the
driver is; a failure is logged. A listener that stopped work of an idle agent
answers what it reached (:class:`~tether.session.StopParts`): the answers are
written as one ``tool/stopped`` between turns (:mod:`tether.loop.receipt`).
Work of a running agent goes on its turn's receipt (``agent/turn-aborting``)."""

AGENT_DISPOSED = Notice[Agent]("agent/disposed")
"""``(agent)``: the registry entry detached; the id is reusable from now."""

AGENT_STATUS = Notice[Agent, AgentStatus]("agent/status")
"""``(agent, status)``: on every change of ``status``."""

CANCEL_REQUESTED = Notice[Agent, CancelCause]("agent/cancel-requested")
"""``(agent, cause)``: once per effective cancel, before the inbox is cleared."""

AGENT_ERROR = Notice[Agent, str]("agent/error")
"""``(agent, error)``: a turn ended with an error."""

InboxNotice = Notice[Agent, tuple[UserMessage, ...], Target]

INBOX_INSERTED = InboxNotice("agent/inbox/inserted")
"""``(agent, messages, queue)``: input was accepted into ``queue``."""

INBOX_CLAIMED = InboxNotice("agent/inbox/claimed")
"""``(agent, messages, queue)``: a turn or step took input from ``queue``."""

INBOX_DISCARDED = InboxNotice("agent/inbox/discarded")
"""``(agent, messages, queue)``: a cancel dropped input from ``queue``."""
