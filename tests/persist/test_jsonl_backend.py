"""What the JSONL backend adds to the contract: its file format, torn tails and crash safety."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.persist.factory import event, events, header, records, turn_start, user_message
from tether.persist.backends import (
    CorruptLogError,
    JsonlBackend,
    TornTail,
    UnsupportedFormatError,
)


@pytest.fixture
def backend(store_root: Path) -> Iterator[JsonlBackend]:
    backend = JsonlBackend(store_root)
    yield backend
    backend.close()


def lines_of(path: Path) -> list[bytes]:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return data[:-1].split(b"\n")


def replace_lines(path: Path, start: int, *lines: bytes, tail: bytes = b"") -> bytes:
    """Replace lines from 1-based line ``start`` on, append ``tail``; return the new content."""
    kept = lines_of(path)
    kept[start - 1 : start - 1 + len(lines)] = lines
    content = b"\n".join(kept) + b"\n" + tail
    path.write_bytes(content)
    return content


def test_file_is_a_versioned_header_line_then_one_compact_event_per_line(
    backend: JsonlBackend,
) -> None:
    backend.write(header("s1"), [event(0, data={"text": "héllo"})])
    backend.write(header("s1"), events(1, 2))

    first, *rest = lines_of(backend.path("s1"))

    assert json.loads(first) == {"tether_session": 1, "header": header("s1")}
    assert (
        rest[0]
        == '{"type":"assistant/chunk","seq":0,"time":1700000000.0,"data":{"text":"héllo"}}'.encode()
    )
    assert [json.loads(line) for line in rest] == [event(0, data={"text": "héllo"}), *events(1, 2)]


@pytest.mark.parametrize(
    "torn",
    [
        b'{"type":"assistant/chunk","seq":3,"ti',  # the append stopped mid-line
        b'{"type":"assistant/chunk","seq":3,"time":1.0,"data":{}}',  # all but the newline
        b'{"type":"assistant/chunk","seq":3,"data":{"t":"\xc3',  # mid-way through a character
        b'{"type":"assistant/chunk","seq":3,\x00\x00\x00\x00\n',  # zeros where data never landed
    ],
)
def test_torn_last_line_is_reported_by_a_load_and_cut_by_the_next_write(
    store_root: Path, backend: JsonlBackend, torn: bytes
) -> None:
    backend.write(header("s1"), events(0, 3))
    path = backend.path("s1")
    intact = path.stat().st_size
    with path.open("ab") as file:
        file.write(torn)

    log = JsonlBackend(store_root).load("s1")

    assert records(log) == events(0, 3)
    assert log.repaired_tail == TornTail(line=5, offset=intact, discarded_bytes=len(torn))
    assert path.stat().st_size == intact + len(torn), "a load never writes"
    backend.write(header("s1"), events(3, 2))
    assert [json.loads(line)["seq"] for line in lines_of(path)[1:]] == [0, 1, 2, 3, 4]
    reloaded = JsonlBackend(store_root).load("s1")
    assert records(reloaded) == events(0, 5)
    assert reloaded.repaired_tail is None


def test_a_write_cuts_a_torn_tail_before_appending(store_root: Path) -> None:
    JsonlBackend(store_root).write(header("s1"), events(0, 2))
    path = JsonlBackend(store_root).path("s1")
    with path.open("ab") as file:
        file.write(b'{"type":"assist')

    # A new backend has no cached tail: it reads the file's end first.
    JsonlBackend(store_root).write(header("s1"), events(2, 1))

    assert records(JsonlBackend(store_root).load("s1")) == events(0, 3)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (b'{"type":"assistant/chunk","seq":2,', "invalid JSON"),
        (b"", "invalid JSON"),
        (b'{"type":"assistant/chunk","seq":2,"time":1.0,"data":"\xff"}', "invalid UTF-8"),
        (b'{"type":"assistant/chunk","seq":7,"time":1.0,"data":{}}', "seq is 7, expected 2"),
        (b'{"type":"assistant/chunk","seq":2,"time":1.0}', "keys"),
        (b"[1, 2]", "JSON object"),
        (b'{"type":"","seq":2,"time":1.0,"data":{}}', "type must be a non-empty string"),
        (b'{"type":"assistant/chunk","seq":true,"time":1.0,"data":{}}', "seq must be a non"),
        (b'{"type":"assistant/chunk","seq":2,"time":"now","data":{}}', "time must be a number"),
        (b'{"type":"assistant/chunk","seq":2,"time":1.0,"data":[]}', "data must be a JSON"),
        (b'{"type":"assistant/chunk","seq":2,"time":1.0,"data":{},"x":1}', "keys"),
    ],
)
def test_malformed_middle_line_is_reported_with_path_and_line(
    backend: JsonlBackend, damage: bytes, reason: str
) -> None:
    backend.write(header("s1"), events(0, 5))
    path = backend.path("s1")
    damaged = replace_lines(path, 4, damage)  # the event with seq 2

    with pytest.raises(CorruptLogError) as caught:
        backend.load("s1")

    assert (caught.value.path, caught.value.line) == (path, 4)
    assert str(caught.value).startswith(f"{path}:4: ")
    assert reason in str(caught.value)
    assert path.read_bytes() == damaged


def test_damage_before_a_torn_tail_is_reported_and_the_file_left_alone(
    backend: JsonlBackend,
) -> None:
    backend.write(header("s1"), events(0, 3))
    path = backend.path("s1")
    damaged = replace_lines(path, 3, b"garbage", tail=b'{"type":"assis')

    with pytest.raises(CorruptLogError, match=r":3: invalid JSON"):
        backend.load("s1")
    assert path.read_bytes() == damaged


@pytest.mark.parametrize(
    ("first_line", "reason"),
    [
        (b"not json", "header line is not valid JSON"),
        (b'{"header":{}}', "tether_session"),
        (b'{"tether_session":0,"header":{}}', "unknown format version 0"),
        (b'{"tether_session":1,"header":{"id":"s1"}}', "header keys"),
    ],
)
def test_damaged_header_is_corruption_on_line_one(
    backend: JsonlBackend, first_line: bytes, reason: str
) -> None:
    backend.write(header("s1"), events(0, 2))
    replace_lines(backend.path("s1"), 1, first_line)

    with pytest.raises(CorruptLogError, match=reason) as caught:
        backend.load("s1")
    assert caught.value.line == 1


def test_header_naming_another_session_is_corruption(backend: JsonlBackend) -> None:
    backend.write(header("s1"), events(0, 1))
    os.rename(backend.path("s1"), backend.path("s2"))

    with pytest.raises(CorruptLogError, match="names session 's1'"):
        backend.load("s2")


def test_newer_format_version_is_refused_clearly(backend: JsonlBackend) -> None:
    path = backend.path("future")
    newer = {"tether_session": 2, "header": {"id": "future", "whatever": "comes next"}}
    path.write_text(json.dumps(newer) + "\n" + json.dumps({"kind": "v2 event"}) + "\n")

    with pytest.raises(UnsupportedFormatError) as caught:
        backend.load("future")
    message = str(caught.value)
    assert str(path) in message
    assert "version 2" in message
    assert "up to version 1" in message
    with pytest.raises(UnsupportedFormatError):
        backend.write(header("future"), [event(1)])
    [summary] = backend.list()
    assert summary.error == message


def test_crash_between_temp_write_and_link_leaves_no_session_file(
    backend: JsonlBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(src: object, dst: object) -> None:
        raise OSError("simulated crash before the link")

    monkeypatch.setattr(os, "link", crash)
    with pytest.raises(OSError, match="simulated crash"):
        backend.write(header("s1"), events(0, 2))

    assert not backend.exists("s1")
    assert list(backend.directory.iterdir()) == []
    monkeypatch.undo()

    backend.write(header("s1"), events(0, 2))

    assert [p.name for p in backend.directory.iterdir()] == ["s1.jsonl"]
    assert records(backend.load("s1")) == events(0, 2)


def test_temp_files_of_dead_writers_are_removed_before_the_first_write(
    store_root: Path,
) -> None:
    directory = JsonlBackend(store_root).directory
    with subprocess.Popen([sys.executable, "-c", "pass"]) as exited:
        pass
    orphan = directory / f".s1.{exited.pid}.0badc0de.tmp"
    in_progress = directory / f".s2.{os.getpid()}.0badc0de.tmp"
    orphan.write_bytes(b"partial")
    in_progress.write_bytes(b"partial")

    reader = JsonlBackend(store_root)
    reader.list()
    assert orphan.exists(), "a backend that only reads changed the directory"

    writer = JsonlBackend(store_root)
    writer.write(header("s3"), [turn_start(0)])
    assert not orphan.exists()
    assert in_progress.exists()


def test_list_counts_lines_in_another_writers_style_exactly(backend: JsonlBackend) -> None:
    """Lines with spaces or another key order are not this backend's compact
    form; the listing parses them instead of scanning."""
    stored = [
        turn_start(0),
        user_message(1, "first prompt"),
        {"data": {}, "time": 1_700_000_002.0, "seq": 2, "type": "turn/start"},
    ]
    path = backend.path("foreign")
    path.write_text(
        json.dumps({"tether_session": 1, "header": header("foreign")})
        + "\n"
        + "".join(json.dumps(e) + "\n" for e in stored)
    )

    [summary] = backend.list()

    assert (summary.turn_count, summary.title, summary.last_activity) == (
        2,
        "first prompt",
        1_700_000_002.0,
    )
    assert records(backend.load("foreign")) == stored


def test_list_skips_a_torn_tail_without_touching_the_file(backend: JsonlBackend) -> None:
    backend.write(header("s1"), [turn_start(0), user_message(1, "hi")])
    path = backend.path("s1")
    with path.open("ab") as file:
        file.write(b'{"type":"turn/start","seq":2,')
    size = path.stat().st_size

    [summary] = backend.list()

    assert (summary.turn_count, summary.title, summary.error) == (1, "hi", None)
    assert path.stat().st_size == size


def test_a_listing_reads_again_only_the_files_changed_since_the_last(
    backend: JsonlBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.persist.backends import jsonl

    backend.write(header("s1"), [turn_start(0), user_message(1, "one")])
    backend.write(header("s2"), [turn_start(0), user_message(1, "two")])
    read: list[str] = []
    summarize = jsonl._summarize
    monkeypatch.setattr(
        jsonl, "_summarize", lambda path, sid: read.append(sid) or summarize(path, sid)
    )
    assert sorted(s.id for s in backend.list()) == ["s1", "s2"] and sorted(read) == ["s1", "s2"]
    read.clear()
    assert sorted(s.turn_count for s in backend.list()) == [1, 1] and read == []

    backend.write(header("s2"), [turn_start(2)])
    backend.delete("s1")
    [summary] = backend.list()
    assert (summary.id, summary.turn_count, read) == ("s2", 2, ["s2"])
    backend.write(header("s1"), [turn_start(0), turn_start(1), user_message(2, "again")])
    assert {s.id: s.title for s in backend.list()} == {"s1": "again", "s2": "two"}


def test_files_not_named_for_a_session_are_ignored_by_list(backend: JsonlBackend) -> None:
    backend.write(header("s1"), events(0, 1))
    (backend.directory / "not a session.jsonl").write_text("whatever\n")

    assert [s.id for s in backend.list()] == ["s1"]


def test_lines_that_parse_only_when_joined_are_still_corruption(backend: JsonlBackend) -> None:
    backend.write(header("s1"), events(0, 4))
    replace_lines(
        backend.path("s1"),
        3,
        b'{"type":"assistant/chunk","seq":1,"time":1.0,"data":{"x":[1',
        b"2]}}",
    )

    with pytest.raises(CorruptLogError, match=r":3: invalid JSON"):
        backend.load("s1")


def test_lines_longer_than_a_read_chunk_are_handled(store_root: Path) -> None:
    big = [event(0, data={"blob": "x" * 200_000}), event(1, data={"blob": "y" * 150_000})]
    JsonlBackend(store_root).write(header("s1"), big)
    path = JsonlBackend(store_root).path("s1")
    with path.open("ab") as file:
        file.write(b'{"type":"turn/start","seq":2,"data":{"blob":"' + b"z" * 100_000)

    assert JsonlBackend(store_root).next_seq("s1") == 2
    JsonlBackend(store_root).write(header("s1"), [turn_start(2)])
    assert records(JsonlBackend(store_root).load("s1")) == [*big, turn_start(2)]
    [summary] = JsonlBackend(store_root).list()
    assert summary.turn_count == 1


def test_events_in_another_writers_style_load_as_written(backend: JsonlBackend) -> None:
    backend.write(header("s1"), events(0, 3))
    path = backend.path("s1")
    # Spaces, another key order and an integer time are all valid JSON events.
    other_style = b'{"data": {"delta": "chunk 1"}, "time": 1700000001, "seq": 1, "type": "x/y"}'
    replace_lines(path, 3, other_style)

    loaded = records(backend.load("s1"))

    assert loaded[1] == event(1, "x/y", time=1_700_000_001)
    assert loaded[::2] == [event(0), event(2)]


def test_a_reader_takes_no_lock_so_it_never_waits_on_the_writer(backend: JsonlBackend) -> None:
    import fcntl
    import threading

    backend.write(header("s1"), [turn_start(0)])
    held = os.open(backend.path("s1"), os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # as the owner does while it appends
    try:
        loaded: list[object] = []
        reader = threading.Thread(target=lambda: loaded.append(backend.load("s1")), daemon=True)
        reader.start()
        reader.join(timeout=5)
        assert loaded, "load waited on the writer's lock"
        assert [r["type"] for r in records(loaded[0])] == ["turn/start"]  # type: ignore[arg-type]
    finally:
        os.close(held)


def test_bad_data_is_reported_with_its_line_even_beside_a_nested_data_key(
    backend: JsonlBackend,
) -> None:
    # A tool call whose arguments hold a "data" object, then a record whose
    # data is an array: counting '"data":{' would see one per line.
    backend.write(header("s1"), events(0, 3))
    path = backend.path("s1")
    nested = (
        b'{"type":"tool/call","seq":0,"time":1.0,'
        b'"data":{"id":"c","name":"n","arguments":{"data":{}}}}'
    )
    replace_lines(path, 2, nested)
    replace_lines(path, 3, b'{"type":"turn/start","seq":1,"time":1.0,"data":[1]}')
    with pytest.raises(CorruptLogError, match=r":3: .*data must be a JSON"):
        backend.load("s1")


def test_a_record_the_decoder_alone_refuses_is_one_line_of_corruption(
    backend: JsonlBackend,
) -> None:
    backend.write(header("s1"), events(0, 3))
    path = backend.path("s1")
    replace_lines(path, 3, b'{"type":"turn/start","seq":1,"time":' + b"9" * 400 + b',"data":{}}')
    with pytest.raises(CorruptLogError, match=r":3: invalid event record"):
        backend.load("s1")
    [summary] = backend.list()
    assert summary.id == "s1"


def test_a_failed_sync_takes_back_every_batch_stored_since_the_last_one(
    backend: JsonlBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend.create(header(), events(0, 2))
    assert backend.write_unsynced(header(), events(2, 2), wait=False)
    assert backend.write_unsynced(header(), events(4, 1))
    assert backend.next_seq("s1") == 5  # stored, readable before any sync

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as patched:
        patched.setattr(os, "fsync", failing)
        with pytest.raises(OSError, match="Input/output"):
            backend.sync("s1")
    # Nothing after the last fsync is known to be on disk: it is taken back whole.
    assert backend.next_seq("s1") == 2
    backend.write(header(), events(2, 3))
    assert backend.sync("s1", wait=False)
    assert [e["seq"] for e in records(backend.load("s1"))] == [0, 1, 2, 3, 4]
