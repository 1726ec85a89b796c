from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests import postgres

if TYPE_CHECKING:
    import psycopg

    from tests.persist.test_run_queue import Fleet
from tether.persist.backends import JsonlBackend, LogBackend, SqliteBackend


def postgres_backend(root: Path) -> LogBackend:
    """A PostgreSQL backend on the schema that stands for ``root``."""
    from tether.persist.backends.postgres import PostgresBackend

    return PostgresBackend(postgres.URL, schema=postgres.schema_of(root))


def postgres_connection(backend: LogBackend) -> psycopg.Connection[tuple[object, ...]]:
    """A connection (autocommit) to the schema of a PostgreSQL ``backend``, to look or damage."""
    import psycopg
    from psycopg import sql

    from tether.persist.backends.postgres import PostgresBackend

    assert isinstance(backend, PostgresBackend)
    conn = psycopg.connect(postgres.URL, autocommit=True)
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(backend.schema)))
    return conn


BACKENDS: dict[str, Callable[[Path], LogBackend]] = {
    "jsonl": JsonlBackend,
    "sqlite": SqliteBackend,
    "postgres": postgres_backend,
}


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """Hosts (submitters and ``tether worker`` processes) sharing one PostgreSQL schema."""
    from tests.persist.test_run_queue import Fleet

    fleet = Fleet(tmp_path)
    try:
        yield fleet
    finally:
        fleet.db.close()


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture(params=sorted(BACKENDS))
def open_backend(
    request: pytest.FixtureRequest, store_root: Path
) -> Iterator[Callable[[], LogBackend]]:
    """Opens backends of one kind on one root; each stands for a separate writer."""
    opened: list[LogBackend] = []

    def open_() -> LogBackend:
        backend = BACKENDS[request.param](store_root)
        opened.append(backend)
        return backend

    yield open_
    for backend in opened:
        backend.close()


@pytest.fixture
def backend(open_backend: Callable[[], LogBackend]) -> LogBackend:
    return open_backend()
