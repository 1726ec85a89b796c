"""``tether submit`` and ``tether worker``: runs put in a queue, taken by workers on any host.

``submit`` stores a run request in the PostgreSQL queue
(:mod:`tether.persist.backends.postgres_runs`) and prints the session id the
run will have, at once: ``sessions tail ID`` follows it from then on, on any
host. ``worker`` takes requests (several at once with ``--concurrency``)
and runs each as a session under the fenced lease; when a run's turn ends it
records how, and takes the next.

A worker that dies (SIGKILL, a lost machine) stops renewing its leases; once
they expire, another worker takes its runs over: it resumes the session from
the log (the repair closes the cut-off turn as ``interrupted`` and answers a
tool call whose outcome is unknown as such) and sends the model a note that
the run was interrupted, so the run goes on from where it stopped. A run
taken ``max_attempts`` times without settling (it keeps killing its workers)
is parked. SIGTERM or SIGINT stop a worker gracefully: it takes no new run
and exits once its current runs have ended (a second signal cancels them;
their runs are settled as cancelled).

A worker **drains** when ``tether drain HOST`` names it (a request heard
through the database), or on SIGTERM with ``--drain-on-sigterm``: it takes
no new run, lets the turns under way end within the grace period
(``--grace``), stops the others (cause ``handoff``: their turn ends
``aborted {handoff}``, and the commands the stop reached are in its
``tool/stopped`` receipt), writes ``session/handed-off`` as the last event of
each such session, releases its lease, queues the run again and rings the
queue's doorbell, so another worker takes it at once and tells the model the
run was handed off. Then it exits. A second drain (or SIGTERM) hands off at
once.

Exit status of ``worker``: 0 after a graceful stop, 1 when the queue cannot
be used; ``submit``: 0 once stored, 1 when it cannot be, 2 on a bad argument.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from tether.cli.boot import UsageError, continue_on, start

if TYPE_CHECKING:
    from tether.agent import AgentHandle, TurnOutcome
    from tether.host import Tether
    from tether.persist.backends.postgres_runs import RunRequest, RunState
    from tether.persist.cluster import Cluster
    from tether.session import SessionEvents

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1

RESUMED_NOTE = (
    "This run was interrupted: the worker running it stopped before the task was done "
    "(attempt {previous} of {limit}), and another worker resumed it from its log. "
    "Continue the task from where the log shows it stopped. A tool call answered as of "
    "unknown outcome may or may not have taken effect: check before doing it again."
)
"""What the model is told when a run is taken over (the original task is in the log)."""

HANDED_OFF_NOTE = (
    "This run was handed off: the worker running it ({host}) was drained and stopped its "
    "turn, and another worker took the run over from its log. Continue the task from where "
    "the log shows it stopped. A command or tool call the hand-off stopped did not finish: "
    "check its effect before doing it again."
)
"""What the model is told when a run it was working on is handed off to another worker."""

DRAIN_GRACE = 30.0
"""How long a draining worker lets the turns under way run before it stops them, in seconds."""

TAKE_AGAIN = 0.5
"""The longest a worker waits for a submission before it looks at the queue again, as a
share of the lease TTL (a dead worker's runs become free without a doorbell)."""


def cluster_of(tether: Tether) -> Cluster:
    """The cluster of a started tether.

    Raises:
        UsageError: sessions are not kept in PostgreSQL.
    """
    from tether.persist.cluster import CLUSTER

    cluster = tether.runtime.ctx.get(CLUSTER)
    if cluster is None:
        raise UsageError(
            "the run queue lives in PostgreSQL: set TETHER_DATABASE_URL (see docs/deploy.md)"
        )
    return cluster


async def submit(args: argparse.Namespace) -> int:
    """``tether submit``: store the run request; print its session id on stdout."""
    task = " ".join(args.task).strip()
    if not task:
        raise UsageError("submit: the task is empty")
    cwd = str(args.cwd or os.getcwd())  # --cwd is resolved when parsed
    tether = await start(args, with_model=False, persistent=True)
    try:
        run = await cluster_of(tether).submit(
            task,
            cwd=cwd,
            model=args.model,
            queue=args.queue,
            priority=args.priority,
            max_attempts=args.max_attempts,
        )
        print(run.session_id, flush=True)
        return EXIT_OK
    finally:
        await tether.stop()


def queue_limits(values: list[str]) -> dict[str, int | None]:
    """``--limit-queue NAME=N`` values as limits (``None`` for ``N=0``: no limit).

    Raises:
        UsageError: a value is not ``NAME=N`` with a whole N of at least 0.
    """
    limits: dict[str, int | None] = {}
    for value in values:
        name, _, count = value.partition("=")
        if not name or not count.isdigit():
            raise UsageError(f"worker: --limit-queue takes NAME=N, got {value!r}")
        limits[name] = int(count) or None
    return limits


async def worker(args: argparse.Namespace) -> int:
    """``tether worker``: take and run submitted runs until SIGTERM or SIGINT."""
    limits = queue_limits(args.limit_queue)
    tether = await start(args, model=args.model, persistent=True)
    try:
        cluster = cluster_of(tether)
        for queue, limit in limits.items():
            await asyncio.to_thread(cluster.runs.limit, queue, limit)
        await cluster.listening()
        name = f"{cluster.host_id}:{os.getpid()}"
        work = Worker(tether, cluster, name=name, concurrency=args.concurrency, queue=args.queue)
        print(f"worker {name} takes runs (concurrency {args.concurrency})", file=sys.stderr)
        await _serve_until_stopped(tether, work, args)
        print(f"worker {name} stopped", file=sys.stderr)
        return EXIT_OK
    finally:
        await tether.stop()


async def _serve_until_stopped(tether: Tether, work: Worker, args: argparse.Namespace) -> None:
    """Serve ``work`` with its stops wired: SIGINT stops it, SIGTERM stops or (with
    ``--drain-on-sigterm``) drains it, a ``tether drain`` naming this host drains it."""
    from tether.persist.cluster import DRAIN_REQUESTED

    loop = asyncio.get_running_loop()
    on_term = (lambda: work.drain(args.grace)) if args.drain_on_sigterm else work.stop
    loop.add_signal_handler(signal.SIGTERM, on_term)
    loop.add_signal_handler(signal.SIGINT, work.stop)
    unsubscribe = tether.runtime.ctx.on(DRAIN_REQUESTED, work.drain)
    try:
        await work.serve()
    finally:
        unsubscribe()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


class Worker:
    """Takes runs from the queue of ``cluster`` and runs each as an agent of ``tether``,
    at most ``concurrency`` at once, until :meth:`stop`.

    Every run is a task of :meth:`serve`'s task group: none outlives it.
    """

    def __init__(
        self, tether: Tether, cluster: Cluster, *, name: str, concurrency: int, queue: str | None
    ) -> None:
        self._tether = tether
        self._cluster = cluster
        self._name = name
        self._queue = queue
        self._slots = asyncio.Semaphore(concurrency)
        self._stopping = asyncio.Event()
        self._running: dict[str, AgentHandle] = {}
        self._grace: asyncio.TimerHandle | None = None
        """While draining, until the grace period ends."""
        self._handing_off = False
        """The grace period ended: every run under way (or opening) is handed off."""

    def stop(self) -> None:
        """Take no new run; a second call cancels the runs under way."""
        if self._stopping.is_set():
            for handle in self._running.values():
                handle.agent.cancel()
        self._stopping.set()

    def drain(self, grace: float) -> None:
        """Hand the runs under way to other workers, then stop (see the module docstring).

        Takes no new run at once; a run whose turn ends within ``grace``
        seconds is settled as usual, the others are stopped (cause
        ``handoff``) and queued again when it ends. A second call (or a
        ``grace`` of 0) hands off at once.
        """
        self._stopping.set()
        if self._grace is None and grace > 0 and not self._handing_off:
            log.warning("draining: the runs under way have %.3g s to end", grace)
            self._grace = asyncio.get_running_loop().call_later(grace, self._hand_off_all)
            return
        if self._grace is not None:
            self._grace.cancel()
        self._hand_off_all()

    def _hand_off_all(self) -> None:
        from tether.agent import CancelCause

        if not self._handing_off:
            log.warning("draining: handing %d run(s) to other workers", len(self._running))
        self._handing_off = True
        for handle in self._running.values():
            handle.agent.cancel(CancelCause.HANDOFF)

    async def serve(self) -> None:
        """Take and run runs until :meth:`stop` or :meth:`drain`; return once the runs
        taken have ended or been handed off."""
        try:
            async with asyncio.TaskGroup() as group:
                while not self._stopping.is_set():
                    await self._slots.acquire()
                    request = await self._take()
                    if request is None:
                        self._slots.release()
                        continue
                    group.create_task(self._run_in_slot(request), name=f"run:{request.session_id}")
        finally:
            if self._grace is not None:
                self._grace.cancel()

    async def _take(self) -> RunRequest | None:
        """The next run to start, or ``None`` once stopping (or after a quiet wait)."""
        runs, submitted = self._cluster.runs, self._cluster.submitted
        while not self._stopping.is_set():
            submitted.clear()  # before the look: a submission during it is heard
            try:
                request = await asyncio.to_thread(
                    runs.take, self._name, claim=self._cluster.lease_ttl, queue=self._queue
                )
            except Exception as exc:  # the database: the runs under way go on meanwhile
                log.warning("the run queue cannot be read (%s); trying again", exc)
                request = None
            if request is not None and request.state == "parked":
                log.warning("run %s parked: %s", request.session_id, request.outcome)
                continue
            if request is not None:
                return request
            stop = asyncio.ensure_future(self._stopping.wait())
            rung = asyncio.ensure_future(submitted.wait())
            try:
                await asyncio.wait(
                    (stop, rung),
                    timeout=self._cluster.lease_ttl * TAKE_AGAIN,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                for waiter in (stop, rung):
                    waiter.cancel()
                await asyncio.gather(stop, rung, return_exceptions=True)
        return None

    async def _run_in_slot(self, request: RunRequest) -> None:
        try:
            await self._run(request)
        except Exception:
            log.exception("run %s failed in this worker; another may take it", request.session_id)
        finally:
            self._slots.release()

    async def _run(self, request: RunRequest) -> None:
        """Run ``request`` as its session (created, or resumed after a takeover) and
        record how its turn ended. A run whose session another host holds is left."""
        from tether.agent import AgentError, NotStoredError, UserMessage
        from tether.persist.backends.errors import LogStoreError

        sid = request.session_id
        try:
            handle, message = await self._open(request)
        except (AgentError, LogStoreError) as exc:
            # Another worker raced in and holds the session: the run is its now.
            log.warning("run %s not started here: %s", sid, exc)
            return
        except _UnusableModelError as exc:
            await self._settle(sid, "failed", str(exc))
            return
        if message is None:  # the log shows the run's turn completed before the takeover
            await self._settle(sid, "done", "completed (before a takeover)")
            await handle.dispose()
            return
        if self._handing_off:  # drained while it opened: another worker starts it
            await self._hand_off(sid, handle, None)
            return
        self._running[sid] = handle
        try:
            turn = handle.agent.followup(UserMessage.text(message))
            try:
                outcome = await turn.durable()
            except NotStoredError as exc:  # taken over while this host was cut off or paused
                log.warning("run %s left to the worker that took it over: %s", sid, exc)
                return
            if _handed_off(outcome):
                await self._hand_off(sid, handle, outcome)
            else:
                await self._settle(sid, *_settled(outcome))
        finally:
            del self._running[sid]
            await handle.dispose()

    async def _hand_off(
        self, session_id: str, handle: AgentHandle, outcome: TurnOutcome | None
    ) -> None:
        """Let the run of ``session_id`` go for another worker to go on with: the
        ``session/handed-off`` record as its last event, the agent disposed (the
        log flushed, the lease released), the run queued again and the queue's
        doorbell rung. ``outcome`` is its turn's, stopped by the hand-off
        (``None``: no turn of this worker ran)."""
        from tether.agent import TurnEnded
        from tether.session import SessionHandedOff

        events = handle.agent.session.events
        stopped = isinstance(outcome, TurnEnded)
        turn = outcome.turn if isinstance(outcome, TurnEnded) else _turns(events)
        runs, name = self._cluster.runs, self._name
        # Held past the lease's release: no worker takes it as a dead worker's meanwhile.
        await asyncio.to_thread(runs.hold, session_id, worker=name, claim=self._cluster.lease_ttl)
        handle.agent.session.append(SessionHandedOff(host=self._name, turn=turn, stopped=stopped))
        await handle.dispose()
        if await asyncio.to_thread(
            runs.release, session_id, worker=name, outcome=f"handed off by {name}"
        ):
            await self._cluster.ring_runs(session_id)
            log.warning(
                "run %s handed off (turn %d %s)",
                session_id,
                turn,
                "stopped" if stopped else "not started",
            )
        else:
            log.warning("run %s was taken over by another worker; not handed off here", session_id)

    async def _open(self, request: RunRequest) -> tuple[AgentHandle, str | None]:
        """The run's agent, and the message that starts (or continues) it; ``None``
        when its log shows the run's turn already completed."""
        from tether.agent import CancelCause
        from tether.persist.backends.errors import SessionNotFoundError
        from tether.session import Aborted, SessionHandedOff, TurnEnd, UserMessageEvent

        agents = self._tether.agents
        try:
            handle = await agents.resume(request.session_id)
        except SessionNotFoundError:  # no earlier attempt got as far as storing it
            handle = await agents.create(request.session_id, cwd=request.cwd, model=request.model)
            return handle, request.task
        unusable = await continue_on(self._tether, handle.agent, model=None, base_url=None)
        if unusable is not None:
            await handle.dispose()
            raise _UnusableModelError(unusable)
        events = handle.agent.session.events
        if not any(True for _ in events.of_types(frozenset({UserMessageEvent.type}))):
            return handle, request.task
        ends = [event.payload for event in events if isinstance(event.payload, TurnEnd)]
        if ends and ends[-1].reason.kind == "completed":
            return handle, None
        if ends and ends[-1].reason == Aborted(cause=CancelCause.HANDOFF.value):
            offs = [e.payload for e in events if isinstance(e.payload, SessionHandedOff)]
            return handle, HANDED_OFF_NOTE.format(host=offs[-1].host if offs else "unknown")
        note = RESUMED_NOTE.format(previous=request.attempts - 1, limit=request.max_attempts)
        return handle, note

    async def _settle(self, session_id: str, state: RunState, outcome: str) -> None:
        settled = await asyncio.to_thread(
            self._cluster.runs.settle, session_id, state, outcome, worker=self._name
        )
        if not settled:
            log.warning("run %s was taken over by another worker; not settled here", session_id)


class _UnusableModelError(Exception):
    """The model a resumed run ran on cannot be used here."""


def _turns(events: SessionEvents) -> int:
    """How many turns the log shows ended."""
    from tether.session import TurnEnd

    return sum(1 for _ in events.of_types(frozenset({TurnEnd.type})))


def _handed_off(outcome: TurnOutcome) -> bool:
    """Whether a hand-off stopped the turn (or the message, before a turn took it)."""
    from tether.agent import CancelCause, NeverRan
    from tether.session import Aborted

    if isinstance(outcome, NeverRan):
        return outcome.cause == CancelCause.HANDOFF
    return outcome.reason == Aborted(cause=CancelCause.HANDOFF.value)


def _settled(outcome: TurnOutcome) -> tuple[RunState, str]:
    """The state a run ends in, and how to say it, from its turn's outcome."""
    from tether.agent import NeverRan

    if isinstance(outcome, NeverRan):
        return "cancelled", f"cancelled before it started ({outcome.cause})"
    reason = outcome.reason
    if reason.kind == "completed":
        return "done", "completed"
    if reason.kind == "aborted":
        return "cancelled", "aborted"
    error = getattr(reason, "error", None)
    return "failed", reason.kind + (f": {error}" if error else "")
