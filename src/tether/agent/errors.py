"""Errors of the agent layer."""

from __future__ import annotations


class AgentError(Exception):
    """Base class of agent-layer errors."""


class AgentConflictError(AgentError):
    """An agent with this id (its session id) is already live."""


class AgentCreateError(AgentError):
    """An agent could not be created; nothing of it was published."""


class AgentDisposedError(AgentError):
    """The agent was disposed; it accepts no more input."""
