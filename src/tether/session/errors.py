"""Errors raised by the session log. All derive from `SessionError`."""

from __future__ import annotations

__all__ = [
    "EventFormatError",
    "EventTypeConflictError",
    "HeaderFormatError",
    "ReentrantAppendError",
    "SessionError",
    "SessionInvariantError",
    "UnknownEventTypeError",
]


class SessionError(Exception):
    """Base class of every error raised by `tether.session`."""


class EventFormatError(SessionError, ValueError):
    """An event record or payload does not fit the event vocabulary.

    Raised when a payload is constructed with bad fields and when a stored
    record is malformed. The message names the event type and the field.
    """


class UnknownEventTypeError(EventFormatError):
    """An event type is not known to the registry in use.

    Raised when loading a record whose type is neither registered nor declared
    ignorable, and when appending a payload whose class is not the one
    registered for its type.
    """


class EventTypeConflictError(SessionError, ValueError):
    """An event type name is registered a second time."""


class HeaderFormatError(SessionError, ValueError):
    """A stored session header is malformed."""


class SessionInvariantError(SessionError, ValueError):
    """An event would break the structure of the log.

    From `Session.append` it means the append was rejected and nothing changed.
    From `Session.restore` (and other readers of stored events) it names, in
    ``seq``, the first stored event that breaks the structure.
    """

    def __init__(self, message: str, *, seq: int | None = None) -> None:
        super().__init__(message if seq is None else f"seq {seq}: {message}")
        self.seq = seq


class ReentrantAppendError(SessionError, RuntimeError):
    """`Session.append` was called while the session was notifying observers."""
