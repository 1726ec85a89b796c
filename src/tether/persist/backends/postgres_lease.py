"""The fenced lease of the PostgreSQL backend: one live owner per session, across hosts.

Taking a session's lease draws a fresh **fencing token** from the
``lease_tokens`` sequence (never one another take drew: the write check
compares tokens for equality, so it needs them distinct, not ordered) and sets
its expiry, on the database's clock, one TTL ahead; a live lease of another
holder refuses the taker (:class:`~tether.persist.backends.lease.SessionLeasedError`,
naming the host). A heartbeat thread renews every lease held every TTL/3. A
lease found taken over (by a renewal, or a write the batch function refused)
is reported once.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import msgspec
import psycopg

from tether.persist.backends.errors import BackendClosedError, LogStoreError
from tether.persist.backends.lease import SessionLeasedError

log = logging.getLogger(__name__)

_T = TypeVar("_T")

LOCK_WAIT = 1.0
"""How long one attempt at a lease waits for its row's lock, in seconds (longer is logged)."""

LOCK_MARGIN = 2.0
"""How long past the stall limit a take waits for a locked row."""


def default_host_id() -> str:
    """This machine's host id when none is configured: its host name."""
    return socket.gethostname() or "localhost"


class LeaseInfo(msgspec.Struct, frozen=True):
    """Who holds a session's lease: ``host``, ``pid``, and whether it is live (unexpired)."""

    host: str
    pid: int
    live: bool

    @property
    def holder(self) -> str:
        return f"{self.host}:{self.pid}"


class Run(Protocol):
    """How the leases reach the database: ``work`` on a cursor, in one
    transaction (or, without ``transaction``, each statement in its own)."""

    def __call__(
        self, work: Callable[[psycopg.Cursor[Any]], _T], *, transaction: bool = True
    ) -> _T: ...


class Leases:
    """The leases one backend holds: their tokens, their heartbeat, their release.

    ``on_lease_lost(session_id, new_host)`` is called, once per lease, from the
    heartbeat or a writer thread when a lease is found taken over (without it,
    a warning is logged).
    """

    def __init__(
        self,
        run: Run,
        *,
        host: str,
        pid: int,
        ttl: float,
        stall_limit: float,
        on_lease_lost: Callable[[str, str | None], None] | None,
    ) -> None:
        self._run = run
        self._host = host
        self._pid = pid
        self._ttl = ttl
        self._stall_limit = stall_limit
        self._on_lease_lost = on_lease_lost
        self._lock = threading.Lock()
        self._expiry = threading.Lock()
        """Held by a renewal from its reading of the tokens to its commit, and by
        a release: a lease released meanwhile is never renewed after its release."""
        self._stopped = False
        self._tokens: dict[str, int] = {}
        """The fencing token of each lease held."""
        self._lost_tokens: set[int] = set()
        """Tokens of leases found taken over (reported once)."""
        self._heartbeat: threading.Thread | None = None
        self._stop = threading.Event()

    def token(self, session_id: str) -> int | None:
        """The fencing token of the session's lease, if it is held here."""
        return self._tokens.get(session_id)

    def acquire(self, session_id: str) -> FencedLease:
        """Take the session's lease with a fresh fencing token; a lease whose
        expiry has passed is taken over, and the heartbeat renews it from then on.

        Raises:
            SessionLeasedError: another holder has the lease live (it names the host).
        """
        # The token is drawn first, on its own: a take retried after a lost
        # connection (whose first attempt may have committed) finds its own
        # token in the row and takes it again, instead of being refused by
        # itself until the TTL passes.
        token = self._run(_next_token)
        taken = self._take_waiting(session_id, token)
        if isinstance(taken, LeaseInfo):
            raise SessionLeasedError(session_id, taken.pid or None, host=taken.host)
        with self._lock:
            self._tokens[session_id] = taken
            self._start_heartbeat()
        return FencedLease(self, session_id, taken)

    def _take_waiting(self, session_id: str, token: int) -> int | LeaseInfo:
        """Take the lease under ``token`` (its token), or say who holds it live.

        The lease row may be locked by a transaction of a holder that is
        stopped or cut off (paused in the middle of a renewal, say). The wait
        for it is bounded: the server ends such a transaction once it has been
        idle for the stall limit (every connection of the backend sets
        ``idle_in_transaction_session_timeout``), and past that bound (and
        :data:`LOCK_MARGIN`) the take gives up, refused. A wait longer than
        :data:`LOCK_WAIT` is logged once, naming the host that holds the row.
        """
        deadline = time.monotonic() + self._stall_limit + LOCK_MARGIN
        said = False
        while True:
            try:
                return self._run(lambda cur: self._take(cur, session_id, token))
            except psycopg.errors.LockNotAvailable:
                info = self.info(session_id)  # a plain read: it waits for no lock
                holder = LeaseInfo("unknown", 0, True) if info is None else info
                if time.monotonic() >= deadline:
                    return LeaseInfo(holder.host, holder.pid, True)
                if not said:
                    said = True
                    log.warning(
                        "session %s: waiting for its lease, whose row host %s (pid %d) keeps "
                        "locked; at most %.0f s more",
                        session_id,
                        holder.host,
                        holder.pid,
                        max(0.0, deadline - time.monotonic()),
                    )

    def _take(self, cur: psycopg.Cursor[Any], session_id: str, token: int) -> int | LeaseInfo:
        """One attempt at the lease, waiting at most :data:`LOCK_WAIT` for its row.

        Raises:
            psycopg.errors.LockNotAvailable: the row stayed locked that long.
        """
        cur.execute(f"SET LOCAL lock_timeout = '{int(LOCK_WAIT * 1000)}ms'")
        row = cur.execute(
            "INSERT INTO leases AS l (session_id, holder, host, pid, token, expires_at)"
            " VALUES (%(id)s, %(holder)s, %(host)s, %(pid)s, %(token)s,"
            "         clock_timestamp() + %(ttl)s * interval '1 second')"
            " ON CONFLICT (session_id) DO UPDATE SET holder = excluded.holder,"
            "   host = excluded.host, pid = excluded.pid, token = excluded.token,"
            # Not excluded.expires_at: that was reckoned before the wait for the row.
            "   expires_at = clock_timestamp() + %(ttl)s * interval '1 second'"
            " WHERE l.expires_at <= clock_timestamp() OR l.token = excluded.token"
            " RETURNING token",
            {
                "id": session_id,
                "holder": f"{self._host}:{self._pid}",
                "host": self._host,
                "pid": self._pid,
                "token": token,
                "ttl": self._ttl,
            },
        ).fetchone()
        if row is not None:
            return int(row[0])
        held = cur.execute(
            "SELECT host, pid FROM leases WHERE session_id = %s", (session_id,)
        ).fetchone()
        return LeaseInfo(held[0], held[1], True) if held else LeaseInfo("unknown", 0, True)

    def info(self, session_id: str) -> LeaseInfo | None:
        """Who holds (or last held) the session's lease, ``None`` if no one does."""
        row = self._run(
            lambda cur: cur.execute(
                "SELECT host, pid, expires_at > clock_timestamp() FROM leases"
                " WHERE session_id = %s",
                (session_id,),
            ).fetchone()
        )
        return None if row is None else LeaseInfo(row[0], row[1], row[2])

    def renew(self) -> list[str]:
        """Push the expiry of every lease held one TTL ahead.

        Returns the sessions whose lease was taken over (reported once to
        ``on_lease_lost``; their writes fail as taken over).
        """
        with self._expiry:
            renewed, held = self._renew_held()
        lost = [session_id for session_id in held if session_id not in renewed]
        for session_id in lost:
            with self._lock:
                still_held = self._tokens.get(session_id) == held[session_id]
            if still_held:  # not released meanwhile
                info = self.info(session_id)
                self.lost(session_id, info.host if info is not None else None)
        return lost

    def _renew_held(self) -> tuple[set[str], dict[str, int]]:
        """One renewal of the leases held now: those renewed, and those it tried."""
        with self._lock:
            held = {s: t for s, t in self._tokens.items() if t not in self._lost_tokens}
        if not held:
            return set(), held

        def renew(cur: psycopg.Cursor[Any]) -> set[str]:
            # The rows are locked in the order a group of writes locks them
            # (by session id, code point order), so the two never deadlock.
            rows = cur.execute(
                "UPDATE leases SET expires_at = clock_timestamp() + %s * interval '1 second'"
                " WHERE session_id IN (SELECT session_id FROM leases"
                "   WHERE (session_id, token) IN (SELECT * FROM unnest(%s::text[], %s::bigint[]))"
                '   ORDER BY session_id COLLATE "C" FOR UPDATE)'
                " RETURNING session_id",
                (self._ttl, list(held), list(held.values())),
            ).fetchall()
            return {row[0] for row in rows}

        # One statement, no transaction around it: the server commits it as it
        # ends, so a host stopped meanwhile never keeps the rows locked.
        return self._run(renew, transaction=False), held

    def lost(self, session_id: str, host: str | None) -> None:
        """Report, once per lease, that another host took ``session_id`` over."""
        with self._lock:
            token = self._tokens.get(session_id)
            if token is None or token in self._lost_tokens:
                return
            self._lost_tokens.add(token)
        if self._on_lease_lost is None:
            log.warning("session %s was taken over by host %s", session_id, host or "unknown")
        else:  # which reports it
            self._on_lease_lost(session_id, host)

    def stop(self) -> None:
        """Stop the heartbeat (joined unless called from it); leases still held
        expire with their TTL."""
        with self._lock:
            self._stopped = True
            heartbeat = self._heartbeat
        self._stop.set()
        if heartbeat is not None and heartbeat is not threading.current_thread():
            heartbeat.join()

    def _start_heartbeat(self) -> None:
        if self._heartbeat is None and not self._stopped:
            self._heartbeat = threading.Thread(
                target=self._beat, name="tether-lease-heartbeat", daemon=True
            )
            self._heartbeat.start()

    def _beat(self) -> None:
        while not self._stop.wait(self._ttl / 3):
            try:
                self.renew()
            except BackendClosedError:
                return
            except (psycopg.Error, LogStoreError) as exc:
                # The next beat tries again; a lease that expires meanwhile
                # may be taken over, and the writes then say so.
                log.warning("renewing session leases failed: %s", exc)

    def release(self, session_id: str, token: int) -> None:
        """Let the lease go if ``token`` is still its: expired at once, not deleted.

        A renewal under way (which read the token before it was let go) is
        waited for, so that it cannot push the expiry ahead again afterwards.
        """
        with self._expiry:
            with self._lock:
                if self._tokens.get(session_id) == token:
                    del self._tokens[session_id]
            # Expired, not deleted: the row keeps naming the host that held the
            # session last (a host it was taken from says who took it).
            self._run(
                lambda cur: cur.execute(
                    "UPDATE leases SET expires_at = clock_timestamp()"
                    " WHERE session_id = %s AND token = %s AND expires_at > clock_timestamp()",
                    (session_id, token),
                ),
                transaction=False,
            )


def _next_token(cur: psycopg.Cursor[Any]) -> int:
    """A fresh fencing token, one no other take drew."""
    row = cur.execute("SELECT nextval('lease_tokens')").fetchone()
    assert row is not None
    return int(row[0])


class FencedLease:
    """A held lease: its fencing token; released by expiring the row if the token is still its."""

    def __init__(self, leases: Leases, session_id: str, token: int) -> None:
        self._leases = leases
        self._key: tuple[str, int] | None = (session_id, token)

    @property
    def token(self) -> int:
        assert self._key is not None
        return self._key[1]

    def release(self) -> None:
        key, self._key = self._key, None
        if key is None:
            return
        try:
            self._leases.release(*key)
        except BackendClosedError:
            log.debug("lease of session %s left to expire", key[0])
        except psycopg.Error as exc:
            log.warning(
                "the lease of session %s could not be released (%s); it expires with its TTL",
                key[0],
                exc,
            )
