"""One live owner per session, across processes: session leases.

A process that has a session live holds its **lease**; a second process
that asks for it is refused with :class:`SessionLeasedError`, which names the
holder's pid. A lease is released by :meth:`Lease.release` and, without any
cleanup, when its process dies:

* JSONL: an ``flock`` on ``<id>.lock`` beside the session's log. The kernel
  drops the lock with the process. The holder writes its pid into the file
  for the refusal message, and unlinks the file (still locked) on release; a
  taker that locked a file already unlinked tries again.
* SQLite: a row in ``leases`` naming the holder's pid and its process start
  time, taken in a write transaction. A row whose process no longer runs
  (or whose pid now belongs to a younger process) is stale and replaced.

:class:`LeaseBook` keeps the leases one backend holds in this process, each
shared by the owners that need it (the session being resumed, the writer
writing it) and released when the last lets go.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Protocol

import msgspec

from tether.persist.backends.errors import LogStoreError


class Holder(msgspec.Struct, frozen=True):
    """Who has a session live: the process ``pid`` (``0`` when its pid is unknown)
    and, where several hosts share the sessions (PostgreSQL), its ``host``."""

    pid: int
    host: str | None = None

    def __str__(self) -> str:
        """``host:pid`` where hosts share sessions, else the pid."""
        return str(self.pid) if self.host is None else f"{self.host}:{self.pid}"

    @property
    def where(self) -> str:
        """Where the session is live, for a message: ``on host H`` where hosts
        share sessions, else ``in process N`` (or ``in another process``)."""
        if self.host is not None:
            return f"on host {self.host}"
        return f"in process {self.pid}" if self.pid else "in another process"

    def to_json(self) -> dict[str, object]:
        return {"host": self.host, "pid": self.pid}


class SessionLeasedError(LogStoreError):
    """Another process has the session live; ``pid`` is its process id (``None`` if unknown).

    ``host`` names the tether host that holds it when the lease is shared by
    several hosts (PostgreSQL); the message then names the host too.
    """

    def __init__(self, session_id: str, pid: int | None, *, host: str | None = None) -> None:
        holder = "unknown" if pid is None else str(pid)
        where = "in another process" if host is None else f"on host {host}"
        super().__init__(f"session {session_id} is open {where} (pid {holder})")
        self.session_id = session_id
        self.pid = pid
        self.host = host


class SessionTakenOverError(LogStoreError):
    """This process lost the session's lease to another host, which now owns the session.

    Raised by an append (or a renewal) whose fencing token is no longer the
    lease's: nothing of it was stored. ``host`` names the new holder
    (``None`` if it has already let the session go).
    """

    def __init__(self, session_id: str, host: str | None) -> None:
        super().__init__(f"session {session_id} was taken over by host {host or 'unknown'}")
        self.session_id = session_id
        self.host = host


def taken_over(error: BaseException) -> SessionTakenOverError | None:
    """The takeover ``error`` is, or is made of (an exception group of nothing
    else), else ``None``: a failure that only says the session now belongs to
    another host."""
    if isinstance(error, SessionTakenOverError):
        return error
    if isinstance(error, BaseExceptionGroup):
        found = [taken_over(inner) for inner in error.exceptions]
        if all(found):
            return found[0]
    return None


class Lease(Protocol):
    """A held session lease."""

    def release(self) -> None:
        """Give the lease up; idempotent."""
        ...


class FileLease:
    """A lease held as an ``flock`` on a lock file (see the module docs)."""

    def __init__(self, path: Path, fd: int) -> None:
        self._path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, path: Path, session_id: str) -> FileLease:
        """Lock ``path`` (created 0600 if missing) for this process.

        Raises:
            SessionLeasedError: another process holds it.
            OSError: the lock file cannot be created (read-only or full disk).
        """
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise SessionLeasedError(session_id, _read_pid(fd)) from None
                try:
                    current = os.stat(path).st_ino
                except FileNotFoundError:
                    current = None
                if current != os.fstat(fd).st_ino:
                    # Its holder released it (and unlinked it) while we waited.
                    os.close(fd)
                    continue
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            except BaseException:
                os.close(fd)
                raise
            return cls(path, fd)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            # Unlinked while still locked: a waiter that locks the old file
            # sees it gone and retries on a fresh one.
            os.unlink(self._path)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)


def lock_holder(path: Path) -> int | None:
    """The pid of the live process that holds the lock file ``path``, or ``None``.

    Only reads: the file is opened read-only and, if no one holds it, locked
    shared and let go at once. A holder whose pid is unreadable is reported
    as ``0``. A lock held by this process counts (flock locks belong to open
    files, not processes).
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd) or 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def process_start(pid: int) -> str:
    """When process ``pid`` started (kernel clock ticks since boot), ``""`` if unknown.

    Together with the pid it names one process: a pid reused later has a
    later start.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return ""
    # The command name (field 2) is parenthesised and may hold spaces.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else ""


def process_alive(pid: int, start: str) -> bool:
    """Whether the process ``pid`` that started at ``start`` still runs.

    A process that has exited but is not reaped yet (a zombie) does not run:
    it holds no lease, whatever its parent does.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            return False
    if _process_state(pid) in ("Z", "X"):
        return False
    return not start or process_start(pid) in ("", start)


def _process_state(pid: int) -> str:
    """The state letter of ``/proc/PID/stat`` (``R``, ``S``, ``Z``, …), ``""`` if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return ""
    fields = stat[stat.rfind(b")") + 2 :].split()
    return fields[0].decode() if fields else ""


class LeaseBook:
    """The leases one backend holds in this process, shared by their owners.

    :meth:`acquire` takes the lease on the first owner's behalf (one call to
    the backend) and only counts later ones; :meth:`release` gives it up once
    the last owner has. Thread-safe: acquisitions run in worker threads, and
    those of different sessions do not wait for each other's backend call
    (on PostgreSQL, a round trip each).
    """

    def __init__(self, take: Callable[[str], Lease]) -> None:
        self._take = take
        self._lock = threading.Lock()
        self._taken = threading.Condition(self._lock)
        """Notified when a take in progress ends (with a lease or an error)."""
        self._held: dict[str, tuple[Lease, set[Hashable]]] = {}
        self._taking: set[str] = set()
        """Sessions whose lease one thread is taking now, outside the lock."""

    def holds(self, session_id: str) -> bool:
        """Whether this process holds the lease of ``session_id``."""
        return session_id in self._held

    def acquire(self, session_id: str, owner: Hashable) -> None:
        """Make ``owner`` an owner of the lease of ``session_id``, taking it if needed.

        Raises:
            SessionLeasedError: another process holds it.
            OSError, LogStoreError: from the backend.
        """
        with self._lock:
            while session_id in self._taking:
                self._taken.wait()
            entry = self._held.get(session_id)
            if entry is not None:
                entry[1].add(owner)
                return
            self._taking.add(session_id)
        lease: Lease | None = None
        try:
            lease = self._take(session_id)
        finally:
            # Taken or failed, the take is over: whoever waits for it looks again.
            with self._lock:
                self._taking.discard(session_id)
                if lease is not None:
                    self._held[session_id] = (lease, {owner})
                self._taken.notify_all()

    def release(self, session_id: str, owner: Hashable) -> None:
        """``owner`` no longer needs the lease; the last owner's release gives it up."""
        with self._lock:
            entry = self._held.get(session_id)
            if entry is None:
                return
            lease, owners = entry
            owners.discard(owner)
            if owners:
                return
            del self._held[session_id]
        lease.release()

    def forget(self, session_id: str, owner: Hashable) -> None:
        """The lease of ``session_id`` that ``owner`` shares was taken over: drop it
        for every owner.

        The next :meth:`acquire` takes a fresh lease instead of sharing the
        lost one. A lease taken since by other owners (``owner`` is not among
        them) is left alone, and releasing a lost lease leaves its new
        holder's alone.
        """
        with self._lock:
            entry = self._held.get(session_id)
            if entry is None or owner not in entry[1]:
                return
            del self._held[session_id]
        entry[0].release()

    def release_all(self) -> None:
        """Give up every lease (the backend is closing), a take under way included."""
        with self._lock:
            while self._taking:
                self._taken.wait()
            held, self._held = self._held, {}
        for lease, _owners in held.values():
            lease.release()
