"""The PostgreSQL server the tests use, and a private schema per test.

The server is ``$TETHER_TEST_DATABASE_URL`` (default: the local one, trust
auth, database ``test``). When it cannot be reached, a test that needs it is
skipped with one line saying why, except under ``CI=true``, where an
unreachable server fails the run: CI must test the PostgreSQL backend.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
from pathlib import Path

import pytest

URL = os.environ.get("TETHER_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")

_created: set[str] = set()
_counter = itertools.count()


@functools.cache
def _unreachable() -> str | None:
    """Why the server cannot be used, or ``None`` when it can."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - psycopg is a dev dependency
        return f"psycopg is not installed ({exc})"
    try:
        with psycopg.connect(URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {URL} is not reachable: {str(exc).strip().splitlines()[0]}"
    return None


def require_server() -> None:
    """Skip (fail under ``CI=true``) the calling test when the server is unreachable."""
    reason = _unreachable()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def new_schema() -> str:
    """A schema name no other test (or test run) uses; dropped at the end of the run."""
    require_server()
    name = f"t{os.getpid()}_{next(_counter)}"
    _created.add(name)
    return name


def schema_of(root: Path) -> str:
    """The schema that stands for the storage root ``root`` (one per root)."""
    require_server()
    name = "r" + hashlib.sha1(str(root).encode()).hexdigest()[:16]
    _created.add(name)
    return name


def drop(schema: str) -> None:
    """Drop ``schema`` and everything in it."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    _created.discard(schema)


def drop_created() -> None:
    """Drop every schema this run created (called once the run ends)."""
    if not _created or _unreachable() is not None:
        return
    for schema in list(_created):
        drop(schema)


def persistence_row(root: Path) -> str:
    """A composition overlay's rows (YAML) that store sessions in the schema of ``root``,
    with a lease TTL of 1 s (a killed holder's sessions are free a second later)."""
    return (
        "  - id: persistence\n"
        "    plugin: tether.persist.postgres\n"
        "    config:\n"
        f"      url: {json.dumps(URL)}\n"
        f"      db_schema: {schema_of(root)}\n"
        "      lease_ttl_s: 1\n"
    )
