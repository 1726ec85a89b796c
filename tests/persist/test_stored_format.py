"""Logs written in an earlier release load unchanged, and new writes keep their shape.

The fixtures under ``fixtures/`` were written by the code of the time: one
session holding every core event type, stored by both backends, next to the
records it was written from.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tether.persist.backends import JsonlBackend, SqliteBackend, StoredLog
from tether.session import DEFAULT_REGISTRY, Session, SessionHeader

FIXTURES = Path(__file__).parent / "fixtures"
WRITTEN = json.loads((FIXTURES / "old-format.records.json").read_text(encoding="utf-8"))
BACKENDS: dict[str, type[JsonlBackend] | type[SqliteBackend]] = {
    "jsonl": JsonlBackend,
    "sqlite": SqliteBackend,
}


def load(name: str, root: Path, *, copy: bool = False) -> StoredLog:
    """Load the fixture session from ``root`` (first copied there from the fixtures)."""
    if copy:
        shutil.copytree(FIXTURES / name, root)
    backend = BACKENDS[name](root)
    try:
        return backend.load("old-format")
    finally:
        backend.close()


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_an_old_log_loads_into_the_events_it_was_written_from(name: str, tmp_path: Path) -> None:
    stored = load(name, tmp_path / name, copy=True)
    header = SessionHeader.from_record(stored.header)
    events = DEFAULT_REGISTRY.decode_stored(stored.events)
    session = Session.restore(header, events)
    assert header.to_record() == WRITTEN["header"]
    assert [event.to_record() for event in session.events] == WRITTEN["events"]
    assert all(event.payload is not None for event in session.events)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_rewriting_an_old_log_stores_the_same_json(name: str, tmp_path: Path) -> None:
    stored = load(name, tmp_path / name, copy=True)
    events = DEFAULT_REGISTRY.decode_stored(stored.events)
    fresh = BACKENDS[name](tmp_path / "fresh")
    try:
        fresh.write(stored.header, [event.to_record() for event in events])
    finally:
        fresh.close()
    if name == "jsonl":
        old_text = (FIXTURES / "jsonl" / "sessions" / "old-format.jsonl").read_bytes()
        new_text = (tmp_path / "fresh" / "sessions" / "old-format.jsonl").read_bytes()
        assert new_text == old_text
    else:
        reloaded = DEFAULT_REGISTRY.decode_stored(load(name, tmp_path / "fresh").events)
        assert [event.to_record() for event in reloaded] == WRITTEN["events"]
