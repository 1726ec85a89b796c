"""The LogBackend contract, run against every backend."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import sqlite3
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.persist.conftest import BACKENDS, postgres_connection
from tests.persist.factory import (
    BASE_TIME,
    event,
    events,
    header,
    records,
    turn_start,
    user_message,
)
from tether.persist.backends import (
    BackendClosedError,
    InvalidRecordError,
    InvalidSessionIdError,
    JsonlBackend,
    LogBackend,
    SessionNotFoundError,
    SqliteBackend,
    StoreConflictError,
    WritesWithoutWaiting,
)
from tether.persist.backends.jsonl_format import SessionFile
from tether.persist.backends.lines import BLOCK
from tether.persist.backends.postgres import PostgresBackend
from tether.persist.follow import BATCH as FOLLOW_BATCH
from tether.persist.follow import Doorbell, follow
from tether.session import AssistantChunk, Session, SessionHeader, StepStart, TurnStart
from tether.session.log_decoder import LogDecoder
from tether.session.registry import DEFAULT_REGISTRY
from tether.session.stored import StoredEvent


def stored_files(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*") if p.is_file())


def assert_nothing_stored(backend: LogBackend, session_id: str) -> None:
    assert not backend.exists(session_id)
    assert backend.list() == []
    assert backend.next_seq(session_id) == 0
    with pytest.raises(SessionNotFoundError):
        backend.load(session_id)


def test_a_session_written_without_events_is_stored_as_its_header(
    backend: LogBackend,
) -> None:
    backend.write(header("s1"), [])
    assert backend.exists("s1")
    assert backend.next_seq("s1") == 0
    log = backend.load("s1")
    assert (log.header["id"], records(log)) == ("s1", [])
    [summary] = backend.list()
    assert (summary.id, summary.turn_count, summary.error) == ("s1", 0, None)
    backend.write(header("s1"), [])
    backend.write(header("s1"), events(0, 2))
    assert [e["seq"] for e in records(backend.load("s1"))] == [0, 1]


def test_lone_surrogates_are_stored_as_replacement_characters(backend: LogBackend) -> None:
    backend.write(header("s1"), [event(0, data={"delta": "caf\udce9!"})])
    assert records(backend.load("s1"))[0]["data"] == {"delta": "caf\ufffd!"}


def test_first_write_is_atomic_and_file_appears_only_with_events(
    backend: LogBackend, store_root: Path
) -> None:
    rejected: list[list[dict[str, object]]] = [
        [event(0), {"type": "x", "seq": 1, "time": 1.0}],  # second event lacks data
        [event(0), event(1, data={"not json": object()})],
        [event(0), event(1, data={"nan": float("nan")})],
    ]
    for batch in rejected:
        with pytest.raises(InvalidRecordError):
            backend.write(header("s1"), batch)
        assert_nothing_stored(backend, "s1")
    with pytest.raises(InvalidRecordError, match="cwd"):
        backend.write(header("s1", cwd=None), events(0, 2))  # type: ignore[arg-type]
    assert_nothing_stored(backend, "s1")
    with pytest.raises(StoreConflictError):
        backend.write(header("s1"), events(1, 2))
    assert_nothing_stored(backend, "s1")
    if isinstance(backend, JsonlBackend):
        assert stored_files(store_root) == []

    backend.write(header("s1"), events(0, 2))

    assert backend.exists("s1")
    assert records(backend.load("s1")) == events(0, 2)
    if isinstance(backend, JsonlBackend):
        assert stored_files(store_root) == ["s1.jsonl"]


def test_append_continues_seq_and_rejects_gaps(open_backend: Callable[[], LogBackend]) -> None:
    backend = open_backend()
    backend.write(header("s1"), events(0, 3))
    backend.write(header("s1"), events(3, 2))
    backend.write(header("s1"), [])  # an empty batch for a stored session does nothing

    for batch in (events(6, 1), events(3, 1), events(0, 5), [event(5), event(7)]):
        with pytest.raises(StoreConflictError):
            backend.write(header("s1"), batch)
    assert backend.next_seq("s1") == 5

    # A second writer on the same storage appends; the first must notice.
    other = open_backend()
    other.write(header("s1"), events(5, 2))
    with pytest.raises(StoreConflictError):
        backend.write(header("s1"), events(5, 1))
    backend.write(header("s1"), events(7, 1))

    # Creating a session another writer already created is a conflict too.
    with pytest.raises(StoreConflictError):
        other.write(header("s1"), events(0, 1))

    assert records(backend.load("s1")) == events(0, 8)
    assert open_backend().next_seq("s1") == 8


@contextmanager
def another_writer_holds(backend: LogBackend, store_root: Path, session_id: str) -> Iterator[None]:
    """Hold the lock a write of ``session_id`` takes, as a writer in another process would."""
    if isinstance(backend, JsonlBackend):
        fd = os.open(backend.path(session_id), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
        return
    conn = sqlite3.connect(store_root / "sessions.sqlite3", isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def test_try_write_appends_as_write_does_but_never_waits_for_another_writer(
    backend: LogBackend, store_root: Path
) -> None:
    if isinstance(backend, PostgresBackend):
        pytest.skip("PostgreSQL writes only from its pool's threads: it offers no try_write")
    assert isinstance(backend, WritesWithoutWaiting)
    # A first write creates the session: left to write().
    backend.write(header("other"), [])
    assert backend.try_write(header("s1"), events(0, 2)) is False
    assert not backend.exists("s1")

    backend.write(header("s1"), events(0, 2))
    assert backend.try_write(header("s1"), events(2, 2)) is True
    assert backend.try_write(header("s1"), []) is True
    with pytest.raises(StoreConflictError):
        backend.try_write(header("s1"), events(2, 1))
    with another_writer_holds(backend, store_root, "s1"):
        assert backend.try_write(header("s1"), events(4, 1)) is False
    assert records(backend.load("s1")) == events(0, 4)
    assert backend.try_write(header("s1"), events(4, 1)) is True
    assert records(backend.load("s1")) == events(0, 5)


def test_load_round_trips_header_and_events(open_backend: Callable[[], LogBackend]) -> None:
    stored_header = header(
        "child-1",
        created_at=BASE_TIME + 0.123456789,
        cwd="/home/ünïcode/project",
        lineage={"parent": "parent.session_1", "seed_length": 3},
        meta={"model": "gpt-x", "title": "línea\u2028separada"},
    )
    batch = [
        turn_start(0),
        user_message(1, "hello\nworld", "naïve \u2028 text with 🎉"),
        event(
            2,
            "tool/call",
            time=BASE_TIME + 2.000001,
            data={"nested": {"list": [1, 2.5, None, True, "x"]}, "empty": {}, "quote": '"\\'},
        ),
        event(3, time=1700000003),  # an int time comes back as a float
    ]
    open_backend().write(stored_header, batch)

    log = open_backend().load("child-1")

    assert log.header == stored_header
    assert records(log) == [*batch[:3], event(3, time=1700000003.0)]
    assert type(records(log)[3]["time"]) is float
    assert log.repaired_tail is None


def test_list_reports_turns_title_and_activity_newest_first(backend: LogBackend) -> None:
    long_text = "word " * 40
    backend.write(
        header("older", cwd="/a", created_at=BASE_TIME),
        [
            turn_start(0, time=BASE_TIME + 10),
            user_message(1, "  fix   the\nbug ", time=BASE_TIME + 11),
        ],
    )
    backend.write(
        header("newest", cwd="/b", created_at=BASE_TIME + 1),
        [turn_start(0), user_message(1), user_message(2, long_text), turn_start(3)],
    )
    backend.write(
        header("newest"),
        [event(4, time=BASE_TIME + 100), turn_start(5, time=BASE_TIME + 101)],
    )
    backend.write(header("untitled", created_at=BASE_TIME + 2), [event(0, time=BASE_TIME + 50)])

    summaries = backend.list()

    assert [s.id for s in summaries] == ["newest", "untitled", "older"]
    newest, untitled, older = summaries
    assert (newest.cwd, newest.created_at, newest.turn_count) == ("/b", BASE_TIME + 1, 3)
    assert newest.last_activity == BASE_TIME + 101
    # The first user message without text gives no title; the next one does.
    assert newest.title is not None
    assert len(newest.title) == 80
    assert newest.title.endswith("…")
    assert newest.title.startswith("word word")
    assert (untitled.turn_count, untitled.title, untitled.last_activity) == (
        0,
        None,
        BASE_TIME + 50,
    )
    assert (older.turn_count, older.title, older.last_activity) == (
        1,
        "fix the bug",
        BASE_TIME + 11,
    )
    assert all(s.error is None for s in summaries)


def test_list_reports_each_sessions_header_labels(backend: LogBackend) -> None:
    backend.write(header("root"), events(0, 1))
    backend.write(header("child", meta={"parent": "root", "task": "a job"}), events(0, 1))

    labels = {s.id: dict(s.meta) for s in backend.list()}

    assert labels == {"root": {}, "child": {"parent": "root", "task": "a job"}}


def test_listing_rows_with_labels_are_hashable_values(backend: LogBackend) -> None:
    backend.write(header("child", meta={"parent": "root"}), events(0, 1))

    [row] = backend.list()
    [again] = backend.list()

    assert row == again
    assert hash(row) == hash(again)
    assert {row, again} == {row}


def test_list_reports_a_corrupt_session_instead_of_failing(backend: LogBackend) -> None:
    backend.write(header("good"), events(0, 2))
    backend.write(header("bad"), events(0, 2))
    damage_header(backend, "bad")

    summaries = {s.id: s for s in backend.list()}

    assert summaries["good"].error is None
    bad = summaries["bad"]
    assert bad.error is not None
    assert "bad" in bad.error
    assert (bad.cwd, bad.created_at, bad.turn_count, bad.title) == (None, None, 0, None)


def test_delete_removes_everything(backend: LogBackend, store_root: Path) -> None:
    backend.write(header("s1"), events(0, 3))
    backend.write(header("s2"), events(0, 1))

    backend.delete("s1")

    assert not backend.exists("s1")
    assert backend.next_seq("s1") == 0
    with pytest.raises(SessionNotFoundError):
        backend.load("s1")
    with pytest.raises(SessionNotFoundError):
        backend.delete("s1")
    assert [s.id for s in backend.list()] == ["s2"]
    if isinstance(backend, JsonlBackend):
        assert stored_files(store_root) == ["s2.jsonl"]
    if isinstance(backend, SqliteBackend):
        with sqlite3.connect(backend.path) as conn:
            assert conn.execute("SELECT DISTINCT session_id FROM batches").fetchall() == [("s2",)]
    if isinstance(backend, PostgresBackend):
        with postgres_connection(backend) as pg:
            assert pg.execute("SELECT DISTINCT session_id FROM events").fetchall() == [("s2",)]
    # The id is free again: a new session starts from seq 0.
    backend.write(header("s1"), events(0, 1))
    assert records(backend.load("s1")) == events(0, 1)


@pytest.mark.parametrize(
    "session_id",
    ["", ".hidden", "..", "../escape", "a/b", "a\\b", "with space", "é", "a" * 129, "x\n", 7],
)
def test_invalid_session_id_is_rejected(backend: LogBackend, session_id: str) -> None:
    calls: list[Callable[[], object]] = [
        lambda: backend.exists(session_id),
        lambda: backend.next_seq(session_id),
        lambda: backend.load(session_id),
        lambda: backend.delete(session_id),
        lambda: backend.write(header(session_id), events(0, 1)),
    ]
    for call in calls:
        with pytest.raises(InvalidSessionIdError):
            call()
    assert backend.list() == []


def test_longest_and_punctuated_session_ids_are_accepted(backend: LogBackend) -> None:
    for session_id in ("a" * 128, "A.b-c_9", "-leading-dash", "_"):
        backend.write(header(session_id), events(0, 1))
        assert backend.load(session_id).header["id"] == session_id


def test_missing_session_raises_not_found(backend: LogBackend) -> None:
    assert not backend.exists("absent")
    assert backend.next_seq("absent") == 0
    with pytest.raises(SessionNotFoundError, match="absent"):
        backend.load("absent")
    with pytest.raises(SessionNotFoundError, match="absent"):
        backend.delete("absent")
    with pytest.raises(SessionNotFoundError, match="absent"):
        backend.events_after("absent", -1)


def test_closed_backend_refuses_every_call(backend: LogBackend) -> None:
    backend.write(header("s1"), events(0, 1))
    backend.close()
    backend.close()

    calls: list[Callable[[], object]] = [
        lambda: backend.exists("s1"),
        lambda: backend.next_seq("s1"),
        lambda: backend.load("s1"),
        lambda: backend.events_after("s1", -1),
        backend.list,
        lambda: backend.delete("s1"),
        lambda: backend.write(header("s1"), events(1, 1)),
    ]
    for call in calls:
        with pytest.raises(BackendClosedError):
            call()


def test_threads_racing_for_one_seq_store_it_once(backend: LogBackend) -> None:
    backend.write(header("s1"), events(0, 1))
    writers = 8
    barrier = threading.Barrier(writers)
    outcomes: list[str] = []

    def append(worker: int) -> None:
        barrier.wait()
        try:
            backend.write(header("s1"), [event(1, data={"worker": worker})])
        except StoreConflictError:
            outcomes.append("conflict")
        else:
            outcomes.append("stored")

    threads = [threading.Thread(target=append, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["conflict"] * (writers - 1) + ["stored"]
    assert [e["seq"] for e in records(backend.load("s1"))] == [0, 1]


def test_threads_writing_different_sessions_all_land(backend: LogBackend) -> None:
    def write_session(n: int) -> None:
        for start in range(0, 20, 5):
            backend.write(header(f"s{n}"), events(start, 5))

    threads = [threading.Thread(target=write_session, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    for n in range(6):
        assert records(backend.load(f"s{n}")) == events(0, 20)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(sorted(BACKENDS)),
    cuts=st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=6),
)
def test_any_split_into_batches_loads_as_one_log(kind: str, cuts: list[int]) -> None:
    log = [user_message(0, "start")] + [
        event(seq, data={"n": seq, "text": "é\u2028"}) for seq in range(1, sum(cuts))
    ]
    with tempfile.TemporaryDirectory() as root:
        backend = BACKENDS[kind](Path(root))
        try:
            start = 0
            for size in cuts:
                backend.write(header("s1"), log[start : start + size])
                start += size
            assert records(backend.load("s1")) == log
            [summary] = backend.list()
            assert summary.title == "start"
            assert summary.last_activity == log[-1]["time"]
        finally:
            backend.close()


def test_a_follower_reads_every_event_once_in_order_from_where_it_is(
    open_backend: Callable[[], LogBackend],
) -> None:
    writer, follower = open_backend(), open_backend()  # as another process would
    writer.write(header("s1"), [])
    assert follower.events_after("s1", -1) == []
    log = [user_message(0, "start")] + [event(seq, data={"n": seq}) for seq in range(1, 9)]
    read: list[dict[str, object]] = []
    for start, end in ((0, 3), (3, 4), (4, 4), (4, 9)):
        writer.write(header("s1"), log[start:end])
        found = follower.events_after("s1", len(read) - 1)
        assert follower.events_after("s1", len(read) - 1 + len(found)) == []  # nothing new
        read += [e.to_record() for e in found]
        assert read == log[:end]
    for after in range(-1, 10):
        assert [e.to_record() for e in follower.events_after("s1", after)] == log[after + 1 :]
    assert [e.to_record() for e in follower.events_after("s1", 4)] == log[5:]


def test_a_jsonl_follower_skips_a_line_still_being_written_and_reads_it_once_whole(
    store_root: Path,
) -> None:
    writer, follower = JsonlBackend(store_root), JsonlBackend(store_root)
    writer.write(header("s1"), [user_message(0, "start")])
    assert len(follower.events_after("s1", -1)) == 1
    line = json.dumps(event(1, data={"n": 1})).encode() + b"\n"
    with writer.path("s1").open("ab") as file:
        file.write(line[:10])
        file.flush()
        assert follower.events_after("s1", 0) == []
        file.write(line[10:])
    [found] = follower.events_after("s1", 0)
    assert found.to_record() == event(1, data={"n": 1})
    assert follower.events_after("s1", 1) == []


def test_a_jsonl_follower_reads_a_replaced_file_whole(store_root: Path) -> None:
    writer, follower = JsonlBackend(store_root), JsonlBackend(store_root)
    writer.write(header("s1"), [user_message(0, "p" * 300)])
    assert len(follower.events_after("s1", -1)) == 1
    size = writer.path("s1").stat().st_size
    writer.delete("s1")
    # Another log of the same id and, once padded, the same size (the file
    # system may hand it the same inode, too).
    replaced = [user_message(0, "again"), event(1, data={"delta": ""})]
    writer.write(header("s1"), replaced)
    padding = size - writer.path("s1").stat().st_size
    writer.delete("s1")
    replaced[1] = event(1, data={"delta": "x" * padding})
    writer.write(header("s1"), replaced)
    assert writer.path("s1").stat().st_size == size
    assert [e.to_record() for e in follower.events_after("s1", 0)] == replaced[1:]
    assert follower.events_after("s1", -1)[0].to_record() == user_message(0, "again")


def test_a_jsonl_follower_holding_a_mark_sees_a_file_rewritten_in_place(
    store_root: Path,
) -> None:
    writer, follower = JsonlBackend(store_root), JsonlBackend(store_root)
    writer.write(header("s1"), [user_message(0, "abc")])
    assert len(follower.events_after("s1", -1)) == 1
    path = writer.path("s1")
    before = path.read_bytes()
    # The same inode and size, another log: a reader must not take it for the one it read.
    rewritten = before.replace(b'"abc"', b'"xyz"')
    assert len(rewritten) == len(before)
    with path.open("r+b") as file:
        file.write(rewritten)
    assert follower.events_after("s1", 0) == []
    assert follower.events_after("s1", -1)[0].to_record() == user_message(0, "xyz")
    with path.open("ab") as file:
        file.write(json.dumps(event(1)).encode() + b"\n")
    assert [e.to_record() for e in follower.events_after("s1", 0)] == [event(1)]


def test_a_jsonl_follower_reads_a_log_with_a_torn_last_line_once(store_root: Path) -> None:
    writer, follower = JsonlBackend(store_root), JsonlBackend(store_root)
    writer.write(header("s1"), [user_message(0, "abc")])
    with writer.path("s1").open("ab") as file:
        file.write(b'{"type": "assistant/chunk", "seq": 1, "ti\0\0\0\n')  # zeros after a crash
    assert [e.seq for e in follower.events_after("s1", -1)] == [0]
    assert follower.events_after("s1", 0) == []  # and again: nothing new, the tail is torn
    writer.write(header("s1"), [event(1)])  # the next write cuts the torn line
    assert [e.to_record() for e in follower.events_after("s1", 0)] == [event(1)]


def damage_header(backend: LogBackend, session_id: str) -> None:
    if isinstance(backend, JsonlBackend):
        path = backend.path(session_id)
        lines = path.read_bytes().split(b"\n")
        lines[0] = b'{"tether_session":1,"header":{"id":"' + session_id.encode() + b'"}}'
        path.write_bytes(b"\n".join(lines))
    elif isinstance(backend, SqliteBackend):
        with sqlite3.connect(backend.path) as conn:
            conn.execute(
                "UPDATE sessions SET header = ? WHERE id = ?",
                (json.dumps({"id": session_id}), session_id),
            )
    elif isinstance(backend, PostgresBackend):
        with postgres_connection(backend) as conn:
            conn.execute(
                "UPDATE sessions SET header = %s::jsonb WHERE id = %s",
                (json.dumps({"id": session_id}), session_id),
            )
    else:
        raise AssertionError(f"no way to damage {backend!r}")


def test_data_that_comes_encoded_is_stored_as_it_is(backend: LogBackend) -> None:
    encoded = {**event(0), "data": msgspec.Raw(b'{"delta":"caf\xc3\xa9","n":null}')}
    backend.write(header("s1"), [encoded, event(1)])
    assert records(backend.load("s1")) == [event(0, data={"delta": "café", "n": None}), event(1)]


@pytest.mark.parametrize(
    ("record", "fragment"),
    [
        ({**event(0), "data": msgspec.Raw(b"[1]")}, "must be a JSON object"),
        ({**event(0), "data": msgspec.Raw(b'{"a":')}, "not valid JSON"),
        ({**event(0, time=float("nan")), "data": msgspec.Raw(b"{}")}, "not storable"),
    ],
)
def test_encoded_data_is_checked_before_anything_is_written(
    backend: LogBackend, record: dict[str, object], fragment: str
) -> None:
    with pytest.raises(InvalidRecordError, match=fragment):
        backend.write(header("s1"), [record])
    assert not backend.exists("s1")


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"[1]", "must be a JSON object"),
        (b'{"a":', "not valid JSON"),
        (b"{}{}", "not valid JSON"),
        (b"", "not valid JSON"),
    ],
)
def test_a_bad_encoded_record_among_good_ones_is_named_by_its_place_in_the_batch(
    backend: LogBackend, data: bytes, fragment: str
) -> None:
    batch = [{**event(seq), "data": msgspec.Raw(b'{"delta":"d"}')} for seq in range(5)]
    batch[3] = {**event(3), "data": msgspec.Raw(data)}
    with pytest.raises(InvalidRecordError, match=f"event 3 of batch: .*{fragment}"):
        backend.write(header("s1"), batch)
    assert not backend.exists("s1")


def test_encoded_data_with_newlines_in_its_whitespace_loads_back(backend: LogBackend) -> None:
    batch = [{**event(seq), "data": msgspec.Raw(b'{"delta":"d"}')} for seq in range(3)]
    batch[1] = {**event(1), "data": msgspec.Raw(b'{\n "delta" :\n "d"}')}
    backend.write(header("s1"), batch)
    assert records(backend.load("s1")) == [event(seq, data={"delta": "d"}) for seq in range(3)]


def test_an_event_holding_a_lone_surrogate_is_stored_mended(backend: LogBackend) -> None:
    session = Session(SessionHeader(id="s1", created_at=BASE_TIME, cwd="/"))
    session.append(TurnStart(1))
    session.append(StepStart(1, 1))
    session.append(AssistantChunk("text", "caf\udce9"))
    backend.write(session.header.to_record(), [e.to_stored_record() for e in session.events])
    assert records(backend.load("s1"))[2]["data"] == {"kind": "text", "delta": "caf\ufffd"}


def _big_log(backend: LogBackend, session_id: str, blocks: int) -> int:
    """Store a log of about ``blocks`` blocks of event lines (a prompt, then
    chunks), in the writer's batches; return its number of events."""
    count = blocks * BLOCK // 240
    log = [event(0, "turn/start", data={"turn": 1}), user_message(1, "a long one")] + [
        event(seq, data={"kind": "text", "delta": "x" * 160}) for seq in range(2, count)
    ]
    for start in range(0, count, 512):
        backend.write(header(session_id), log[start : start + 512])
    return count


def test_a_load_decodes_a_log_a_block_of_lines_at_a_time_whatever_its_size(
    backend: LogBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = _big_log(backend, "big", blocks=4)
    decoded: list[int] = []
    whole = LogDecoder.lines

    def lines(self: LogDecoder, block: bytes, *rest: int) -> object:
        decoded.append(len(block))
        return whole(self, block, *rest)

    monkeypatch.setattr(LogDecoder, "lines", lines)
    loaded = backend.load_events("big", DEFAULT_REGISTRY)
    assert [e.seq for e in loaded.events] == list(range(count))
    # Never the whole log at once: a block, and the rest of a row or line.
    assert len(decoded) >= 4
    assert max(decoded) <= BLOCK + 512 * 240


def test_a_jsonl_listing_reads_a_session_a_block_at_a_time_whatever_its_size(
    store_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = JsonlBackend(store_root)
    count = _big_log(backend, "big", blocks=4)
    reads: list[int] = []
    read = SessionFile.read

    def counted(self: SessionFile, start: int, end: int) -> bytes:
        reads.append(end - start)
        return read(self, start, end)

    monkeypatch.setattr(SessionFile, "read", counted)
    [summary] = backend.list()
    assert (summary.title, summary.turn_count) == ("a long one", 1)
    assert summary.last_activity == BASE_TIME + count - 1
    assert max(reads) <= BLOCK


def test_events_after_with_a_limit_returns_at_most_that_many_in_order_without_gap_or_duplicate(
    open_backend: Callable[[], LogBackend],
) -> None:
    writer, follower = open_backend(), open_backend()  # as another process would
    log = [user_message(0, "start")] + [event(seq, data={"n": seq}) for seq in range(1, 50)]
    for start in range(0, 50, 7):  # batches a limit cuts through
        writer.write(header("s1"), log[start : start + 7])
    for limit in (1, 3, 7, 10, 60):
        read: list[dict[str, object]] = []
        while found := follower.events_after("s1", len(read) - 1, limit=limit):
            assert 0 < len(found) <= limit
            read += [e.to_record() for e in found]
        assert read == log
    for after in range(-1, 52, 5):  # from any cursor, the mark of the last read or not
        found = follower.events_after("s1", after, limit=4)
        assert [e.to_record() for e in found] == log[after + 1 : after + 5]
    writer.write(header("s1"), [event(50)])
    assert [e.seq for e in follower.events_after("s1", 47, limit=2)] == [48, 49]
    assert [e.seq for e in follower.events_after("s1", 49, limit=2)] == [50]
    assert follower.events_after("s1", 50, limit=2) == []


class CountingBackend:
    """A backend whose ``events_after`` calls are counted by what each returned."""

    def __init__(self, backend: LogBackend) -> None:
        self.backend = backend
        self.returned: list[int] = []

    def events_after(self, *args: Any, **kwargs: Any) -> list[StoredEvent]:
        found = self.backend.events_after(*args, **kwargs)
        self.returned.append(len(found))
        return found


async def test_following_a_long_stored_log_reads_it_in_bounded_batches(
    open_backend: Callable[[], LogBackend],
) -> None:
    writer = open_backend()
    # Longer than two batches and, as JSON lines, than a block of the file.
    count = 2 * FOLLOW_BATCH + 300
    log = [user_message(0, "start")] + [
        event(seq, data={"n": seq, "text": "x" * (2 * BLOCK // count)}) for seq in range(1, count)
    ]
    for start in range(0, count, 1000):
        writer.write(header("s1"), log[start : start + 1000])
    counting = CountingBackend(open_backend())
    read: list[dict[str, object]] = []
    async with asyncio.timeout(30):
        async for batch in follow(cast(LogBackend, counting), Doorbell(), "s1", poll=60):
            assert len(batch) <= FOLLOW_BATCH
            read += [e.to_record() for e in batch]
            if len(read) == count:
                break
    assert read == log
    assert counting.returned == [FOLLOW_BATCH, FOLLOW_BATCH, 300]
