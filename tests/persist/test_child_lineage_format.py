"""A child session's header written before the delegation had a type loads into the typed record.

Until then a child's lineage lived in its header's labels (``parent``,
``parent_call``, ``depth`` as a numeral, ``task``, ``background: "true"``, its
tools as a JSON list in a string) with no lineage; such logs are on disk in
JSONL files and SQLite databases and must keep loading, listing and nesting.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.persist.backends import JsonlBackend, SqliteBackend
from tether.persist.backends.errors import InvalidRecordError
from tether.session import Delegation, Lineage, SessionHeader

BACKENDS: dict[str, type[JsonlBackend] | type[SqliteBackend]] = {
    "jsonl": JsonlBackend,
    "sqlite": SqliteBackend,
}

LABELLED_CHILD = {
    "id": "child-1",
    "created_at": 1700000000.5,
    "cwd": "/work",
    "lineage": None,
    "meta": {
        "model": "deepseek:deepseek-chat",
        "tools": '["read", "grep"]',
        "parent": "parent-1",
        "parent_call": "call-7",
        "depth": "2",
        "task": "read the docs",
        "background": "true",
    },
}
"""A child's header as the releases before the typed delegation wrote it."""

DELEGATION = Delegation(
    call="call-7", depth=2, task="read the docs", background=True, tools=("read", "grep")
)
TYPED = Lineage("parent-1", 0, DELEGATION)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_a_child_header_written_with_labels_loads_with_its_delegation(
    name: str, tmp_path: Path
) -> None:
    backend = BACKENDS[name](tmp_path)
    try:
        backend.write(LABELLED_CHILD, [])
        if name == "jsonl":
            first = (tmp_path / "sessions" / "child-1.jsonl").read_text().splitlines()[0]
            assert json.loads(first)["header"] == LABELLED_CHILD
        header = SessionHeader.from_record(backend.load("child-1").header)
        [summary] = backend.list()
    finally:
        backend.close()
    assert header.lineage == TYPED
    assert header.delegator == "parent-1" and header.delegation == DELEGATION
    # The labels that became the record leave the labels; the others stay.
    assert dict(header.meta) == {"model": "deepseek:deepseek-chat"}
    assert summary.lineage == TYPED and summary.delegator == "parent-1"
    assert dict(summary.meta) == {"model": "deepseek:deepseek-chat"}


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_a_typed_delegation_is_stored_in_the_lineage_and_read_back(
    name: str, tmp_path: Path
) -> None:
    header = SessionHeader("child-2", 1700000001.0, "/work", TYPED, {"model": "offline"})
    backend = BACKENDS[name](tmp_path)
    try:
        backend.write(header.to_record(), [])
        stored = backend.load("child-2").header
        [summary] = backend.list()
    finally:
        backend.close()
    assert stored["lineage"] == {
        "parent": "parent-1",
        "seed_length": 0,
        "delegation": {
            "call": "call-7",
            "depth": 2,
            "task": "read the docs",
            "background": True,
            "tools": ["read", "grep"],
        },
    }
    assert SessionHeader.from_record(stored) == header
    assert summary.lineage == TYPED


def test_a_fork_lineage_keeps_its_two_fields() -> None:
    header = SessionHeader("fork-1", 1700000002.0, "/work", Lineage("parent-1", 4))
    assert header.to_record()["lineage"] == {"parent": "parent-1", "seed_length": 4}
    assert header.delegation is None and header.delegator is None


def test_a_malformed_delegation_is_refused_naming_the_field(tmp_path: Path) -> None:
    delegation = {**DELEGATION.to_record(), "depth": "2"}
    lineage = {"parent": "parent-1", "seed_length": 0, "delegation": delegation}
    backend = JsonlBackend(tmp_path)
    with pytest.raises(InvalidRecordError, match="delegation depth must be an int"):
        backend.write(dict(LABELLED_CHILD, meta={}, lineage=lineage), [])
