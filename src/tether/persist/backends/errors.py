"""Errors raised by session log backends.

Every error names the session it is about, and corruption names the place in
storage (a file and line, or a session and seq), so a message read in a log
points at what to inspect.
"""

from __future__ import annotations

from pathlib import Path


class LogStoreError(Exception):
    """Base class of every error a log backend raises on purpose."""


class InvalidSessionIdError(LogStoreError, ValueError):
    """A session id is not usable as a storage key (it would become a file name)."""

    def __init__(self, session_id: object) -> None:
        super().__init__(
            f"invalid session id {session_id!r}: expected 1 to 128 characters from "
            "[A-Za-z0-9._-], not starting with '.'"
        )
        self.session_id = session_id


class InvalidRecordError(LogStoreError, ValueError):
    """A header or event handed to a backend does not have the stored shape."""


class SessionNotFoundError(LogStoreError, LookupError):
    """The backend stores nothing under this session id."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} is not stored")
        self.session_id = session_id


class StoreConflictError(LogStoreError):
    """A write does not continue the stored log.

    Either another writer got there first (it created the session, or appended
    the seqs this batch carries), or the batch skips or repeats a seq. Nothing
    of the rejected batch is stored.
    """


class CorruptLogError(LogStoreError):
    """Stored data that a backend wrote cannot be read back as a session log.

    ``path`` and ``line`` (1-based) locate the damage in a file; ``seq`` locates
    it in a database. Torn final lines are not corruption: backends repair them.
    """

    def __init__(
        self,
        session_id: str,
        reason: str,
        *,
        path: Path | None = None,
        line: int | None = None,
        seq: int | None = None,
    ) -> None:
        if path is not None:
            where = f"{path}:{line}" if line is not None else str(path)
        else:
            where = f"session {session_id!r}" + (f" seq {seq}" if seq is not None else "")
        super().__init__(f"{where}: {reason}")
        self.session_id = session_id
        self.reason = reason
        self.path = path
        self.line = line
        self.seq = seq


class UnsupportedFormatError(LogStoreError):
    """Storage was written by a newer tether in a format this one cannot read."""

    def __init__(self, where: str, found: int, supported: int) -> None:
        super().__init__(
            f"{where} uses storage format version {found}, but this tether reads only up to "
            f"version {supported}; open it with a newer tether"
        )
        self.where = where
        self.found = found
        self.supported = supported


class BackendClosedError(LogStoreError, RuntimeError):
    """A backend was used after :meth:`close`."""


def storage_failure(error: BaseException) -> str:
    """What failed in storage, as one line a person can read.

    A database's error is named as one (never as a disk) by its own primary
    message, without the query text or the context lines a driver may add
    (PostgreSQL's ``LINE 1: …``, ``CONTEXT: …``); any other error is its
    first line.
    """
    module = type(error).__module__
    if module == "sqlite3" or module.startswith("psycopg"):
        diag = getattr(error, "diag", None)
        primary = getattr(diag, "message_primary", None)
        return f"the session database failed: {primary or _first_line(error)}"
    return _first_line(error)


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
