"""Durable storage for session logs: the :class:`LogBackend` seam and its two backends.

:class:`JsonlBackend` (one JSON Lines file per session) is the embedded
default; :class:`SqliteBackend` keeps every session in one SQLite database.
Both are synchronous and know nothing of the runtime. The SQLite backend
(and ``sqlite3``) is imported when it is first named, not with this package.
"""

from typing import TYPE_CHECKING

from tether.persist.backends.base import (
    LogBackend,
    SessionSummary,
    StoredLog,
    SyncsLater,
    TornTail,
    WritesWithoutWaiting,
    newest_first,
)
from tether.persist.backends.errors import (
    BackendClosedError,
    CorruptLogError,
    InvalidRecordError,
    InvalidSessionIdError,
    LogStoreError,
    SessionNotFoundError,
    StoreConflictError,
    UnsupportedFormatError,
)
from tether.persist.backends.jsonl import JsonlBackend
from tether.persist.backends.lease import Lease, SessionLeasedError
from tether.persist.backends.records import (
    EventRecord,
    HeaderRecord,
    LineageRecord,
    validate_session_id,
)

if TYPE_CHECKING:
    from tether.persist.backends.sqlite import SqliteBackend

__all__ = [
    "BackendClosedError",
    "CorruptLogError",
    "EventRecord",
    "HeaderRecord",
    "InvalidRecordError",
    "InvalidSessionIdError",
    "JsonlBackend",
    "Lease",
    "LineageRecord",
    "LogBackend",
    "LogStoreError",
    "SessionLeasedError",
    "SessionNotFoundError",
    "SessionSummary",
    "SqliteBackend",
    "StoreConflictError",
    "StoredLog",
    "SyncsLater",
    "TornTail",
    "UnsupportedFormatError",
    "WritesWithoutWaiting",
    "newest_first",
    "validate_session_id",
]


def __getattr__(name: str) -> object:
    if name == "SqliteBackend":
        from tether.persist.backends.sqlite import SqliteBackend

        return SqliteBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
