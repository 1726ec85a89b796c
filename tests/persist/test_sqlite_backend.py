"""What the SQLite backend adds to the contract: its schema version, the schema 1 layout
still read, and located corruption."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mounts import remount, tmpfs
from tests.persist.factory import events, header, records
from tether.persist.backends import CorruptLogError, SqliteBackend, UnsupportedFormatError
from tether.persist.backends.sqlite import SCHEMA_VERSION

FIXTURES = Path(__file__).parent / "fixtures"
WRITTEN = json.loads((FIXTURES / "old-format.records.json").read_text(encoding="utf-8"))


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
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")

    with pytest.raises(UnsupportedFormatError) as caught:
        SqliteBackend(store_root)
    assert str(path) in str(caught.value)
    assert f"version {SCHEMA_VERSION + 1}" in str(caught.value)


def test_a_schema_1_database_opened_writable_moves_its_rows_into_batches_and_goes_on(
    tmp_path: Path,
) -> None:
    shutil.copytree(FIXTURES / "sqlite", tmp_path / "store")
    backend = SqliteBackend(tmp_path / "store")
    try:
        assert records(backend.load("old-format")) == WRITTEN["events"]
        count = len(WRITTEN["events"])
        assert backend.next_seq("old-format") == count
        backend.write(WRITTEN["header"], events(count, 2))
        assert records(backend.load("old-format")) == WRITTEN["events"] + events(count, 2)
    finally:
        backend.close()
    with sqlite3.connect(tmp_path / "store" / "sessions.sqlite3") as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_schema")}
        assert "events" not in tables and {"sessions", "batches", "leases"} <= tables


def test_a_schema_1_database_on_a_read_only_file_system_loads_as_it_is(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "home") as home:
        shutil.copytree(FIXTURES / "sqlite", home, dirs_exist_ok=True)
        remount(home, read_only=True)
        try:
            backend = SqliteBackend(home)
            try:
                assert records(backend.load("old-format")) == WRITTEN["events"]
                assert backend.next_seq("old-format") == len(WRITTEN["events"])
                assert [s.id for s in backend.list()] == ["old-format"]
            finally:
                backend.close()
        finally:
            remount(home, read_only=False)


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        (
            "UPDATE batches SET lines = CAST(replace(CAST(lines AS TEXT), '\"time\"', '\"broken')"
            " AS BLOB) WHERE first_seq = 2",
            "invalid JSON",
        ),
        (
            "UPDATE batches SET lines = CAST(replace(CAST(lines AS TEXT),"
            " '{\"delta\":\"chunk 2\"}', '[1]') AS BLOB) WHERE first_seq = 2",
            "data must be a JSON object",
        ),
        (
            "UPDATE batches SET lines = CAST(replace(CAST(lines AS TEXT),"
            " '\"assistant/chunk\"', '\"\"') AS BLOB) WHERE first_seq = 2",
            "type must be a non-empty string",
        ),
        ("UPDATE batches SET lines = 5 WHERE first_seq = 2", "holds no event lines"),
        ("DELETE FROM batches WHERE first_seq = 2", "seq is 3, expected 2"),
    ],
)
def test_corrupt_event_is_reported_with_session_and_seq(
    backend: SqliteBackend, sql: str, reason: str
) -> None:
    for seq in range(4):
        backend.write(header("s1"), events(seq, 1))
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
