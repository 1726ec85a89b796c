"""Ask mode in the terminal: ``tether run --mode ask`` puts each tool call to the person first.

Before a call runs, the terminal shows what it will do — the call on one
line as its tool presents it (the command of a ``bash`` call, the file of a
file tool), and for a call that changes a file the diff of its change (the
tool's preview, else what the call's own arguments say), never the changed
text as arguments — and asks ``[y]es / [n]o / [a]lways``. *Always* allows what the editor's
"allow always" allows (`tether.tools.permission.remembered_as`): every edit
for an edit, the tool otherwise, and never a call that needs approval
whatever the mode (a write outside the workspace is asked every time). A
refusal, or a cancel (Ctrl-C) while the question is open, ends the call as
denied; the model is told so. ``todo`` is never asked (it changes nothing
outside the session).

The question is read from the terminal on stdin, so ask mode needs one: a
``run`` or ``chat`` whose stdin is not a terminal refuses ask mode at start
with one line rather than wait for an answer that cannot come. ``run`` reads
the answer as a line of stdin; ``chat`` takes it from its line editor (the
next line entered answers the question).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import TextIO

from msgspec.structs import replace

from tether.agent import Agent
from tether.cli.render import call_line, diff_lines
from tether.runtime import Veto
from tether.tools.execute import ToolInvocation
from tether.tools.permission import Mode, granted, needs_asking, remembered_as
from tether.tools.presentation import DEFAULT_SHOWN, ToolShown
from tether.tools.preview import ToolPreview
from tether.tools.registry import TOOLS, Shown, shown_in

Ask = Callable[[str], Awaitable[str]]
"""Puts a question (``allow this bash call? …``) to the person; returns the line answered."""


class TerminalAsker:
    """A ``tool/before-execute`` listener asking on the terminal about one agent's calls.

    ``out`` shows what a call will do; ``ask`` puts the question and returns
    the answer; ``shown`` is how the agent's tools present their calls. A
    cancel of the call while the question is open abandons the question
    (``ask`` is cancelled) and denies the call.
    """

    def __init__(self, agent: Agent, out: TextIO, ask: Ask, shown: Shown | None = None) -> None:
        self._agent = agent
        self._out = out
        self._ask = ask
        self._always: set[str] = set()
        """What "always" was answered for (`remembered_as`): tool names and ``EDITS``."""
        self._shown = shown if shown is not None else shown_in(None)

    async def before_execute(
        self,
        invocation: ToolInvocation,
        next_: Callable[[ToolInvocation], Awaitable[ToolInvocation]],
    ) -> ToolInvocation:
        tool = invocation.tool_name
        if invocation.exec.agent is not self._agent:
            return await next_(invocation)
        try:
            preview = await invocation.preview()
        except Exception:
            preview = None
        approval = None if preview is None else preview.approval
        if not needs_asking(Mode.ASK, tool, approval) or granted(self._always, tool, preview):
            return await next_(invocation)
        self._out.write(describe(invocation, preview, self._shown(tool)))
        self._out.flush()
        answer = await self._answer(invocation, f"allow this {tool} call? [y]es / [n]o / [a]lways")
        if answer == "a" and (remembered := remembered_as(tool, preview)) is not None:
            self._always.add(remembered)
        if answer not in ("y", "a"):
            raise Veto(f"the user did not allow this {tool} call")
        return await next_(replace(invocation, exec=replace(invocation.exec, approved=True)))

    async def _answer(self, invocation: ToolInvocation, question: str) -> str:
        asking = asyncio.ensure_future(self._ask(question))
        stopped: asyncio.Future[object] = asyncio.ensure_future(invocation.exec.signal.wait())
        try:
            await asyncio.wait((asking, stopped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not asking.done():
                asking.cancel()
            await asyncio.gather(asking, stopped, return_exceptions=True)
        if asking.cancelled() or asking.exception() is not None:
            # Cancelled while asking: a line typed later is nobody's answer.
            self._out.write("\n")
            return "n"
        line = asking.result()
        return line.strip().lower()[:1] if line else "n"


def describe(
    invocation: ToolInvocation, preview: ToolPreview | None, shown: ToolShown = DEFAULT_SHOWN
) -> str:
    """What the question shows of a call: its tool and target as ``shown`` presents
    them, and the diff of the change it makes — the preview's, or without one the
    change ``shown`` reads from the call's arguments."""
    arguments = invocation.shown_args
    lines = [f"\n[ask] {call_line(invocation.tool_name, arguments, shown)}"]
    diffs = preview.diffs if preview is not None else ()
    for diff in diffs:
        lines.extend(diff_lines(diff.path, diff.old_text, diff.new_text))
    if not diffs:
        places = shown.locations(arguments, invocation.exec.cwd)
        path = places[0].path if places else invocation.tool_name
        for old, new in shown.changes(arguments):
            lines.extend(diff_lines(path, old, new))
    return "\n".join(lines) + "\n"


def check_can_ask(command: str) -> None:
    """Refuse ask mode where no one can answer.

    Raises:
        UsageError: stdin is not a terminal.
    """
    from tether.cli.boot import UsageError
    from tether.cli.terminal import is_terminal

    if not is_terminal(sys.stdin):
        raise UsageError(
            f"{command}: --mode ask asks on the terminal, and stdin is not one; give --mode auto"
        )


def ask_on_terminal(agent: Agent, ask: Ask | None = None, out: TextIO | None = None) -> None:
    """Put ``agent``'s tool calls to the person on the terminal, for as long as it lives.

    By default the call is shown on stderr and the answer read as a line of
    stdin; ``chat`` passes its own ``ask`` (its line editor) and ``out``.
    """
    from tether.tools.execute import BEFORE_EXECUTE

    async def read_stdin(question: str) -> str:
        sys.stderr.write(f"{question}: ")
        sys.stderr.flush()
        return await asyncio.to_thread(sys.stdin.readline)

    shown = shown_in(agent.ctx.get(TOOLS), agent.id)
    asker = TerminalAsker(agent, out or sys.stderr, ask or read_stdin, shown)
    agent.ctx.on(BEFORE_EXECUTE, asker.before_execute)
