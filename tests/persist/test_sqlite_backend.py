"""What the SQLite backend adds to the contract: its schema version and located corruption."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.persist.factory import events, header
from tether.persist.backends import CorruptLogError, SqliteBackend, UnsupportedFormatError


@pytest.fixture
def backend(store_root: Path) -> Iterator[SqliteBackend]:
    backend = SqliteBackend(store_root)
    yield backend
    backend.close()


def execute(backend: SqliteBackend, sql: str, *args: object) -> None:
    with sqlite3.connect(backend.path) as conn:
        conn.execute(sql, args)


def test_database_uses_wal(backend: SqliteBackend) -> None:
    with sqlite3.connect(backend.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_newer_schema_version_is_refused_clearly(store_root: Path) -> None:
    SqliteBackend(store_root).close()
    path = store_root / "sessions.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 2")

    with pytest.raises(UnsupportedFormatError) as caught:
        SqliteBackend(store_root)
    assert str(path) in str(caught.value)
    assert "version 2" in str(caught.value)


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("UPDATE events SET data = '{\"broken' WHERE seq = 2", "invalid JSON"),
        ("UPDATE events SET data = '[1]' WHERE seq = 2", "data must be a JSON object"),
        ("UPDATE events SET type = '' WHERE seq = 2", "type must be a non-empty string"),
        ("DELETE FROM events WHERE seq = 1", "seq is 2, expected 1"),
    ],
)
def test_corrupt_event_is_reported_with_session_and_seq(
    backend: SqliteBackend, sql: str, reason: str
) -> None:
    backend.write(header("s1"), events(0, 4))
    execute(backend, sql)

    with pytest.raises(CorruptLogError) as caught:
        backend.load("s1")

    assert (caught.value.session_id, caught.value.seq) == ("s1", 2)
    assert str(caught.value).startswith("session 's1' seq 2: ")
    assert reason in str(caught.value)


def test_corrupt_header_is_reported_with_session(backend: SqliteBackend) -> None:
    backend.write(header("s1"), events(0, 1))
    execute(backend, "UPDATE sessions SET header = 'nope' WHERE id = 's1'")

    with pytest.raises(CorruptLogError, match="session 's1': stored header"):
        backend.load("s1")
