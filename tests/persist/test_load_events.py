"""``load_events`` decodes a log in one pass, and answers exactly as the checked path does.

The checked path is ``load`` (records, damage named by line or seq) then
``EventRegistry.decode_stored`` (payloads, errors named by seq). Every log
here, good or damaged, must give the same events or the same error both ways.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Self

import pytest

from tests.persist.conftest import BACKENDS
from tether.persist.backends import JsonlBackend, LogBackend, SqliteBackend
from tether.session import DEFAULT_REGISTRY, Event, EventPayload, EventRegistry, EventStruct

FIXTURES = Path(__file__).parent / "fixtures"
WRITTEN = json.loads((FIXTURES / "old-format.records.json").read_text(encoding="utf-8"))
SID = "old-format"


class Note(EventStruct, frozen=True):
    """A plugin type declared as the built-in ones are."""

    type: ClassVar[str] = "demo/note"

    text: str


@dataclass(frozen=True)
class Legacy(EventPayload):
    """A plugin type of the hand-written style."""

    type: ClassVar[str] = "demo/legacy"

    value: int

    def to_data(self) -> Mapping[str, object]:
        return {"value": self.value}

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Self:
        return cls(int(str(data["value"])))


def plugin_registry() -> EventRegistry:
    registry = EventRegistry()
    registry.register(Note)
    registry.register(Legacy)
    registry.ignore("demo/ignored")
    return registry


Read = Callable[[], tuple[object, list[Event], object]]


def outcome(read: Read) -> tuple[object, ...]:
    """What a read gives: its events (with their payload classes) or its error."""
    try:
        header, events, torn = read()
    except Exception as exc:  # the error is the outcome compared
        return ("error", type(exc), str(exc))
    return (
        "ok",
        header,
        [(e.type, e.seq, e.time, e.data, type(e.payload)) for e in events],
        torn,
    )


def both_ways(
    backend: LogBackend, registry: EventRegistry
) -> tuple[tuple[object, ...], tuple[object, ...]]:
    def checked() -> tuple[object, list[Event], object]:
        stored = backend.load(SID)
        return stored.header, registry.decode_stored(stored.events), stored.repaired_tail

    def one_pass() -> tuple[object, list[Event], object]:
        loaded = backend.load_events(SID, registry)
        return loaded.header, loaded.events, loaded.repaired_tail

    return outcome(one_pass), outcome(checked)


def write(backend: LogBackend, extra: tuple[dict[str, object], ...] = ()) -> None:
    events = WRITTEN["events"] + [
        {**record, "seq": len(WRITTEN["events"]) + index} for index, record in enumerate(extra)
    ]
    backend.write(WRITTEN["header"], events)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_every_core_type_loads_in_one_pass_as_the_checked_path_loads_it(
    name: str, tmp_path: Path
) -> None:
    backend = BACKENDS[name](tmp_path)
    write(backend)
    fast, checked = both_ways(backend, DEFAULT_REGISTRY)
    assert fast == checked
    assert fast[0] == "ok"
    assert [record for record in WRITTEN["events"]] == [
        event.to_record() for event in backend.load_events(SID, DEFAULT_REGISTRY).events
    ]


def test_the_one_pass_decode_takes_every_core_type_and_plugin_structs() -> None:
    registry = plugin_registry()
    lines = [json.dumps(record, separators=(",", ":")) for record in WRITTEN["events"]]
    note = {"type": "demo/note", "seq": len(lines), "time": 1.0, "data": {"text": "hi"}}
    lines.append(json.dumps(note))
    events = registry.log_decoder().lines("".join(f"{line}\n" for line in lines).encode())
    assert events is not None
    assert [event.to_record() for event in events] == [*WRITTEN["events"], note]
    assert type(events[-1].payload) is Note


@pytest.mark.parametrize(
    "record",
    [
        {"type": "demo/legacy", "time": 1.0, "data": {"value": 3}},
        {"type": "demo/ignored", "time": 1.0, "data": {"anything": [1, 2]}},
    ],
    ids=["hand-written class", "ignorable without a class"],
)
def test_types_the_one_pass_decode_has_no_class_for_load_the_checked_way(
    record: dict[str, object], tmp_path: Path
) -> None:
    registry = plugin_registry()
    for name, backend_class in sorted(BACKENDS.items()):
        backend = backend_class(tmp_path / name)
        write(backend, (record,))
        fast, checked = both_ways(backend, registry)
        assert fast == checked
        assert fast[0] == "ok"


def test_a_type_registered_after_a_load_is_decoded_by_the_next(tmp_path: Path) -> None:
    registry = EventRegistry()
    registry.ignore("demo/note")
    backend = JsonlBackend(tmp_path)
    write(backend, ({"type": "demo/note", "time": 1.0, "data": {"text": "hi"}},))
    assert backend.load_events(SID, registry).events[-1].payload is None
    registry.register(Note)
    assert backend.load_events(SID, registry).events[-1].payload == Note("hi")


JSONL_DAMAGE = {
    "not JSON": b'{"type":"turn/start","seq":2,',
    "data not an object": b'{"type":"turn/start","seq":2,"time":1.0,"data":[1]}',
    "seq out of order": b'{"type":"turn/start","seq":7,"time":1.0,"data":{"turn":1}}',
    "a blank line": b"",
    "unknown type": b'{"type":"demo/unknown","seq":2,"time":1.0,"data":{}}',
    "a payload field of the wrong type": (
        b'{"type":"agent/inbox/spliced","seq":2,"time":1.0,'
        b'"data":{"queue":"queued","op":"claim","messages":[{"id":5}]}}'
    ),
    "invalid UTF-8": b'{"type":"turn/start","seq":2,"time":1.0,"data":{"\xff":1}}',
    "an extra key": b'{"type":"turn/start","seq":2,"time":1.0,"data":{"turn":1},"x":1}',
    "a time no float holds": b'{"type":"turn/start","seq":2,"time":' + b"9" * 400 + b',"data":{}}',
}


def damage_line(backend: LogBackend, line: bytes) -> None:
    """Replace the stored line of the event at seq 2 (a JSONL file's, a SQLite batch's)."""
    if isinstance(backend, JsonlBackend):
        path = backend.path(SID)
        lines = path.read_bytes().split(b"\n")
        lines[3] = line  # after the header line
        path.write_bytes(b"\n".join(lines))
        return
    assert isinstance(backend, SqliteBackend)
    with sqlite3.connect(backend.path) as conn:
        [(stored,)] = conn.execute("SELECT lines FROM batches WHERE session_id = ?", (SID,))
        lines = stored.split(b"\n")
        lines[2] = line
        conn.execute("UPDATE batches SET lines = ?", (b"\n".join(lines),))


# Lines are what the file backends store; PostgreSQL keeps each event's data as
# jsonb, which refuses such damage on the way in.
@pytest.mark.parametrize("name", ["jsonl", "sqlite"])
@pytest.mark.parametrize("damage", sorted(JSONL_DAMAGE))
def test_a_damaged_line_fails_the_one_pass_load_as_it_fails_the_checked_one(
    damage: str, name: str, tmp_path: Path
) -> None:
    backend = BACKENDS[name](tmp_path)
    write(backend)
    damage_line(backend, JSONL_DAMAGE[damage])
    fast, checked = both_ways(backend, DEFAULT_REGISTRY)
    assert fast == checked
    assert fast[0] == "error"


def test_a_torn_tail_is_reported_by_the_one_pass_load(tmp_path: Path) -> None:
    backend = JsonlBackend(tmp_path)
    write(backend)
    with backend.path(SID).open("ab") as file:
        file.write(b'{"type":"turn/st')
    fast, checked = both_ways(backend, DEFAULT_REGISTRY)
    assert fast == checked
    assert fast[3] is not None


SQLITE_DAMAGE = {
    "data not JSON": "UPDATE events SET data = '{\"broken' WHERE seq = 2",
    "data not an object": "UPDATE events SET data = '[1]' WHERE seq = 2",
    "data a blob": "UPDATE events SET data = x'7b7d' WHERE seq = 2",
    "an empty type": "UPDATE events SET type = '' WHERE seq = 2",
    "a type no text": "UPDATE events SET type = 5 WHERE seq = 2",
    "unknown type": "UPDATE events SET type = 'demo/unknown' WHERE seq = 2",
    "a gap in the seqs": "DELETE FROM events WHERE seq = 1",
    "a time no number": "UPDATE events SET time = 'noon' WHERE seq = 2",
    "a payload field of the wrong type": (
        "UPDATE events SET data = '{\"turn\":\"one\"}' WHERE type = 'turn/start'"
    ),
}


def schema_1_database(root: Path, damage: str | None = None) -> SqliteBackend:
    """The fixture database, one row per event (schema 1), with ``damage`` done to its
    rows, opened writable: its rows are moved into batches."""
    shutil.copytree(FIXTURES / "sqlite", root)
    with sqlite3.connect(root / "sessions.sqlite3") as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)
        if damage is not None:
            conn.execute(damage)
    return SqliteBackend(root)


@pytest.mark.parametrize("damage", sorted(SQLITE_DAMAGE))
def test_a_damaged_row_of_schema_1_still_fails_to_load_once_moved_into_a_batch(
    damage: str, tmp_path: Path
) -> None:
    backend = schema_1_database(tmp_path / "store", SQLITE_DAMAGE[damage])
    fast, checked = both_ways(backend, DEFAULT_REGISTRY)
    assert fast == checked
    assert fast[0] == "error"
    assert "seq 1: " in str(fast[2]) or "seq 2: " in str(fast[2])


def test_a_whole_number_time_of_schema_1_loads_as_a_float(tmp_path: Path) -> None:
    backend = schema_1_database(tmp_path / "store", "UPDATE events SET time = 7 WHERE seq = 2")
    fast, checked = both_ways(backend, DEFAULT_REGISTRY)
    assert fast == checked
    assert backend.load_events(SID, DEFAULT_REGISTRY).events[2].time == 7.0


class Undecodable(EventStruct, frozen=True):
    """A plugin type whose field msgspec cannot decode into."""

    type: ClassVar[str] = "demo/undecodable"

    lock: threading.Lock


def test_a_registered_class_msgspec_cannot_decode_leaves_the_other_types_one_pass() -> None:
    registry = EventRegistry()
    registry.register(Undecodable)
    lines = [json.dumps(record, separators=(",", ":")) for record in WRITTEN["events"]]
    events = registry.log_decoder().lines("".join(f"{line}\n" for line in lines).encode())
    assert events is not None
    assert [event.to_record() for event in events] == WRITTEN["events"]
