"""One live owner per session: leases, taken before resume and repair, released on dispose."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import postgres
from tests.persist.factory import events, header, records
from tests.persist.test_persistence_service import World, live, prompt, world  # noqa: F401
from tether.persist.backends import LogBackend
from tether.persist.backends.lease import LeaseBook, SessionLeasedError
from tether.persist.backends.postgres import PostgresBackend


def test_a_lease_is_refused_while_held_and_free_once_released(
    open_backend: Callable[[], LogBackend],
) -> None:
    owner, other = open_backend(), open_backend()
    lease = owner.acquire_lease("s1")
    with pytest.raises(SessionLeasedError) as refused:
        other.acquire_lease("s1")
    where = (
        f"on host {owner.host_id}" if isinstance(owner, PostgresBackend) else "in another process"
    )
    assert str(refused.value) == f"session s1 is open {where} (pid {os.getpid()})"
    other.acquire_lease("s2").release()
    lease.release()
    lease.release()
    other.acquire_lease("s1").release()


def test_a_reader_sees_who_holds_a_lease_and_writes_nothing(
    open_backend: Callable[[], LogBackend],
) -> None:
    owner, reader = open_backend(), open_backend()
    assert reader.lease_holder("s1") is None
    lease = owner.acquire_lease("s1")
    assert getattr(reader.lease_holder("s1"), "pid", None) == os.getpid()
    lease.release()
    assert reader.lease_holder("s1") is None
    # Probing took nothing: the lease is free to take.
    owner.acquire_lease("s1").release()


def test_a_lease_dies_with_its_process(
    open_backend: Callable[[], LogBackend], tmp_path: Path
) -> None:
    backend = open_backend()
    if isinstance(backend, PostgresBackend):
        # A lease in the database outlives its holder by its TTL, not more.
        script = (
            "import os\n"
            "from tether.persist.backends.postgres import PostgresBackend\n"
            f"b = PostgresBackend({postgres.URL!r}, schema={backend.schema!r}, lease_ttl=0.3)\n"
            "b.acquire_lease('s1')\n"
            "os._exit(0)\n"
        )
        subprocess.run([sys.executable, "-c", script], check=True, timeout=30)
        with pytest.raises(SessionLeasedError):
            backend.acquire_lease("s1")
        deadline = time.monotonic() + 1.3
        while True:
            try:
                backend.acquire_lease("s1").release()
                break
            except SessionLeasedError:
                assert time.monotonic() < deadline, "the dead holder's lease never expired"
                time.sleep(0.05)
        return
    root = backend.directory.parent if hasattr(backend, "directory") else backend.path.parent  # type: ignore[attr-defined]
    script = (
        "import os, sys\n"
        "from tether.persist.backends import JsonlBackend, SqliteBackend\n"
        f"b = {type(backend).__name__}({str(root)!r})\n"
        "b.acquire_lease('s1')\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=30)
    backend.acquire_lease("s1").release()


def test_a_lease_book_takes_a_lease_once_and_gives_it_up_with_its_last_owner() -> None:
    taken: list[str] = []
    released: list[str] = []

    class Lease:
        def __init__(self, session_id: str) -> None:
            taken.append(session_id)
            self.session_id = session_id

        def release(self) -> None:
            released.append(self.session_id)

    book = LeaseBook(Lease)
    first, second = object(), object()
    book.acquire("s1", first)
    book.acquire("s1", second)
    assert taken == ["s1"] and book.holds("s1")
    book.release("s1", first)
    assert released == []
    book.release("s1", second)
    assert released == ["s1"] and not book.holds("s1")


def test_a_lease_book_takes_leases_of_different_sessions_side_by_side() -> None:
    slow_take_started, slow_take_may_end = threading.Event(), threading.Event()
    taken: list[str] = []

    class Lease:
        def __init__(self, session_id: str) -> None:
            if session_id == "slow":
                slow_take_started.set()
                assert slow_take_may_end.wait(10)
            taken.append(session_id)

        def release(self) -> None:
            pass

    book = LeaseBook(Lease)
    owners = [object(), object()]
    slow = threading.Thread(target=book.acquire, args=("slow", owners[0]))
    slow.start()
    try:
        assert slow_take_started.wait(10)
        quick = threading.Thread(target=book.acquire, args=("quick", object()))
        quick.start()
        quick.join(5)
        assert not quick.is_alive() and taken == ["quick"]  # it did not wait for the slow take
        # A second owner of the session being taken waits for that take, and shares it.
        second = threading.Thread(target=book.acquire, args=("slow", owners[1]))
        second.start()
    finally:
        slow_take_may_end.set()
        slow.join(10)
    second.join(10)
    assert taken == ["quick", "slow"]
    book.release("slow", owners[0])
    assert book.holds("slow")
    book.release("slow", owners[1])
    assert not book.holds("slow")


def test_forgetting_a_lost_lease_leaves_a_lease_taken_since_alone() -> None:
    released: list[int] = []
    count = iter(range(100))

    class Lease:
        def __init__(self, session_id: str) -> None:
            self.number = next(count)

        def release(self) -> None:
            released.append(self.number)

    book = LeaseBook(Lease)
    lost_owner, new_owner = object(), object()
    book.acquire("s1", lost_owner)
    book.forget("s1", lost_owner)  # lease 0 was taken over
    assert released == [0] and not book.holds("s1")
    book.acquire("s1", new_owner)  # lease 1, fresh
    book.forget("s1", lost_owner)  # a late second notice of the first loss
    assert released == [0] and book.holds("s1")


def test_closing_the_book_waits_for_a_take_under_way_and_gives_it_up() -> None:
    started, may_end = threading.Event(), threading.Event()
    released: list[str] = []

    class Lease:
        def __init__(self, session_id: str) -> None:
            started.set()
            assert may_end.wait(10)
            self.session_id = session_id

        def release(self) -> None:
            released.append(self.session_id)

    book = LeaseBook(Lease)
    taking = threading.Thread(target=book.acquire, args=("s1", object()))
    taking.start()
    assert started.wait(10)
    closing = threading.Thread(target=book.release_all)
    closing.start()
    closing.join(0.2)
    assert closing.is_alive()  # it waits for the take
    may_end.set()
    taking.join(10)
    closing.join(10)
    assert released == ["s1"] and not book.holds("s1")


def test_a_failed_take_lets_the_next_owner_try_again() -> None:
    attempts: list[str] = []

    class Lease:
        def __init__(self, session_id: str) -> None:
            attempts.append(session_id)
            if len(attempts) == 1:
                raise OSError("read-only file system")

        def release(self) -> None:
            pass

    book = LeaseBook(Lease)
    with pytest.raises(OSError):
        book.acquire("s1", object())
    assert not book.holds("s1")
    book.acquire("s1", object())
    assert book.holds("s1") and attempts == ["s1", "s1"]


async def test_resume_takes_the_lease_before_it_repairs(world: World) -> None:  # noqa: F811
    session = live(world.store, "open")
    prompt(session, "left open")
    await world.store.flush(session)
    world.store.detach(session)
    stored = await world.persistence.load("open")
    assert stored.open_turn is None  # closed in memory: no process has it live
    # Another process holds it (an instance of the backend of its own).
    elsewhere = world.other_backend()
    lease = elsewhere.acquire_lease("open")
    try:
        with pytest.raises(SessionLeasedError):
            await world.persistence.prepare_resume("open")
        # Nothing was repaired: the open turn belongs to the other process,
        # and a reader is shown it open, as stored.
        assert records(elsewhere.load("open"))[-1]["type"] == "user/message"
        held = await world.persistence.load("open")
        assert held.open_turn == 1 and held.events[-1].type == "user/message"
        holder = await world.persistence.holder("open")  # the other "process"
        assert holder is not None and holder.pid == os.getpid()
    finally:
        lease.release()
        elsewhere.close()
    resumed = await world.persistence.prepare_resume("open")
    assert resumed.events[-1].type == "turn/end"


async def test_a_disposed_session_gives_its_lease_up(world: World) -> None:  # noqa: F811
    session = live(world.store, "mine")
    prompt(session, "hello")
    await world.store.flush(session)
    elsewhere = world.other_backend()
    try:
        with pytest.raises(SessionLeasedError):
            elsewhere.acquire_lease("mine")
        # Everything is written, so the lease goes with the detach itself.
        world.store.detach(session)
        elsewhere.acquire_lease("mine").release()
    finally:
        elsewhere.close()


async def test_a_created_session_is_stored_as_its_header_when_asked(world: World) -> None:  # noqa: F811
    session = live(world.store, "fresh")
    await world.persistence.store(session)
    assert await world.persistence.exists("fresh")
    assert list((await world.persistence.load("fresh")).events) == []


def test_writes_without_the_lease_are_never_made_by_a_reader(backend: LogBackend) -> None:
    backend.write(header("s1"), events(0, 2))
    lease = backend.acquire_lease("s1")
    try:
        assert len(records(backend.load("s1"))) == 2
    finally:
        lease.release()


def test_a_zombie_holds_no_lease(tmp_path: Path) -> None:
    from tether.persist.backends import SqliteBackend

    backend = SqliteBackend(tmp_path)
    script = (
        "import os, sys\n"
        "from tether.persist.backends import SqliteBackend\n"
        f"SqliteBackend({str(tmp_path)!r}).acquire_lease('s1')\n"
        "os._exit(0)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
        backend.acquire_lease("s1").release()
    finally:
        child.wait()


def test_a_lease_row_that_could_not_be_deleted_is_retaken_by_its_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    from tether.persist.backends import SqliteBackend

    backend, other = SqliteBackend(tmp_path), SqliteBackend(tmp_path)
    lease = backend.acquire_lease("s1")

    def disk_full(*args: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    with monkeypatch.context() as patched:
        patched.setattr(backend, "_drop_lease", disk_full)
        lease.release()  # logged, not raised
    with pytest.raises(SessionLeasedError):
        other.acquire_lease("s1")  # the row still names a live process
    backend.acquire_lease("s1").release()  # but not against the backend that held it
    other.acquire_lease("s1").release()
