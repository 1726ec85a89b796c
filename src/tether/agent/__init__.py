"""The agent contract: the Agent, its messages, its handle, the registry."""

from tether.agent.errors import (
    AgentConflictError,
    AgentCreateError,
    AgentDisposedError,
    AgentError,
    NotStoredError,
)
from tether.agent.registry import AgentFactory, AgentRegistry, AgentsView, Setup
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

__all__ = [
    "Agent",
    "AgentConflictError",
    "AgentCreateError",
    "AgentDisposedError",
    "AgentError",
    "AgentFactory",
    "AgentHandle",
    "AgentOptions",
    "AgentRegistry",
    "AgentStatus",
    "AgentsView",
    "CancelCause",
    "NeverRan",
    "NotStoredError",
    "Setup",
    "Target",
    "TurnClaimed",
    "TurnEnded",
    "TurnHandle",
    "TurnOutcome",
    "UserMessage",
]
