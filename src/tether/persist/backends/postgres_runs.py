"""The run queue of the PostgreSQL backend: runs submitted, taken by workers, settled.

A **run** is a task submitted to be run as a session by whichever worker
takes it: one row of ``runs``, keyed by the session id it will run under
(given at submit, so the submitter can follow the session at once). Its
``state``:

* ``queued``: submitted, not taken yet;
* ``running``: a worker took it (``worker``, ``attempts`` counts the takes);
* ``done``, ``failed``, ``cancelled``: its turn ended completed, with an
  error, or aborted (``outcome`` says how);
* ``parked``: it was taken ``max_attempts`` times and never settled (each
  worker that took it died): it is left for a person, not taken again.

**Taking** (:meth:`RunQueue.take`) is one statement: the first run by
priority (highest first), then submission time, that is queued or whose
taker is gone, read ``FOR UPDATE SKIP LOCKED`` so that workers taking at
once never take the same row and never wait for each other. A running run's
taker is gone when its claim has expired (``claimed_until``, one lease TTL
after the take: the time a worker has to take the session's lease) and no
host holds the session's lease live. From then on the session's fenced lease
is what keeps one worker on it: a second taker that races in is refused the
lease and gives the run up.

**Per-queue limits** (``queues``: a queue's ``max_running``, set with
:meth:`RunQueue.limit`) hold across every worker: a run of a limited queue is
taken only while fewer than its limit of the queue's other runs are running.
While any limit is set, takes lock the limited queues' rows first, so two
takes never both see room for one more run.
"""

from __future__ import annotations

import builtins
from typing import Any, Literal

import msgspec
import psycopg

from tether.persist.backends.postgres_lease import Run
from tether.persist.backends.records import validate_session_id

RunState = Literal["queued", "running", "done", "failed", "cancelled", "parked"]
SETTLED: frozenset[str] = frozenset({"done", "failed", "cancelled", "parked"})
"""The states a run never leaves."""


class RunRequest(msgspec.Struct, frozen=True):
    """A submitted run as stored: what to run, where, and how it is going."""

    session_id: str
    task: str
    cwd: str
    model: str | None
    queue: str
    priority: int
    state: RunState
    attempts: int
    max_attempts: int
    worker: str | None
    submitted_at: float
    outcome: str | None


_COLUMNS = (
    "session_id, task, cwd, model, queue, priority, state, attempts, max_attempts, worker,"
    " extract(epoch FROM submitted_at)::float8, outcome"
)

_TAKE = """
WITH next AS (
    SELECT r.session_id FROM runs r LEFT JOIN queues q ON q.name = r.queue
    WHERE (r.state = 'queued'
           OR (r.state = 'running' AND r.claimed_until < clock_timestamp()
               AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.session_id = r.session_id
                               AND l.expires_at > clock_timestamp())))
      AND (%(queue)s::text IS NULL OR r.queue = %(queue)s)
      AND (q.max_running IS NULL
           OR (SELECT count(*) FROM runs x WHERE x.queue = r.queue AND x.state = 'running'
               AND x.session_id <> r.session_id) < q.max_running)
    ORDER BY r.priority DESC, r.submitted_at
    LIMIT 1
    FOR UPDATE OF r SKIP LOCKED
)
UPDATE runs SET
    attempts = runs.attempts + 1,
    state = CASE WHEN runs.attempts >= runs.max_attempts THEN 'parked' ELSE 'running' END,
    outcome = CASE WHEN runs.attempts >= runs.max_attempts
        THEN 'parked after ' || runs.attempts || ' attempts that never settled'
        ELSE runs.outcome END,
    finished_at = CASE WHEN runs.attempts >= runs.max_attempts
        THEN clock_timestamp() ELSE NULL END,
    worker = %(worker)s,
    claimed_until = clock_timestamp() + make_interval(secs => %(claim)s)
FROM next WHERE runs.session_id = next.session_id
RETURNING runs.session_id, runs.task, runs.cwd, runs.model, runs.queue, runs.priority,
    runs.state, runs.attempts, runs.max_attempts, runs.worker,
    extract(epoch FROM runs.submitted_at)::float8, runs.outcome
"""


class RunQueue:
    """The ``runs`` table, through ``run`` (one transaction per call, on a pooled
    connection). Every method is blocking: call it from a worker thread."""

    def __init__(self, run: Run) -> None:
        self._run = run

    def submit(
        self,
        session_id: str,
        task: str,
        *,
        cwd: str,
        model: str | None = None,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int = 3,
    ) -> None:
        """Store a run request for ``session_id``, queued.

        Raises:
            InvalidSessionIdError: ``session_id`` is not a valid id.
            ValueError: ``task`` is empty or ``max_attempts`` is below 1.
            psycopg.errors.UniqueViolation: a run of ``session_id`` exists.
        """
        validate_session_id(session_id)
        if not task.strip():
            raise ValueError("a run needs a task")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self._run(
            lambda cur: cur.execute(
                "INSERT INTO runs (session_id, task, cwd, model, queue, priority, max_attempts)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (session_id, task, cwd, model, queue, priority, max_attempts),
            )
        )

    def take(self, worker: str, *, claim: float, queue: str | None = None) -> RunRequest | None:
        """Take the next run (of ``queue``, or of any): queued, or running with its
        taker gone. ``None`` when there is none. A run taken once more than its
        ``max_attempts`` comes back ``parked`` (settled, not to be run).

        ``claim`` is how long, in seconds, the run is this worker's before it
        holds the session's lease (no other worker takes it meanwhile)."""

        def take(cur: psycopg.Cursor[Any]) -> RunRequest | None:
            cur.execute(
                "SELECT name FROM queues WHERE max_running IS NOT NULL ORDER BY name FOR UPDATE"
            )
            row = cur.execute(_TAKE, {"worker": worker, "claim": claim, "queue": queue}).fetchone()
            return None if row is None else RunRequest(*row)

        return self._run(take)

    def limit(self, queue: str, max_running: int | None) -> None:
        """Let at most ``max_running`` runs of ``queue`` run at once, across every
        worker (``None``: no limit). Runs already running beyond it go on.

        Raises:
            ValueError: ``max_running`` is below 1.
        """
        if max_running is not None and max_running < 1:
            raise ValueError(f"a queue's limit must be at least 1, got {max_running}")
        self._run(
            lambda cur: cur.execute(
                "INSERT INTO queues (name, max_running) VALUES (%s, %s)"
                " ON CONFLICT (name) DO UPDATE SET max_running = excluded.max_running",
                (queue, max_running),
            )
        )

    def settle(self, session_id: str, state: RunState, outcome: str, *, worker: str) -> bool:
        """Record how ``worker``'s run of ``session_id`` ended; whether it was still
        that worker's run (a run another worker took over is left to it)."""
        if state not in SETTLED:
            raise ValueError(f"{state!r} is not a settled state")
        return self._run(
            lambda cur: (
                cur.execute(
                    "UPDATE runs SET state = %s, outcome = %s, finished_at = clock_timestamp()"
                    " WHERE session_id = %s AND worker = %s AND state = 'running'",
                    (state, outcome, session_id, worker),
                ).rowcount
                == 1
            )
        )

    def hold(self, session_id: str, *, worker: str, claim: float) -> bool:
        """Keep ``worker``'s run of ``session_id`` its for ``claim`` more seconds, even
        without the session's lease (no other worker takes it meanwhile): a worker
        handing a run off holds it from before it lets the lease go until it
        gives the run back (:meth:`release`). Whether it was still that worker's run."""
        return self._run(
            lambda cur: (
                cur.execute(
                    "UPDATE runs SET claimed_until = clock_timestamp() + make_interval(secs => %s)"
                    " WHERE session_id = %s AND worker = %s AND state = 'running'",
                    (claim, session_id, worker),
                ).rowcount
                == 1
            )
        )

    def release(self, session_id: str, *, worker: str, outcome: str | None = None) -> bool:
        """Give ``worker``'s run of ``session_id`` back to the queue, at once, without
        counting the attempt: the worker stopped before the run started, or drained
        and handed it off (``outcome`` says so; the run did not fail). Whether it
        was still that worker's run."""
        return self._run(
            lambda cur: (
                cur.execute(
                    "UPDATE runs SET state = 'queued', attempts = greatest(attempts - 1, 0),"
                    " claimed_until = NULL, outcome = coalesce(%s, outcome)"
                    " WHERE session_id = %s AND worker = %s AND state = 'running'",
                    (outcome, session_id, worker),
                ).rowcount
                == 1
            )
        )

    def cancel_queued(self, session_id: str) -> bool:
        """Cancel ``session_id``'s run if no worker has taken it; whether it did."""
        return self._run(
            lambda cur: (
                cur.execute(
                    "UPDATE runs SET state = 'cancelled', outcome = 'cancelled while queued',"
                    " finished_at = clock_timestamp() WHERE session_id = %s AND state = 'queued'",
                    (session_id,),
                ).rowcount
                == 1
            )
        )

    def get(self, session_id: str) -> RunRequest | None:
        """The run of ``session_id``, if one was submitted."""

        def read(cur: psycopg.Cursor[Any]) -> RunRequest | None:
            row = cur.execute(
                f"SELECT {_COLUMNS} FROM runs WHERE session_id = %s", (session_id,)
            ).fetchone()
            return None if row is None else RunRequest(*row)

        return self._run(read)

    def list(self, states: builtins.list[str]) -> builtins.list[RunRequest]:
        """The runs in ``states``, in the order workers take them."""
        return self._run(
            lambda cur: [
                RunRequest(*row)
                for row in cur.execute(
                    f"SELECT {_COLUMNS} FROM runs WHERE state = ANY(%s)"
                    " ORDER BY priority DESC, submitted_at",
                    (states,),
                ).fetchall()
            ]
        )
