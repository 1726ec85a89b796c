"""``tether sessions``: list, show, export, tail, rewind, diff, cancel, delete stored sessions."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tether.cli.boot import PERSISTENCE_ROW, resolve_session, row_problem, start
from tether.cli.render import transcript
from tether.session import Aborted
from tether.tools.registry import TOOLS, shown_in

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    from tether.agent import TurnEnded
    from tether.front.follow import SessionViews
    from tether.host import Tether
    from tether.persist.backends.base import SessionSummary
    from tether.persist.cluster import Cluster
    from tether.persist.service import Persistence
    from tether.session import Session
    from tether.session.stored import StoredEvent
    from tether.tools.registry import Shown

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_ID = 2
NAMING_COMMANDS = frozenset(
    {"show", "export", "tail", "cancel", "delete", "trace", "rewind", "diff"}
)
"""The subcommands that name a stored session: its id, or a unique prefix of one."""

CANCEL_WAIT = 30.0
"""How long ``sessions cancel`` follows the log for the stop (longer than a default lease TTL,
so a holder that dies meanwhile is seen gone)."""

RUN_LOOK_AGAIN = 0.25
"""How often ``sessions tail`` of a run no worker took yet looks whether its session is
stored, in seconds (a take rings no doorbell)."""

DEFAULT_OTLP = "http://127.0.0.1:4318"
"""Where ``sessions trace`` sends without ``--endpoint`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``."""

HOLDER_CHECK = 0.5
"""How often ``sessions cancel`` checks that the holder still has the session live."""


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


async def _listed(persistence: Persistence, args: argparse.Namespace) -> list[SessionSummary]:
    """The summaries ``sessions list`` shows: newest activity first, filtered and cut."""
    summaries = await persistence.list()
    if args.cwd is not None:
        wanted = str(args.cwd.resolve())
        summaries = [s for s in summaries if s.cwd == wanted]
    if args.search:
        needle = args.search.casefold()
        found: list[SessionSummary] = []
        for summary in summaries:
            if args.limit is not None and len(found) >= args.limit:
                break
            titled = summary.title is not None and needle in summary.title.casefold()
            if titled or await _prompted(persistence, summary, needle):
                found.append(summary)
        summaries = found
    return summaries if args.limit is None else summaries[: args.limit]


async def _prompted(persistence: Persistence, summary: SessionSummary, needle: str) -> bool:
    """Whether a prompt of the session holds ``needle`` (casefolded)."""
    from tether.content import TextBlock
    from tether.session import UserMessageEvent

    if summary.error is not None:
        return False
    try:
        session = await persistence.load(summary.id)
    except Exception:
        return False  # unreadable now: listed without its prompts
    return any(
        needle in block.text.casefold()
        for event in session.events
        if isinstance(event.payload, UserMessageEvent)
        for block in event.payload.content
        if isinstance(block, TextBlock)
    )


def read_export(path: Path) -> tuple[dict[str, object], list[StoredEvent]]:
    """The header and events of a file ``sessions export`` wrote (JSON Lines).

    Raises:
        ImportFileError: the file cannot be read, or a line is not what an
            export holds (the message names the line).
    """
    import msgspec

    from tether.session.stored import StoredEvent

    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise ImportFileError(f"{path}: {exc.strerror or exc}") from None
    if not lines:
        raise ImportFileError(f"{path}: empty; expected a session exported as JSON Lines")
    try:
        first = json.loads(lines[0])
    except ValueError as exc:
        raise ImportFileError(f"{path} line 1: not JSON ({exc})") from None
    if not isinstance(first, dict) or not isinstance(first.get("header"), dict):
        raise ImportFileError(f'{path} line 1: expected the header line {{"header": {{…}}}}')
    decoder = msgspec.json.Decoder(StoredEvent)
    events = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            events.append(decoder.decode(line))
        except msgspec.DecodeError as exc:
            raise ImportFileError(f"{path} line {number}: not an event record ({exc})") from None
    return first["header"], events


class ImportFileError(Exception):
    """A file given to ``sessions import`` is not a session export."""


async def _delegated(persistence: Persistence, session_id: str) -> list[str]:
    """The lines of the tree of child sessions ``session_id`` delegated to (``task``
    calls), each ``<id>  <task description>``, a level deeper indented by two spaces;
    none if it delegated nothing."""
    lines: list[str] = []
    for depth, child in await _delegation_tree(persistence, session_id):
        delegation = child.delegation
        task = (delegation.task if delegation is not None else "") or "(no description)"
        lines.append(f"{'  ' * depth}{child.id}  {task}")
    return ["", "delegated to:", *lines] if lines else []


async def _delegation_tree(
    persistence: Persistence, session_id: str
) -> list[tuple[int, SessionSummary]]:
    """The sessions ``session_id`` delegated to, depth first (each with its depth, 1 for
    a child), children in the order they were created."""
    below: dict[str, list[SessionSummary]] = {}
    for summary in await persistence.list():
        parent = summary.delegator
        if parent is not None:
            below.setdefault(parent, []).append(summary)
    tree: list[tuple[int, SessionSummary]] = []
    seen = {session_id}

    def walk(parent: str, depth: int) -> None:
        children = sorted(below.get(parent, ()), key=lambda s: (s.created_at or 0.0, s.id))
        for child in children:
            if child.id in seen:
                continue
            seen.add(child.id)
            tree.append((depth, child))
            walk(child.id, depth + 1)

    walk(session_id, 1)
    return tree


async def _trace(tether: Tether, persistence: Persistence, args: argparse.Namespace) -> int:
    """``sessions trace``: send the spans of a stored session, and of the sessions it
    delegated to, to an OTLP/HTTP endpoint; the exit status."""
    import asyncio

    try:
        from tether.telemetry.otlp import ExportFailedError, OtlpSink
    except ImportError as exc:
        print(
            f"tether: sessions trace needs the telemetry packages ({exc.name} is missing): "
            "pip install 'tether[telemetry]'",
            file=sys.stderr,
        )
        return EXIT_FAILED
    from tether.llm.service import LLM
    from tether.telemetry.export import SessionTrace, catalog_pricing, trace_parent

    llm = tether.runtime.ctx.get(LLM)
    pricing = None if llm is None else catalog_pricing(llm.catalog)
    endpoint = args.endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_OTLP
    ids = [args.id] + [c.id for _, c in await _delegation_tree(persistence, args.id)]
    loaded: dict[str, Session] = {}

    async def load(session_id: str) -> Session | None:
        if session_id not in loaded:
            try:
                loaded[session_id] = await persistence.load(session_id)
            except Exception:
                return None
        return loaded[session_id]

    sink = OtlpSink(endpoint, None, timeout=args.timeout)
    sent = 0
    try:
        for session_id in ids:
            session = await load(session_id)
            if session is None:
                print(f"tether: session {session_id} cannot be read; not traced", file=sys.stderr)
                continue
            parent = await trace_parent(session.header, load)
            trace = SessionTrace.of(session, parent, content=args.content, pricing=pricing)
            spans = trace.take(session.events)
            await asyncio.to_thread(sink.send, spans)
            sent += len(spans)
    except ExportFailedError as exc:
        print(f"tether: {exc} ({endpoint})", file=sys.stderr)
        return EXIT_FAILED
    finally:
        await asyncio.to_thread(sink.close)
    delegated = f" and {len(ids) - 1} delegated" if len(ids) > 1 else ""
    print(f"sent {sent} spans of session {args.id}{delegated} to {endpoint}", file=sys.stderr)
    return EXIT_OK


async def _say_if_live(persistence: Persistence, session: Session) -> None:
    """On stderr: the session is open in a running process (on PostgreSQL: on which
    host), and its turn is not over."""
    holder = await persistence.holder(session.id)
    if holder is None:
        return
    where = holder.where if holder.host is None else f"{holder.where} (pid {holder.pid})"
    running = "" if session.open_turn is None else f"; turn {session.open_turn} is still running"
    print(f"tether: session {session.id} is open {where}{running}", file=sys.stderr)


async def _print_list(persistence: Persistence, args: argparse.Namespace, *, shared: bool) -> None:
    """``sessions list``: one line per session; with ``shared`` (sessions in
    PostgreSQL) the last column says which host has each live. On a terminal
    the columns are aligned under a header and the title cut to its width;
    elsewhere each line is tab-separated, for scripts."""
    summaries = await _listed(persistence, args)
    if not summaries:
        print("no sessions", file=sys.stderr)
        return
    rows = [_list_row(summary, shared=shared) for summary in summaries]
    if not sys.stdout.isatty():
        for row in rows:
            print("\t".join(row))
        return
    header = ["ID", "CWD", "LAST ACTIVE", "TURNS", "TITLE"] + (["HOLDER"] if shared else [])
    for line in _aligned([header, *rows], width=shutil.get_terminal_size().columns):
        print(line)


async def _await_run(cluster: Cluster | None, session_id: str) -> int | None:
    """For ``sessions tail`` of a submitted run whose session no worker stored yet:
    wait until it is stored (``None``: tail it), or say why it never will be and
    return the exit status. ``None`` at once when ``session_id`` is no such run."""
    import asyncio

    if cluster is None:
        return None
    run = await asyncio.to_thread(cluster.runs.get, session_id)
    said = False
    while run is not None and not await asyncio.to_thread(cluster.stored, session_id):
        if run.state not in ("queued", "running"):
            print(
                f"tether: run {session_id} is {run.state} ({run.outcome}); it never stored "
                "a session",
                file=sys.stderr,
            )
            return EXIT_FAILED
        if not said:
            print(f"run {session_id} is {run.state}; waiting for its session", file=sys.stderr)
            said = True
        await asyncio.sleep(RUN_LOOK_AGAIN)
        run = await asyncio.to_thread(cluster.runs.get, session_id)
    return None


async def _cancel_queued(cluster: Cluster | None, session_id: str) -> bool:
    """Cancel the submitted run ``session_id`` if no worker took it yet; whether it did
    (saying so). A run a worker took is cancelled as any live session is."""
    import asyncio

    if cluster is None or not await asyncio.to_thread(cluster.runs.cancel_queued, session_id):
        return False
    print(f"run {session_id} cancelled before any worker took it", file=sys.stderr)
    return True


async def _print_runs(cluster: Cluster | None, args: argparse.Namespace) -> int:
    """``sessions list --queued`` / ``--running``: submitted runs in that state, in the
    order workers take them, a tab-separated line each: id, state, attempts (of the
    most), worker, queue, priority, task."""
    import asyncio

    if cluster is None:
        print("tether: runs are queued in PostgreSQL: set TETHER_DATABASE_URL", file=sys.stderr)
        return EXIT_FAILED
    state = "queued" if args.queued else "running"
    runs = await asyncio.to_thread(cluster.runs.list, [state])
    rows = [
        [
            run.session_id,
            run.state,
            f"{run.attempts}/{run.max_attempts}",
            run.worker or "-",
            run.queue,
            str(run.priority),
            " ".join(run.task.split()),
        ]
        for run in runs[: args.limit]
    ]
    for row in rows:
        print("\t".join(row))
    return EXIT_OK


def _list_row(summary: SessionSummary, *, shared: bool) -> list[str]:
    title = summary.title or ("(unreadable: " + summary.error + ")" if summary.error else "")
    row = [
        summary.id,
        summary.cwd or "-",
        _when(summary.last_activity),
        str(summary.turn_count),
        " ".join(title.split()),
    ]
    if shared:
        row.append(f"live on {summary.holder}" if summary.holder else "not live")
    return row


TITLE_COLUMN = 4


def _aligned(rows: list[list[str]], *, width: int) -> list[str]:
    """``rows`` as lines of columns padded to their widest cell (``TURNS``
    right-aligned), the title column cut so a line fits in ``width``."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    others = sum(w for column, w in enumerate(widths) if column != TITLE_COLUMN)
    room = width - others - 2 * (len(widths) - 1)
    widths[TITLE_COLUMN] = max(12, min(widths[TITLE_COLUMN], room))
    lines = []
    for row in rows:
        cells = []
        for column, text in enumerate(row):
            size = widths[column]
            cell = text if len(text) <= size else text[: size - 1] + "…"
            cells.append(cell.rjust(size) if column == TITLE_COLUMN - 1 else cell.ljust(size))
        lines.append("  ".join(cells).rstrip())
    return lines


async def _cancel(
    views: SessionViews, cluster: Cluster | None, session_id: str, *, wait: bool
) -> int:
    """``sessions cancel``: ask the host that has the session live to cancel its work,
    then (unless ``wait`` is false) follow the log until that host wrote the stop.

    Exit 0: the turn is over (or none was running); 1: no host has the session
    live, or its holder went away — before the cancel or after it — leaving
    the turn open, or no stop was seen in :data:`CANCEL_WAIT` seconds; 2: not
    a session id.

    Raises:
        SessionNotFoundError, SessionNotLiveError: nothing is stored under the
            id; no host has it live and no turn of it is left open.
    """
    from tether.persist.backends.errors import InvalidSessionIdError
    from tether.persist.backends.records import validate_session_id
    from tether.persist.cluster import SessionNotLiveError

    persistence = views.persistence
    assert persistence is not None, "sessions commands run where sessions are stored"

    if cluster is None:
        print(
            "tether: sessions cancel needs sessions shared in PostgreSQL (set TETHER_DATABASE_URL)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    try:
        validate_session_id(session_id)
    except InvalidSessionIdError as exc:
        print(f"tether: {exc}", file=sys.stderr)
        return EXIT_BAD_ID
    if not wait:
        host = await cluster.cancel(session_id)
        print(f"cancel of {session_id} sent to host {host}", file=sys.stderr)
        return EXIT_OK
    # Read as stored (an open turn left open, whether or not its holder still
    # runs) before the cancel is sent: the stop is among the events after these.
    session = await persistence.load(session_id, as_stored=True)
    try:
        host = await cluster.cancel(session_id)
    except SessionNotLiveError as exc:
        if session.open_turn is None or exc.last_host is None:
            raise
        host = exc.last_host  # its holder let it go before the cancel: the log says the rest
    else:
        print(f"cancel of {session_id} sent to host {host}", file=sys.stderr)
        if session.open_turn is None:
            print(f"session {session_id} has no turn running on host {host}: nothing to stop")
            return EXIT_OK
    ended = await _stop_of(views, session)
    if ended is None:
        return _not_stopped(session, host, left=await persistence.holder(session_id) is None)
    reason = ended.reason
    how = f"{reason.kind}, cause {reason.cause}" if isinstance(reason, Aborted) else reason.kind
    print(
        f"session {session_id}: turn {ended.turn} ended ({how}) on host {host}, seq {ended.end_seq}"
    )
    return EXIT_OK


async def _stop_of(views: SessionViews, session: Session) -> TurnEnded | None:
    """How the open turn of ``session`` (read as stored) ended, followed in its log;
    ``None`` when its holder let it go without ending it, or after :data:`CANCEL_WAIT`
    seconds."""
    import asyncio

    from tether.agent import TurnEnded
    from tether.front.follow import following_turn

    async with following_turn(views, session, holder_check=HOLDER_CHECK) as turn:
        try:
            async with asyncio.timeout(CANCEL_WAIT):
                outcome = await turn.settled()
        except TimeoutError:
            return None
    return outcome if isinstance(outcome, TurnEnded) else None


def _not_stopped(session: Session, host: str, *, left: bool) -> int:
    """Say that no stop of ``session``'s open turn was seen (its holder ``left`` it
    without one, or still has it live); the exit status."""
    if left:
        print(
            f"tether: host {host} let session {session.id} go without stopping turn "
            f"{session.open_turn}; the turn is closed (interrupted) when the session is "
            "resumed",
            file=sys.stderr,
        )
    else:
        print(
            f"tether: no stop of session {session.id} in its log after {CANCEL_WAIT:g} s;"
            f" host {host} still has it live",
            file=sys.stderr,
        )
    return EXIT_FAILED


async def _tail(views: SessionViews, session_id: str, after: int) -> int:
    """Print the session's events after ``after`` as JSON lines, then each new one as
    it is stored (on any host), until SIGINT or SIGTERM; the exit status, 128 + the
    signal's number.

    Raises:
        LogStoreError: the log was deleted or damaged while followed.
    """
    import asyncio
    import signal

    from tether.persist.backends.errors import LogStoreError
    from tether.persist.backends.records import encode_json

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    stopped_by: list[int] = []

    def stopping_on(signum: int) -> None:
        stopped_by.append(signum)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping_on, signum)
    reader_gone = _when_the_reader_goes(loop, stop.set)

    failed: list[LogStoreError] = []

    async def follow() -> None:
        try:
            async for batch in views.follow(session_id, after, whole=False):
                for event in batch:
                    print(encode_json(event.to_record()))
                sys.stdout.flush()
        except LogStoreError as exc:  # deleted or damaged meanwhile: said as one line
            failed.append(exc)
        except BrokenPipeError:  # `tether sessions tail ID | head`: the reader has enough
            _drop_stdout()

    try:
        async with asyncio.TaskGroup() as group:
            following = group.create_task(follow())
            stopping = group.create_task(stop.wait())
            done, _ = await asyncio.wait((following, stopping), return_when="FIRST_COMPLETED")
            for task in (following, stopping):
                if task not in done:
                    task.cancel()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        reader_gone()
    if failed:
        raise failed[0]
    return 128 + stopped_by[0] if stopped_by else EXIT_OK


def _when_the_reader_goes(
    loop: asyncio.AbstractEventLoop, then: Callable[[], None]
) -> Callable[[], object]:
    """Call ``then`` once stdout is a pipe whose reader closed it (as ``tail -f``
    does: a follower with nothing new to write would not notice otherwise);
    returns the function that stops watching. Nothing is watched when stdout is
    not a pipe."""
    import stat

    fd = sys.stdout.fileno()
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        return lambda: None

    def closed() -> None:
        # A pipe's write end polls as readable only with an error: its reader closed.
        loop.remove_reader(fd)
        _drop_stdout()
        then()

    loop.add_reader(fd, closed)
    return lambda: loop.remove_reader(fd)


def _drop_stdout() -> None:
    """Point stdout at /dev/null: its reader is gone, and a final flush must not fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


async def _show(persistence: Persistence, shown: Shown, args: argparse.Namespace) -> None:
    """``sessions show``: the parent it branched from (if a fork), the transcript, the
    sessions it delegated to; on stderr, whether it is live elsewhere."""
    from tether.cli.rewind import branch_lines

    session = await persistence.load(args.id)
    transcribed = transcript(session, thinking=args.thinking, shown=shown)
    for line in (*branch_lines(session), *_worktree_lines(session), *transcribed):
        print(line)
    for line in await _delegated(persistence, session.id):
        print(line)
    await _say_if_live(persistence, session)


def _worktree_lines(session: Session) -> list[str]:
    """For ``sessions show``: the git worktree the session's agent owned (``task`` with
    ``isolation: worktree``), and whether it is still on disk (kept: it had changes)."""
    from tether.session.worktree import WorktreeCreated

    lines = []
    for event in session.events:
        if isinstance(event.payload, WorktreeCreated):
            worktree = event.payload
            state = "kept" if os.path.isdir(worktree.path) else "removed"
            lines.append(
                f"(works in git worktree {worktree.path}, branch {worktree.branch}: {state})"
            )
    return lines


async def sessions(args: argparse.Namespace) -> int:
    from tether.cli.rewind import REWIND_ERRORS, rewind_command
    from tether.front.follow import SessionViews
    from tether.persist.backends.errors import LogStoreError
    from tether.persist.cluster import CLUSTER
    from tether.persist.service import PERSISTENCE
    from tether.session import SessionError

    tether = await start(args, with_model=False, quiet_rows=(PERSISTENCE_ROW,))
    try:
        persistence = tether.runtime.ctx.get(PERSISTENCE)
        if persistence is None:
            reason = row_problem(tether, PERSISTENCE_ROW)
            print(f"tether: stored sessions cannot be read ({reason})", file=sys.stderr)
            return EXIT_FAILED
        try:
            if args.sessions_command == "cancel" and await _cancel_queued(
                tether.runtime.ctx.get(CLUSTER), args.id
            ):
                return EXIT_OK
            if args.sessions_command == "tail" and (
                waited := await _await_run(tether.runtime.ctx.get(CLUSTER), args.id)
            ):
                return waited
            if args.sessions_command in NAMING_COMMANDS:
                # A session no stored one matches is a bad argument (exit 2).
                args.id = await resolve_session(tether, args.id, cwd=os.getcwd())
            if args.sessions_command == "list" and (args.queued or args.running):
                return await _print_runs(tether.runtime.ctx.get(CLUSTER), args)
            if args.sessions_command == "list":
                await _print_list(
                    persistence, args, shared=tether.runtime.ctx.get(CLUSTER) is not None
                )
            elif args.sessions_command == "tail":
                return await _tail(SessionViews(tether.sessions, persistence), args.id, args.after)
            elif args.sessions_command == "cancel":
                views = SessionViews(tether.sessions, persistence)
                cluster = tether.runtime.ctx.get(CLUSTER)
                return await _cancel(views, cluster, args.id, wait=not args.no_wait)
            elif args.sessions_command == "trace":
                return await _trace(tether, persistence, args)
            elif args.sessions_command == "import":
                header, events = read_export(args.file)
                session = await persistence.import_log(header, events)
                print(f"imported {session.id} ({len(session.events)} events)", file=sys.stderr)
            elif args.sessions_command == "show":
                await _show(persistence, shown_in(tether.runtime.ctx.get(TOOLS), args.id), args)
            elif args.sessions_command == "export":
                session = await persistence.load(args.id)
                await _say_if_live(persistence, session)
                if args.format == "md":
                    shown = shown_in(tether.runtime.ctx.get(TOOLS), session.id)
                    for line in transcript(session, markdown=True, shown=shown):
                        print(line)
                else:
                    print(json.dumps({"header": session.header.to_record()}, ensure_ascii=False))
                    for event in session.events:
                        print(json.dumps(event.to_record(), ensure_ascii=False))
            elif args.sessions_command in ("rewind", "diff"):
                return await rewind_command(tether, persistence, args)
            elif args.sessions_command == "delete":
                await persistence.delete(args.id)
                print(f"deleted {args.id}", file=sys.stderr)
        except (LogStoreError, SessionError, LookupError, ImportFileError, *REWIND_ERRORS) as exc:
            print(f"tether: {exc}", file=sys.stderr)
            return EXIT_FAILED
        return EXIT_OK
    finally:
        await tether.stop()
