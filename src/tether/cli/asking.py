"""Ask mode in the terminal: ``tether run --mode ask`` puts each tool call to the person first.

Before a call runs, the terminal shows what it will do — the call on one
line as its tool presents it (the command of a ``bash`` call, the file of a
file tool), and for a call that changes a file the diff of its change (the
tool's preview, else what the call's own arguments say), never the changed
text as arguments — and asks ``[y]es / [n]o / [a]lways allow
Bash(git status:*)``, naming the rule *always* writes. This module only
*presents* the question (:func:`on_terminal`); the question asker of the
front layer (:mod:`tether.front.asking`) decides the rest, as for the editor
and the web app: *always* writes that rule in the session
(``permission/granted``, so a resumed session keeps it), and a call it
cannot write a rule for (a line holding ``$(…)`` or ``sudo``, a write
outside the workspace) is not offered *always*: a line says why, and ``a``
allows it once. A refusal, or a cancel (Ctrl-C)
while the question is open, ends the call as denied; the model is told so.
``todo`` is never asked (it changes nothing outside the session).

The question is read from the terminal on stdin, so ask mode needs one: a
``run`` or ``chat`` whose stdin is not a terminal refuses ask mode at start
with one line rather than wait for an answer that cannot come. ``run`` reads
the answer as a line of stdin; ``chat`` takes it from its line editor (the
next line entered answers the question).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TextIO

from tether.agent import Agent
from tether.cli.render import call_line, diff_lines
from tether.front.asking import Answer, Present, Question, asking_each_call
from tether.front.hook_output import asked_by_text
from tether.tools.execute import ToolInvocation
from tether.tools.presentation import DEFAULT_SHOWN, ToolShown
from tether.tools.preview import ToolPreview
from tether.tools.registry import TOOLS, Shown, shown_in

Ask = Callable[[str], Awaitable[str]]
"""Puts a question (``allow this bash call? …``) to the person; returns the line answered."""

ANSWERS = {"y": Answer.ONCE, "a": Answer.ALWAYS}
"""The first letter of a line answered, and what it answers (anything else: no)."""


def on_terminal(
    out: TextIO,
    ask: Ask,
    shown: Shown | None = None,
    agent: Agent | None = None,
    on_asked: Callable[[str], None] | None = None,
) -> Present:
    """How a question is put on the terminal: the call shown on ``out`` as ``shown``
    presents its tool, with the diff of its change, then ``ask`` puts ``allow this …
    call? [y]es / [n]o / [a]lways``, and the answer is said on a line of its own
    (``[ask] allowed once``, ``[ask] denied``).

    ``on_asked`` hears the id of each call of ``agent`` about to be asked (the work
    view then leaves the call's diff to the question: it is shown once). A
    question withdrawn while open (the call was cancelled) ends its line: a line
    typed later is nobody's answer.
    """
    shown_as = shown if shown is not None else shown_in(None)

    async def present(question: Question) -> Answer:
        tool = question.tool
        if on_asked is not None and question.agent is agent:
            on_asked(question.invocation.exec.call_id)
        out.write(describe(question.invocation, question.preview, shown_as(tool)))
        out.write(_not_always(question))
        out.flush()
        try:
            line = await ask(f"allow this {tool} call{_asked_by(question)}? {_choices(question)}")
        except BaseException:
            out.write("\n")  # withdrawn (or unreadable): its line ends here
            raise
        answer = ANSWERS.get(line.strip().lower()[:1], Answer.REJECT) if line else Answer.REJECT
        out.write(f"[ask] {_answered(answer, question)}\n")
        out.flush()
        return answer

    return present


def _answered(answer: Answer, question: Question) -> str:
    """The answer as the question's last line: ``allowed once``, ``allowed always
    (Bash(git status:*))``, ``denied``."""
    if answer is Answer.REJECT:
        return "denied"
    rules = ", ".join(question.always.rules)
    if answer is Answer.ALWAYS and rules:
        return f"allowed always ({rules})"
    return "allowed once"


def _choices(question: Question) -> str:
    always = question.always
    rules = ", ".join(always.rules)
    return f"[y]es / [n]o / [a]lways allow {rules}" if rules else "[y]es / [n]o"


def _not_always(question: Question) -> str:
    """Why "always" is not offered, as a line before the question (empty when it is, or
    a permission rule asks: that line says so)."""
    why = question.always.why_not
    return (
        ""
        if question.always.rules or question.asked_by or why is None
        else f"[ask] not always: {why}\n"
    )


def _asked_by(question: Question) -> str:
    """Who asks about the call whatever the mode, in parentheses (or nothing)."""
    said = asked_by_text(question.asked_by)
    return f" ({said})" if said else ""


def describe(
    invocation: ToolInvocation, preview: ToolPreview | None, shown: ToolShown = DEFAULT_SHOWN
) -> str:
    """What the question shows of a call: its tool and target as ``shown`` presents
    them, and the diff of the change it makes — the preview's, or without one the
    change ``shown`` reads from the call's arguments."""
    arguments = invocation.shown_args
    lines = [f"\n[ask] {call_line(invocation.tool_name, arguments, shown)}"]
    diffs = preview.diffs if preview is not None else ()
    for change in diffs:
        lines.extend(diff_lines(change.path, change.old_text, change.new_text))
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


def ask_on_terminal(
    agent: Agent,
    ask: Ask | None = None,
    out: TextIO | None = None,
    *,
    every_call: bool = True,
    on_asked: Callable[[str], None] | None = None,
) -> None:
    """Put ``agent``'s tool calls to the person on the terminal, for as long as it lives:
    each of them with ``every_call`` (ask mode), and — in any mode — those a permission
    rule asks about, of ``agent`` and of the child agents it delegates to.

    By default the call is shown on stderr and the answer read as a line of
    stdin; ``chat`` passes its own ``ask`` (its line editor) and ``out``.
    ``on_asked`` hears the id of each of ``agent``'s calls about to be asked
    (:meth:`WorkView.asked <tether.cli.work.WorkView.asked>`).
    """
    from tether.front.asking import PERMISSION_REQUEST, answering
    from tether.tools.execute import BEFORE_EXECUTE

    async def read_stdin(question: str) -> str:
        from tether.cli.terminal import read_line

        sys.stderr.write(f"{question}: ")
        sys.stderr.flush()
        return await read_line(sys.stdin)

    shown = shown_in(agent.ctx.get(TOOLS), agent.id)
    present = on_terminal(out or sys.stderr, ask or read_stdin, shown, agent, on_asked)
    agent.ctx.on(PERMISSION_REQUEST, answering(agent, present))
    if every_call:
        agent.ctx.on(BEFORE_EXECUTE, asking_each_call(agent, present))
