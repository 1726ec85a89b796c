"""``tether chat``: an interactive session in the terminal.

Lines typed are prompts; a prompt typed while a turn runs is queued as a
follow-up. Commands: ``/steer TEXT`` steers the running turn, ``/cancel``
cancels it (as does Ctrl-C, which never leaves the chat), ``/sessions`` lists
stored sessions, ``/quit`` (or end of input) leaves. The conversation is the
session log, so ``--resume ID`` continues it after a restart.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from tether.agent import Agent, AgentStatus, UserMessage
from tether.agent.events import AGENT_STATUS
from tether.cli.boot import open_agent, start
from tether.cli.run import StreamPrinter
from tether.host import Tether
from tether.session.store import SESSION_EVENT

HELP = "commands: /steer TEXT, /cancel, /sessions, /quit  (Ctrl-C cancels the running turn)"


async def _stdin_lines() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def chat(args: argparse.Namespace) -> int:
    tether = await start(args, model=args.model)
    try:
        handle = await open_agent(tether, resume=args.resume, cwd=os.getcwd())
        if handle is None:
            return 1
        agent = handle.agent
        print(f"session {agent.id} — {HELP}", file=sys.stderr)
        printer = StreamPrinter(sys.stdout, sys.stderr)
        agent.ctx.on(SESSION_EVENT, printer)

        def on_status(_agent: object, status: AgentStatus) -> None:
            if status is AgentStatus.IDLE:
                printer.end_line()
                sys.stderr.write("you> ")
                sys.stderr.flush()

        agent.ctx.on(AGENT_STATUS, on_status)

        def on_interrupt() -> None:
            if agent.status is AgentStatus.RUNNING:
                print("\n(cancelled)", file=sys.stderr)
                agent.cancel()
            else:
                print(f"\n{HELP}", file=sys.stderr)

        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, on_interrupt)
        sys.stderr.write("you> ")
        sys.stderr.flush()
        try:
            reader = await _stdin_lines()
            while True:
                raw = await reader.readline()
                if not raw:
                    break
                line = raw.decode(errors="replace").strip()
                if line in ("/quit", "/exit"):
                    break
                if line:
                    await _handle(line, agent, tether)
            await agent.when_idle()
        finally:
            loop.remove_signal_handler(signal.SIGINT)
        printer.end_line()
        await handle.dispose()
        return 0
    finally:
        await tether.stop()


async def _handle(line: str, agent: Agent, tether: Tether) -> None:
    """One typed line: a command, or a prompt (queued if a turn is running)."""
    if line == "/cancel":
        agent.cancel()
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
