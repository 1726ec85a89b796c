"""``tether chat``: an interactive session in the terminal.

Lines typed are prompts; a prompt typed while a turn runs is queued as a
follow-up. Commands: ``/steer TEXT`` steers the running turn, ``/cancel``
cancels it (as does Ctrl-C, which never leaves the chat), ``/compact``
summarizes the older part of the conversation (Ctrl-C cancels that too),
``/sessions`` lists stored sessions, ``/quit`` (or end of input) leaves. The conversation is the
session log, so ``--resume ID`` continues it after a restart.

The next ``you>`` prompt appears only once the turn before it is on disk;
a turn that could not be stored is reported instead, on one line (the chat
goes on, and writing resumes when the disk allows). SIGTERM and SIGHUP cancel
the running turn and leave, with exit status 143 or 129.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable

from tether.agent import Agent, AgentStatus, CancelCause, UserMessage
from tether.agent.events import AGENT_STATUS
from tether.cli.boot import open_for, start
from tether.cli.ending import Terminations, acknowledge, dispose_reporting
from tether.cli.run import StreamPrinter
from tether.host import Tether
from tether.runtime.signal import CancelSignal
from tether.session.store import SESSION_EVENT

HELP = (
    "commands: /steer TEXT, /cancel, /compact, /sessions, /quit  (Ctrl-C cancels the running turn)"
)


class _Compacting:
    """The ``/compact`` in progress, if any: what Ctrl-C cancels when no turn runs."""

    def __init__(self) -> None:
        self.signal: CancelSignal | None = None


async def _stdin_lines() -> tuple[asyncio.StreamReader, Callable[[], None]]:
    """Lines typed, and the function that ends them (as if input had ended)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _protocol = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
    )

    def end() -> None:
        transport.close()
        if not reader.at_eof():
            reader.feed_eof()

    return reader, end


class _Prompter:
    """Shows ``you>`` each time the agent goes idle, once the turn before is on disk."""

    def __init__(self, agent: Agent, printer: StreamPrinter) -> None:
        self._agent = agent
        self._printer = printer
        self._due = asyncio.Event()

    def on_status(self, _agent: object, status: AgentStatus) -> None:
        if status is AgentStatus.IDLE:
            self._due.set()

    async def run(self) -> None:
        while True:
            await self._due.wait()
            self._due.clear()
            unstored = await acknowledge(self._agent)
            if unstored is not None:
                self._printer.end_line()
                print(f"tether: {unstored}", file=sys.stderr)
            if self._agent.status is AgentStatus.RUNNING:
                # A queued prompt already runs: its answer may be mid-line, and
                # its own end brings the prompt.
                continue
            self._printer.end_line()
            sys.stderr.write("you> ")
            sys.stderr.flush()


async def chat(args: argparse.Namespace) -> int:
    tether = await start(args, model=args.model, persistent=True)
    release_logs: Callable[[], None] = lambda: None  # noqa: E731
    try:
        handle = await open_for(tether, args, cwd=os.getcwd())
        if handle is None:
            return 1
        agent = handle.agent
        print(f"session {agent.id} — {HELP}", file=sys.stderr)
        printer = StreamPrinter(sys.stdout, sys.stderr)
        agent.ctx.on(SESSION_EVENT, printer)
        prompter = _Prompter(agent, printer)
        agent.ctx.on(AGENT_STATUS, prompter.on_status)
        prompting = asyncio.get_running_loop().create_task(prompter.run(), name="chat-prompt")

        loop = asyncio.get_running_loop()
        compacting = _Compacting()
        loop.add_signal_handler(signal.SIGINT, _on_interrupt, agent, compacting)
        sys.stderr.write("you> ")
        sys.stderr.flush()
        try:
            reader, end_input = await _stdin_lines()
            with Terminations(agent, then=end_input) as terminations:
                while True:
                    raw = await reader.readline()
                    if not raw:
                        break
                    line = raw.decode(errors="replace").strip()
                    if line in ("/quit", "/exit"):
                        break
                    if line:
                        await _handle(line, agent, tether, compacting)
                await agent.when_idle()
                final = await acknowledge(agent)
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            prompting.cancel()
            await asyncio.gather(prompting, return_exceptions=True)
        printer.end_line()
        failed, release_logs = await dispose_reporting(handle, final, verbose=args.verbose)
        if terminations.exit_status is not None:
            return terminations.exit_status
        return 1 if failed else 0
    finally:
        try:
            await tether.stop()
        finally:
            release_logs()


def _on_interrupt(agent: Agent, compacting: _Compacting) -> None:
    """Ctrl-C: cancel the running turn or ``/compact``; when idle, show the help."""
    if compacting.signal is not None:
        compacting.signal.cancel(CancelCause.USER)
    elif agent.status is AgentStatus.RUNNING:
        print("\n(cancelled)", file=sys.stderr)
        agent.cancel()
    else:
        print(f"\n{HELP}", file=sys.stderr)


async def _handle(line: str, agent: Agent, tether: Tether, compacting: _Compacting) -> None:
    """One typed line: a command, or a prompt (queued if a turn is running)."""
    if line == "/cancel":
        agent.cancel()
    elif line == "/compact":
        await _compact(agent, tether, compacting)
    elif line.startswith("/steer "):
        agent.steer(UserMessage.text(line[len("/steer ") :]))
    elif line == "/sessions":
        for summary in await tether.persistence.list():
            print(f"{summary.id}\t{summary.turn_count} turns\t{summary.title or ''}")
    elif line.startswith("/"):
        print(f"unknown command {line.split(maxsplit=1)[0]!r}; {HELP}", file=sys.stderr)
    else:
        running = agent.status is AgentStatus.RUNNING
        agent.followup(UserMessage.text(line))
        if running:
            print("(queued: it runs when the current turn ends)", file=sys.stderr)


async def _compact(agent: Agent, tether: Tether, compacting: _Compacting) -> None:
    """``/compact``: summarize the older part of the conversation now, then prompt again."""
    from tether.loop.compaction import COMPACTION, CompactionCancelledError, CompactionError

    service = tether.runtime.ctx.get(COMPACTION)
    if service is None:
        print("tether: /compact needs the agent loop, which is not running", file=sys.stderr)
        return
    compacting.signal = CancelSignal()
    print("(compacting the conversation; Ctrl-C cancels)", file=sys.stderr)
    try:
        compacted = await service.compact(agent, signal=compacting.signal)
    except CompactionCancelledError:
        print("(compaction cancelled; the conversation is unchanged)", file=sys.stderr)
    except CompactionError as exc:
        print(f"tether: cannot compact: {exc}", file=sys.stderr)
    else:
        if compacted is None:
            print("(nothing to compact yet)", file=sys.stderr)
    finally:
        compacting.signal = None
    if agent.status is AgentStatus.IDLE:
        sys.stderr.write("you> ")
        sys.stderr.flush()
