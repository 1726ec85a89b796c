"""No orphans: the per-host record of running process groups, its sweep, and its watchdog.

Every command tether runs leads a process group of its own. While it runs,
its group is recorded in a small state file shared by every tether on the
host (``<data dir>/run/groups-<hostname>.json``, replaced atomically under a
lock), together with the owner — the tether process that started it, named
by pid *and* start time so that a reused pid never passes for it.

Two things act on the record when a tether dies without stopping its
commands (SIGKILL, a crash, the OOM killer):

* **The watchdog** (:func:`watch`), a small process every tether with a
  running command has: it holds the read end of a pipe only that tether can
  write to, so the owner's death — however it happens — is an end of file
  there. tether tells it of each group as it starts and ends (one line on
  that pipe: ``+PGID LEADER_START`` or ``-PGID``), so it knows every running
  group at once, even one the state file does not hold yet. At end of file
  it kills them all, and every group the file records for that owner.
* **The sweep** (:meth:`GroupLedger.sweep`), run when a shell executor
  starts: it kills the recorded groups of every owner that is no longer
  alive (a watchdog that was itself killed, a host that lost power).

Before a group is killed it is checked to be the one recorded: if a process
has the group's id as its pid, it must have the recorded start time (else
the pid was reused, and nothing is killed); only members started no earlier
than the recorded leader are counted. The known limit: a process that leaves
the group (``setsid``, a double fork into a new session) is not in the
record and is out of reach — see ``docs/shell.md``.

This module uses only the standard library: the watchdog runs it as a script
(``python -I -S orphans.py watch ...``), which starts in a few milliseconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

FORMAT_VERSION = 1


def start_time(pid: int, *, zombie: bool = False) -> int | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/PID/stat`` field 22),
    or ``None`` when there is no such live process.

    With ``zombie``, an exited process its parent has not reaped yet counts
    too: its pid cannot be reused until then, so its start time still names it.
    """
    fields = _stat_fields(pid)
    if fields is None or fields[0] == "X" or (fields[0] == "Z" and not zombie):
        return None
    return int(fields[19])


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    fields = data.rpartition(b")")[2].split()
    return [field.decode() for field in fields] if len(fields) > 19 else None


@dataclass(frozen=True, slots=True)
class Owner:
    """A process, named so that a reused pid is not mistaken for it."""

    pid: int
    start: int

    @classmethod
    def current(cls) -> Owner:
        """This process (start time 0 where ``/proc`` is not available)."""
        pid = os.getpid()
        return cls(pid, start_time(pid) or 0)

    def alive(self) -> bool:
        return start_time(self.pid) == self.start


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """One running command's process group, and who started it."""

    pgid: int
    leader_start: int
    """The start time of the group's leader (pid ``pgid``)."""
    owner_pid: int
    owner_start: int
    label: str

    @property
    def owner(self) -> Owner:
        return Owner(self.owner_pid, self.owner_start)


@dataclass(frozen=True, slots=True)
class Swept:
    """What a sweep did about one recorded group."""

    record: GroupRecord
    killed: tuple[int, ...]
    """The pids that were sent SIGKILL (empty: nothing of the group was left)."""
    reused: bool
    """The group's id now belongs to another process: it was left alone."""


def state_path(directory: Path) -> Path:
    """This host's state file in ``directory`` (one per host: a data directory may be shared)."""
    host = socket.gethostname() or "localhost"
    return directory / f"groups-{host}.json"


class GroupLedger:
    """The state file at ``path``, as seen by the process ``owner`` (default: this one).

    Every method takes the file's lock for its whole read-modify-write, so
    any number of tethers on the host can share it. A file that cannot be
    parsed is treated as empty (and replaced on the next write).

    Raises (every method):
        OSError: the file or its directory cannot be read or written.
    """

    def __init__(self, path: Path, owner: Owner | None = None) -> None:
        self.path = path
        self.owner = owner if owner is not None else Owner.current()
        self._lock: int | None = None
        """The lock file, opened once (every command's start and end takes the lock)."""

    def record(self, pgid: int, label: str) -> GroupRecord | None:
        """The record of the group led by ``pgid`` (just started by the owner), not yet
        written; ``None`` if the leader is already gone.

        A leader that has exited but is not reaped yet (``cmd & exit``) is
        recorded: what it started may still run in its group."""
        leader = start_time(pgid, zombie=True)
        if leader is None:
            return None
        return GroupRecord(pgid, leader, self.owner.pid, self.owner.start, label)

    def add(self, pgid: int, label: str) -> GroupRecord | None:
        """Record the group led by ``pgid`` (just started by the owner); ``None`` if the
        leader is already gone."""
        record = self.record(pgid, label)
        if record is None:
            return None
        with self._locked() as records:
            records[:] = [r for r in records if r.pgid != pgid]
            records.append(record)
        return record

    def replace(self, pgids: set[int], owned: list[GroupRecord]) -> None:
        """Replace the owner's records of the groups ``pgids`` with ``owned`` (every other
        record stays: another executor of the same process may have written it)."""
        with self._locked() as records:
            kept = [r for r in records if not (r.owner == self.owner and r.pgid in pgids)]
            records[:] = kept + owned

    def remove(self, pgid: int) -> None:
        """Forget the owner's group ``pgid`` (it has ended)."""
        with self._locked() as records:
            records[:] = [r for r in records if not (r.pgid == pgid and r.owner == self.owner)]

    def records(self) -> list[GroupRecord]:
        with self._locked() as records:
            return list(records)

    def sweep(self) -> list[Swept]:
        """Kill the recorded groups of every owner that is no longer alive; forget them."""
        return self._reap(lambda record: not record.owner.alive())

    def reap(self, owner: Owner) -> list[Swept]:
        """Kill every recorded group of ``owner`` (which has just died); forget them."""
        return self._reap(lambda record: record.owner == owner)

    def _reap(self, chosen: Callable[[GroupRecord], bool]) -> list[Swept]:
        with self._locked() as records:
            doomed = [record for record in records if chosen(record)]
            records[:] = [record for record in records if not chosen(record)]
            return [_kill_group(record) for record in doomed]

    def close(self) -> None:
        """Close the lock file (a later call opens it again)."""
        lock, self._lock = self._lock, None
        if lock is not None:
            os.close(lock)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[list[GroupRecord]]:
        """The records, under the lock; changes to the list are written back atomically."""
        if self._lock is None:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
            self._lock = os.open(f"{self.path}.lock", flags, 0o600)
        lock = self._lock
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            records = _read(self.path)
            before = list(records)
            yield records
            if records != before:
                _write(self.path, records)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read(path: Path) -> list[GroupRecord]:
    try:
        data = json.loads(path.read_bytes())
        return [GroupRecord(**entry) for entry in data["groups"]]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, TypeError, KeyError):
        return []


def _write(path: Path, records: list[GroupRecord]) -> None:
    payload = {"version": FORMAT_VERSION, "groups": [asdict(record) for record in records]}
    # Writers hold the lock, so one temporary name per process is enough.
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(payload))
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def members(record: GroupRecord) -> list[int]:
    """The live processes of ``record``'s group started no earlier than its leader."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is None or fields[0] in ("Z", "X"):
            continue
        if int(fields[2]) == record.pgid and int(fields[19]) >= record.leader_start:
            found.append(int(entry))
    return found


def _kill_group(record: GroupRecord) -> Swept:
    leader = start_time(record.pgid)
    if leader is not None and leader != record.leader_start:
        return Swept(record, (), reused=True)
    alive = members(record)
    if alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(record.pgid, signal.SIGKILL)
    return Swept(record, tuple(alive), reused=False)


def watch(path: Path, owner: Owner) -> None:
    """Follow one executor's groups on stdin until end of file, then kill those still running.

    End of file comes after a farewell line when the executor closes (its
    groups have ended, or are its own to stop), and without one when the owner
    process dies. Only then does the watchdog also reap every group the state
    file records for the owner: another executor of a live owner keeps its
    commands.
    """
    running: dict[int, GroupRecord] = {}
    pending = b""
    farewell = False
    with contextlib.suppress(OSError):
        while data := os.read(0, 65536):
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                farewell = line == FAREWELL.rstrip(b"\n")
                _follow(running, line, owner)
    for record in running.values():
        _kill_group(record)
    if not farewell:
        GroupLedger(path, owner).reap(owner)


def _follow(running: dict[int, GroupRecord], line: bytes, owner: Owner) -> None:
    """Apply one ``+PGID LEADER_START`` / ``-PGID`` line (a malformed one is skipped)."""
    try:
        if line.startswith(b"+"):
            pgid, leader = (int(field) for field in line[1:].split())
            running[pgid] = GroupRecord(pgid, leader, owner.pid, owner.start, "")
        elif line.startswith(b"-"):
            running.pop(int(line[1:]), None)
    except ValueError:
        pass


FAREWELL = b"=\n"
"""The last line of an executor that closes cleanly (see :func:`watch`)."""


def started_line(record: GroupRecord) -> bytes:
    """What tells the watchdog that ``record``'s group started."""
    return f"+{record.pgid} {record.leader_start}\n".encode()


def ended_line(pgid: int) -> bytes:
    """What tells the watchdog that group ``pgid`` ended."""
    return f"-{pgid}\n".encode()


def watchdog_command(path: Path, owner: Owner) -> list[str]:
    """The command line of the watchdog of ``owner`` over the state file ``path``."""
    script = os.path.abspath(__file__)
    return [
        sys.executable,
        "-I",
        "-S",
        script,
        "watch",
        str(path),
        str(owner.pid),
        str(owner.start),
    ]


if __name__ == "__main__":
    _, command, state, pid, start = sys.argv
    if command != "watch":
        raise SystemExit(f"unknown command {command!r}")
    watch(Path(state), Owner(int(pid), int(start)))
