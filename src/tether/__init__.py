"""tether: an agent harness with owned lifecycles and durable sessions.

The public API, for programs that embed agents::

    from tether import Tether, UserMessage

    async with Tether(data_dir=path) as tether:
        handle = await tether.agents.create(cwd=".")
        turn = handle.agent.followup(UserMessage.text("hello"))
        print((await turn.durable()).answer)   # ended, and on disk
        await handle.dispose()

Names are imported when first used, so ``import tether`` costs nothing at
start-up (the command line reads ``tether.__version__`` and little else).
See ``docs/library.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_EXPORTS = {
    # the host
    "Tether": "tether.host",
    # agents
    "Agent": "tether.agent.types",
    "AgentHandle": "tether.agent.types",
    "AgentOptions": "tether.agent.types",
    "Budget": "tether.session.budget",
    "AgentStatus": "tether.agent.types",
    "CancelCause": "tether.agent.types",
    "Target": "tether.agent.types",
    "UserMessage": "tether.agent.types",
    "AgentError": "tether.agent.errors",
    "AgentConflictError": "tether.agent.errors",
    "AgentCreateError": "tether.agent.errors",
    "AgentDisposedError": "tether.agent.errors",
    "NotStoredError": "tether.agent.errors",
    # what became of one message: claimed -> ended -> durable
    "TurnHandle": "tether.agent.turns",
    "TurnClaimed": "tether.agent.turns",
    "TurnEnded": "tether.agent.turns",
    "NeverRan": "tether.agent.turns",
    "TurnOutcome": "tether.agent.turns",
    # what an agent tells its observers (subscribe with agent.ctx.on)
    "AGENT_STATUS": "tether.agent.events",
    "CANCEL_REQUESTED": "tether.agent.events",
    "SESSION_EVENT": "tether.session.store",
    # sessions
    "Session": "tether.session.log",
    "SessionHeader": "tether.session.log",
    "Event": "tether.session.events",
    "AssistantMessageEvent": "tether.session.vocabulary",
    "ToolCallEvent": "tether.session.vocabulary",
    "ToolResultEvent": "tether.session.vocabulary",
    "TurnEnd": "tether.session.vocabulary",
    "UserMessageEvent": "tether.session.vocabulary",
    "derive_messages": "tether.session.derive",
    # the runtime, for plugins
    "Context": "tether.runtime.context",
    "Notice": "tether.runtime.keys",
    "Serial": "tether.runtime.keys",
    "Parallel": "tether.runtime.keys",
    "Waterfall": "tether.runtime.keys",
    "ServiceKey": "tether.runtime.keys",
}

__all__ = [
    "AGENT_STATUS",
    "CANCEL_REQUESTED",
    "SESSION_EVENT",
    "Agent",
    "AgentConflictError",
    "AgentCreateError",
    "AgentDisposedError",
    "AgentError",
    "AgentHandle",
    "AgentOptions",
    "AgentStatus",
    "AssistantMessageEvent",
    "Budget",
    "CancelCause",
    "Context",
    "Event",
    "NeverRan",
    "NotStoredError",
    "Notice",
    "Parallel",
    "Serial",
    "ServiceKey",
    "Session",
    "SessionHeader",
    "Target",
    "Tether",
    "ToolCallEvent",
    "ToolResultEvent",
    "TurnClaimed",
    "TurnEnd",
    "TurnEnded",
    "TurnHandle",
    "TurnOutcome",
    "UserMessage",
    "UserMessageEvent",
    "Waterfall",
    "__version__",
    "derive_messages",
]

if TYPE_CHECKING:
    from tether.agent.errors import (
        AgentConflictError,
        AgentCreateError,
        AgentDisposedError,
        AgentError,
        NotStoredError,
    )
    from tether.agent.events import AGENT_STATUS, CANCEL_REQUESTED
    from tether.agent.turns import NeverRan, TurnClaimed, TurnEnded, TurnHandle, TurnOutcome
    from tether.agent.types import (
        Agent,
        AgentHandle,
        AgentOptions,
        AgentStatus,
        CancelCause,
        Target,
        UserMessage,
    )
    from tether.host import Tether
    from tether.runtime.context import Context
    from tether.runtime.keys import Notice, Parallel, Serial, ServiceKey, Waterfall
    from tether.session.budget import Budget
    from tether.session.derive import derive_messages
    from tether.session.events import Event
    from tether.session.log import Session, SessionHeader
    from tether.session.store import SESSION_EVENT
    from tether.session.vocabulary import (
        AssistantMessageEvent,
        ToolCallEvent,
        ToolResultEvent,
        TurnEnd,
        UserMessageEvent,
    )


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
