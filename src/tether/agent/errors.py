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


class NotStoredError(AgentError):
    """What was submitted could not be stored: it was refused, and it never runs.

    The message is one line: ``session ID: WHAT could not be stored: WHY``;
    :attr:`cause` is the storage error itself (the first of a group), for a
    front end that words it its own way.
    """

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause

    @classmethod
    def of(cls, session_id: str, what: str, error: BaseException) -> NotStoredError:
        """The one-line refusal of ``what`` (``the prompt``, ``the session``) in
        ``session_id``, saying why storing it failed (``error``, or the first error of a
        group): an ``OSError``'s own words and file, a database's primary message."""
        from tether.persist.backends.errors import storage_failure

        cause = storage_cause(error)
        if isinstance(cause, OSError) and cause.strerror:
            reason = cause.strerror + (f": {cause.filename}" if cause.filename else "")
        else:
            reason = storage_failure(cause)
        return cls(f"session {session_id}: {what} could not be stored: {reason}", cause)


def storage_cause(error: BaseException) -> BaseException:
    """The error that made a store fail: ``error``, or the first error of its group (the
    durability barrier raises its listeners' failures together)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error
