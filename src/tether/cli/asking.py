"""Ask mode in the terminal: ``tether run --mode ask`` puts each tool call to the person first.

Before a call runs, the terminal shows what it will do — the command of a
``bash`` call, the file of a file tool, and for an edit the lines it changes
— and asks ``[y]es / [n]o / [a]lways``. *Always* allows that tool for the
rest of the run. A refusal, or a cancel (Ctrl-C) while the question is open,
ends the call as denied; the model is told so. ``todo`` is never asked (it
changes nothing outside the session).

The question is read from the terminal on stdin, so ask mode needs one: a
``run`` whose stdin is not a terminal refuses ask mode at start with one
line rather than wait for an answer that cannot come.
"""

from __future__ import annotations

import asyncio
import difflib
import sys
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TextIO

from tether.agent import Agent
from tether.runtime import Veto
from tether.tools.execute import ToolInvocation

UNASKED = frozenset({"todo"})
"""Tools that run without asking: they change nothing outside the session."""

MAX_DIFF_LINES = 40


class TerminalAsker:
    """A ``tool/before-execute`` listener asking on the terminal about one agent's calls."""

    def __init__(self, agent: Agent, out: TextIO, read_line: Callable[[], str]) -> None:
        self._agent = agent
        self._out = out
        self._read_line = read_line
        self._always: set[str] = set()

    async def before_execute(
        self,
        invocation: ToolInvocation,
        next_: Callable[[ToolInvocation], Awaitable[ToolInvocation]],
    ) -> ToolInvocation:
        tool = invocation.tool_name
        if invocation.exec.agent is not self._agent or tool in UNASKED or tool in self._always:
            return await next_(invocation)
        self._out.write(await describe(invocation))
        self._out.write(f"allow this {tool} call? [y]es / [n]o / [a]lways: ")
        self._out.flush()
        answer = await self._answer(invocation)
        if answer == "a":
            self._always.add(tool)
        if answer not in ("y", "a"):
            raise Veto(f"the user did not allow this {tool} call")
        return await next_(replace(invocation, exec=replace(invocation.exec, approved=True)))

    async def _answer(self, invocation: ToolInvocation) -> str:
        reading = asyncio.ensure_future(asyncio.to_thread(self._read_line))
        stopped: asyncio.Future[object] = asyncio.ensure_future(invocation.exec.signal.wait())
        try:
            await asyncio.wait((reading, stopped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not reading.done():
            # Cancelled while asking: the line, if one comes, is nobody's answer.
            self._out.write("\n")
            return "n"
        line = reading.result()
        return line.strip().lower()[:1] if line else "n"


async def describe(invocation: ToolInvocation) -> str:
    """What the question shows of a call: its tool and target, and an edit's diff."""
    arguments = invocation.args
    target = next(
        (
            str(arguments[key])
            for key in ("command", "path", "pattern", "prompt")
            if isinstance(arguments.get(key), str)
        ),
        "",
    )
    lines = [f"\n[ask] {invocation.tool_name} {target}".rstrip()]
    try:
        preview = await invocation.preview()
    except Exception:
        preview = None
    for diff in preview.diffs if preview is not None else ():
        old = (diff.old_text or "").splitlines()
        new = diff.new_text.splitlines()
        shown = list(difflib.unified_diff(old, new, diff.path, diff.path, lineterm=""))
        if len(shown) > MAX_DIFF_LINES:
            cut = len(shown) - MAX_DIFF_LINES
            shown = [*shown[:MAX_DIFF_LINES], f"… {cut} more lines"]
        lines.extend(shown)
    return "\n".join(lines) + "\n"


def check_can_ask(command: str) -> None:
    """Refuse ask mode where no one can answer.

    Raises:
        UsageError: stdin is not a terminal.
    """
    from tether.cli.boot import UsageError

    try:
        terminal = sys.stdin.isatty()
    except (OSError, ValueError):
        terminal = False
    if not terminal:
        raise UsageError(
            f"{command}: --mode ask asks on the terminal, and stdin is not one; give --mode auto"
        )


def ask_on_terminal(agent: Agent) -> None:
    """Put ``agent``'s tool calls to the person on the terminal, for as long as it lives."""
    from tether.tools.execute import BEFORE_EXECUTE

    asker = TerminalAsker(agent, sys.stderr, sys.stdin.readline)
    agent.ctx.on(BEFORE_EXECUTE, asker.before_execute)
