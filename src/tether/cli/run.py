"""``tether run``: one task, headless.

The assistant's text goes to stdout; tool activity and the session id (once
the session is on disk) go to stderr. On a terminal the text streams as it
arrives; when stdout is a pipe or a file (a script reads it), the answer is
held and written once the turn is on disk, so a script that has the answer has
a stored answer; a turn that could not be stored writes nothing there
(``--stream`` streams it anyway, before it is stored). When both stdout and stderr are terminals
that take colours (:func:`~tether.cli.terminal.colours_wanted`), the answer is
rendered as Markdown and the work coloured (:class:`~tether.cli.surface.RichSurface`,
rich imported then and only then), and a spinner on stderr says what is awaited
(:class:`~tether.cli.spinner.Spinner`); otherwise everything is plain text.

Exit status: 0 when the turn completed, 130 when it was cancelled (Ctrl-C),
143 or 129 when SIGTERM or SIGHUP cancelled it, 1 otherwise, each with a
one-line reason on stderr. The first Ctrl-C cancels the turn cleanly (the log
closes with ``aborted {user}``); a second one exits at once. The exit status
is given only once the turn is on disk: a session that could not be stored
exits 1, saying so. Bytes of the task that are not UTF-8 become U+FFFD.

The agent's environment snapshot (``git status`` of the cwd, for its system
prompt) is begun before tether boots, so it runs beside the boot.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tether.agent import Agent, AgentHandle, NeverRan, TurnOutcome, UserMessage
from tether.cli.boot import PICK, UsageError, open_for, session_choice, session_line, start
from tether.cli.ending import Terminations, acknowledge_turn, dispose_reporting
from tether.cli.failures import StartRefusedError, describe
from tether.cli.output import EventLines, init_line, refused_result, turn_result
from tether.cli.surface import PlainSurface, Surface
from tether.cli.terminal import colours_wanted, is_terminal
from tether.cli.work import WorkView, follow_children, follow_progress, meter_for, shown_for
from tether.front.outcomes import turn_outcome
from tether.loop.environment import gathering_early
from tether.session import Aborted
from tether.session.store import SESSION_EVENT

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.cli.spinner import Spinner
    from tether.host import Tether

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CANCELLED = 130


def exit_of(outcome: TurnOutcome) -> tuple[int, str | None]:
    """The exit status and one-line reason of the task's turn (or of its never running)."""
    if isinstance(outcome, NeverRan):
        return EXIT_CANCELLED, "cancelled before the turn started"
    said = turn_outcome(outcome.reason)
    if said is None:
        return EXIT_OK, None
    return EXIT_CANCELLED if isinstance(outcome.reason, Aborted) else EXIT_FAILED, said


def decoded_argument(text: str) -> str:
    """A command-line argument as text: bytes that were not UTF-8 become U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def read_task(args: argparse.Namespace) -> str:
    """The task: the argument, or stdin when the argument is ``-`` or absent
    and stdin is not a terminal. Bytes that are not UTF-8 become U+FFFD.

    Raises:
        UsageError: no task was given, or it is empty.
    """
    if args.task is not None and args.task != "-":
        task = decoded_argument(args.task)
    elif args.task is None and is_terminal(sys.stdin):
        raise UsageError("run: give the task as an argument, or pipe it on stdin (or pass -)")
    else:
        task = sys.stdin.buffer.read().decode("utf-8", "replace")
    if not task.strip():
        raise UsageError("run: the task is empty")
    return task


def _task_after_resume(args: argparse.Namespace) -> None:
    """``run --resume "go on"``: a value that cannot be a session id (a space, a
    quote …) is the task, and the session is picked on the terminal."""
    resume = args.resume
    if args.task is None and resume and not _SESSION_ID_CHARS.fullmatch(resume):
        args.task, args.resume = resume, PICK


_SESSION_ID_CHARS = re.compile(r"[0-9A-Za-z_-]+")


async def run(args: argparse.Namespace) -> int:
    from tether.runtime.errors import CompositionError

    try:
        return await _checked_run(args)
    except (UsageError, CompositionError, StartRefusedError) as exc:
        # A script reading JSON gets its result line for a task that never
        # started too; the error line goes to stderr as for any command.
        status = EXIT_FAILED if isinstance(exc, StartRefusedError) else EXIT_USAGE
        _refused_result(args, str(exc), status)
        raise


async def _checked_run(args: argparse.Namespace) -> int:
    _task_after_resume(args)
    if args.mode == "ask":
        from tether.cli.asking import check_can_ask

        check_can_ask("run")
    task = read_task(args)
    cwd = str(args.cwd or os.getcwd())
    async with gathering_early(Path(cwd)):
        return await _run(args, task, cwd)


def _init_line(tether: Tether, agent: Agent) -> dict[str, object]:
    from tether.tools.registry import TOOLS

    registry = tether.runtime.ctx.get(TOOLS)
    tools = [] if registry is None else [tool.name for tool in registry.list(agent.id)]
    return init_line(agent, model=session_choice(tether, agent.session).model, tools=tools)


def _refused_result(args: argparse.Namespace, error: str, status: int) -> None:
    """In the JSON formats, the result line of a task that never started."""
    if args.output_format != "text":
        EventLines(sys.stdout).write(refused_result(error, exit_code=status))


def _show_work(
    args: argparse.Namespace,
    tether: Tether,
    agent: Agent,
    printer: Surface,
    spinner: Spinner | None,
) -> WorkView:
    """Show ``agent``'s work, and its child agents', as it happens; the view showing it."""
    view = WorkView(
        printer,
        thinking=args.show_thinking,
        meter=meter_for(tether, agent),
        status=spinner,
        summary=False,  # said last, with the exit status
        whole_output=f"tether sessions show {agent.id} prints them all",
        shown=shown_for(tether, agent),
    )
    agent.ctx.on(SESSION_EVENT, view)
    agent.ctx.defer(follow_children(tether, agent, view))
    follow_progress(agent, view)
    return view


async def _open(
    tether: Tether, args: argparse.Namespace, cwd: str, reasons: list[str]
) -> AgentHandle | None:
    """:func:`open_for`, a server's requests for input asked on the terminal when stdin
    is one (registered first: servers started with no one to ask are not told they may)."""
    if is_terminal(sys.stdin):
        from tether.cli.eliciting import answer_on_terminal

        answer_on_terminal(tether.runtime.ctx)
    return await open_for(tether, args, cwd=cwd, reasons=reasons)


async def _run(args: argparse.Namespace, task: str, cwd: str) -> int:
    tether = await start(args, model=args.model, persistent=True)
    release_logs: Callable[[], None] = lambda: None  # noqa: E731
    try:
        reasons: list[str] = []
        handle = await _open(tether, args, cwd, reasons)
        if handle is None:
            _refused_result(args, "; ".join(reasons) or "the session could not be opened", 1)
            return EXIT_FAILED
        agent = handle.agent
        print(session_line(tether, agent), file=sys.stderr)
        text_out = args.output_format == "text"
        printer, spinner = _printer_for(args)
        view = _show_work(args, tether, agent, printer, spinner)
        if args.mode == "ask" or is_terminal(sys.stdin):
            from tether.cli.asking import ask_on_terminal

            view.asks_first = args.mode == "ask"
            ask_on_terminal(agent, every_call=args.mode == "ask", on_asked=view.asked)
        lines = EventLines(sys.stdout)
        if args.output_format == "stream-json":
            lines.write(_init_line(tether, agent))
            agent.ctx.on(SESSION_EVENT, lines)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, _Interrupts(agent, printer))
        try:
            async with _on_terminal(spinner):
                with Terminations(agent) as terminations:
                    turn = agent.followup(UserMessage.text(task))
                    unstored = await acknowledge_turn(agent, turn)
        finally:
            loop.remove_signal_handler(signal.SIGINT)
        printer.end_block()
        if isinstance(printer, PlainSurface) and unstored is None:
            printer.release()  # the turn is on disk: the held answer may be read
        outcome = turn.outcome
        assert outcome is not None, "a turn handle is settled once acknowledged"
        status, reason = _verdict(outcome, printer, terminations)
        if not text_out:
            status, reason = _write_result(
                lines, agent, outcome, status=status, reason=reason, unstored=unstored, view=view
            )
        if reason is not None and unstored is None:
            print(f"tether: {reason}", file=sys.stderr)
        if reason is None and unstored is None and (usage := view.usage_line()) is not None:
            print(usage, file=sys.stderr)  # a failure is one line: this ends a completed run
        failed, release_logs = await dispose_reporting(handle, unstored, verbose=args.verbose)
        return EXIT_FAILED if failed else status
    finally:
        try:
            await tether.stop()
        finally:
            release_logs()


def _write_result(
    lines: EventLines,
    agent: Agent,
    outcome: TurnOutcome,
    *,
    status: int,
    reason: str | None,
    unstored: str | None,
    view: WorkView,
) -> tuple[int, str | None]:
    """Write the JSON result line; the exit status and reason, as writing it left them.
    ``total_cost_usd`` is what the turn cost when the model's prices are known in USD."""
    status = EXIT_FAILED if unstored is not None else status
    # The reason as a field: what failed, without the "error: " a line starts with.
    error = unstored or (reason.removeprefix("error: ") if reason is not None else None)
    stored = unstored is None
    result = turn_result(agent, outcome, exit_code=status, error=error, stored=stored)
    cost = view.turn_cost()
    result["total_cost_usd"] = cost[0] if cost is not None and cost[1] == "USD" else None
    lines.write(result)
    if lines.output_error is not None:
        return EXIT_FAILED, f"the result could not be written: {describe(lines.output_error)}"
    return status, reason


class _Interrupts:
    """Ctrl-C: the first cancels the turn cleanly, a second exits at once."""

    def __init__(self, agent: Agent, printer: Surface) -> None:
        self._agent = agent
        self._printer = printer
        self._count = 0

    def __call__(self) -> None:
        self._count += 1
        if self._count > 1:
            self._printer.end_block()
            os._exit(EXIT_CANCELLED)
        if isinstance(self._printer, PlainSurface):
            print("\ncancelling (Ctrl-C again to exit now)", file=sys.stderr)
        else:
            self._printer.line("cancelling (Ctrl-C again to exit now)", "notice")
        self._agent.cancel()


class _Discard(io.StringIO):
    """Where the answer's text goes when stdout carries JSON instead."""

    def write(self, text: str) -> int:
        return len(text)


def _printer_for(args: argparse.Namespace) -> tuple[Surface, Spinner | None]:
    """Where the work is shown, and the spinner saying what is awaited (if any)."""
    text_out = args.output_format == "text"
    if text_out and colours_wanted(sys.stdout) and colours_wanted(sys.stderr):
        from tether.cli.spinner import Spinner
        from tether.cli.surface import RichSurface

        spinner = Spinner(sys.stderr)
        return RichSurface(sys.stdout, sys.stderr, before_write=spinner.hide), spinner
    hold = not args.stream and not is_terminal(sys.stdout)
    return PlainSurface(sys.stdout if text_out else _Discard(), sys.stderr, hold=hold), None


@contextlib.asynccontextmanager
async def _on_terminal(spinner: Spinner | None) -> AsyncIterator[None]:
    """While the turn runs on a terminal: the spinner drawn, and rich imported in a
    worker thread meanwhile (awaited on leaving). Nothing without a spinner."""
    if spinner is None:
        yield
        return
    from tether.cli.surface import preload_rich

    async with spinner.running(), asyncio.TaskGroup() as tasks:
        tasks.create_task(asyncio.to_thread(preload_rich), name="preload-rich")
        yield


def _verdict(
    outcome: TurnOutcome, printer: Surface, terminations: Terminations
) -> tuple[int, str | None]:
    """The exit status and one-line reason of the turn that ran."""
    if printer.output_error is not None:
        return EXIT_FAILED, f"the answer could not be written: {describe(printer.output_error)}"
    status, reason = exit_of(outcome)
    if terminations.stopped_by is not None and status == EXIT_CANCELLED:
        # The log says "cancelled by user" (a signal is the user's stop); the
        # person is told which signal it was.
        reason = f"stopped by {terminations.stopped_by}"
    return terminations.exit_status or status, reason
