"""The per-day budget of a host: one small durable ledger every process of it shares.

Each UTC day has a file, ``<directory>/<YYYY-MM-DD>.jsonl``, in the data
directory's ``budget`` directory. A line is a reservation (``{"id", "tokens",
"usd", "session"}``) or the settlement of one (``{"id", "tokens", "usd",
"settled": true}``). What the day spent is folded from the file as
:class:`~tether.session.budget.Spending` folds a log: settled amounts plus
reservations not settled.

:meth:`DayLedger.reserve` takes an exclusive lock on the day's file
(``flock``), folds it, and appends the reservation and syncs it only if it
fits: two processes of the host (two ``tether run``, a ``tether web``) can
never both take the last of the day's budget. The lock is held for one read
and one short write. Files are private (0600, in a 0700 directory).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from tether.location import private_dir

__all__ = ["DayLedger", "DaySpent", "today"]


def today() -> str:
    """The UTC day as the ledger names it (``2026-12-06``)."""
    return time.strftime("%Y-%m-%d", time.gmtime())


class DaySpent:
    """What one day's file says was spent, in tokens and US dollars."""

    __slots__ = ("tokens", "usd")

    def __init__(self, tokens: int = 0, usd: float = 0.0) -> None:
        self.tokens = tokens
        self.usd = usd

    def of(self, unit: str) -> float:
        """Spent in ``unit`` (``tokens`` or ``usd``)."""
        return float(self.tokens) if unit == "tokens" else self.usd


def _fold(text: str) -> DaySpent:
    """The spending of one day's file (a torn last line is skipped)."""
    spent = DaySpent()
    open_: dict[str, tuple[int, float]] = {}
    for line in text.splitlines():
        try:
            entry = json.loads(line)
            key, tokens, usd = str(entry["id"]), int(entry["tokens"]), float(entry["usd"] or 0)
        except (ValueError, KeyError, TypeError):
            continue
        if entry.get("settled"):
            reserved = open_.pop(key, None)
            if reserved is None:
                continue
            spent.tokens += tokens - reserved[0]
            spent.usd += usd - reserved[1]
        else:
            open_[key] = (tokens, usd)
            spent.tokens += tokens
            spent.usd += usd
    return spent


def _line(fd: int, entry: dict[str, object]) -> bytes:
    """``entry`` as the next line of the locked file ``fd``: after a newline when a
    crash left its last line torn, so the torn one never swallows it."""
    size = os.fstat(fd).st_size
    torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
    return (("\n" if torn else "") + json.dumps(entry) + "\n").encode()


class DayLedger:
    """The per-day ledger in ``directory`` (see the module docs)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @staticmethod
    def today() -> str:
        """See :func:`today`."""
        return today()

    def _path(self, day: str) -> Path:
        return self.directory / f"{day}.jsonl"

    def spent(self, day: str) -> DaySpent:
        """What ``day`` spent so far (nothing when it has no file)."""
        try:
            return _fold(self._path(day).read_text(encoding="utf-8", errors="replace"))
        except FileNotFoundError:
            return DaySpent()

    def reserve(
        self, day: str, entry: dict[str, object], fits: Callable[[DaySpent], bool]
    ) -> DaySpent | None:
        """Append reservation ``entry`` to ``day``'s file, synced, if ``fits(spent)`` holds
        for what the day spent; ``None`` when it did, else what was spent.

        Blocking (file lock, fsync): call it in a worker thread.
        """
        private_dir(self.directory)
        fd = os.open(self._path(day), os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with os.fdopen(os.dup(fd), "r", encoding="utf-8", errors="replace") as reader:
                reader.seek(0)
                spent = _fold(reader.read())
            if not fits(spent):
                return spent
            os.write(fd, _line(fd, entry))
            os.fsync(fd)
            return None
        finally:
            os.close(fd)  # closing releases the lock

    def settle(self, day: str, entry: dict[str, object]) -> None:
        """Append settlement ``entry`` to ``day``'s file (one short append; not synced:
        an unsettled reservation counts at its worst case)."""
        fd = os.open(self._path(day), os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, _line(fd, {**entry, "settled": True}))
        finally:
            os.close(fd)
