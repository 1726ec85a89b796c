"""A server's request for input, asked on the terminal (``tether run`` and ``chat``).

When an MCP server asks the person something during a tool call (an
elicitation, :mod:`tether.agent.elicitation`), the terminal shows who asks
and what, then:

* **a form** — ``answer it? [y]es / [n]o / [c]ancel``; on yes each field is
  asked in turn (its title, description, options numbered from 1, default;
  an empty line keeps the default or skips an optional field), a value
  that does not fit is said and asked again; no declines, anything else
  cancels;
* **a URL** — the URL is printed and ``open it, then continue? [y]es / [n]o
  / [c]ancel`` waits for the person (yes accepts: tether opens nothing
  itself, and what the person types there never passes through tether).

The answer is said on a line of its own (``[input] accepted``). The
question asker of the front layer (:mod:`tether.front.eliciting`) decides
the rest: the ``mcp`` plugin's ``elicitation_timeout_ms``, and a cancel
(Ctrl-C) withdrawing the question — its line ends, a line typed later is
nobody's answer. A terminal answers for every agent of its process (a child
agent's server asks here too). Where stdin is not a terminal nothing is
registered: servers are not told they may ask.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from tether.agent.elicitation import (
    ELICITATION_REQUEST,
    Action,
    Elicitation,
    Elicited,
    FormField,
    Value,
    parse_value,
)
from tether.front.eliciting import ElicitationQuestion, PresentElicitation, ask_elicitation

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.cli.asking import Ask
    from tether.runtime import Context

CHOICES = {"y": Action.ACCEPT, "n": Action.DECLINE}
"""The first letter of a line answered, and what it answers (anything else: cancel)."""


def on_terminal(out: TextIO, ask: Ask) -> PresentElicitation:
    """How an elicitation is put on the terminal: shown on ``out``, asked through ``ask``
    (see the module docs)."""

    async def present(question: ElicitationQuestion) -> Elicited:
        elicitation = question.elicitation
        out.write(f"\n[input] {elicitation.server} asks: {elicitation.message}\n")
        if elicitation.url is not None:
            out.write(f"[input] {elicitation.url}\n")
        out.flush()
        prompt = "open it, then continue?" if elicitation.mode == "url" else "answer it?"
        try:
            first = await ask(f"{prompt} [y]es / [n]o / [c]ancel")
            action = CHOICES.get(first.strip().lower()[:1], Action.CANCEL)
            content = None
            if action is Action.ACCEPT and elicitation.mode == "form":
                content = await _fill(out, ask, elicitation)
        except BaseException:
            out.write("\n")  # withdrawn (or unreadable): its line ends here
            raise
        out.write(f"[input] {_said(action)}\n")
        out.flush()
        return Elicited(action, content)

    return present


async def _fill(out: TextIO, ask: Ask, elicitation: Elicitation) -> dict[str, Value]:
    content: dict[str, Value] = {}
    for form_field in elicitation.fields:
        if form_field.description:
            out.write(f"[input] {form_field.label}: {form_field.description}\n")
        for index, title in enumerate(form_field.option_titles, 1):
            out.write(f"[input]   {index}. {title}\n")
        out.flush()
        while True:
            line = await ask(_field_prompt(form_field))
            if not line.strip():
                if form_field.default is not None:
                    content[form_field.name] = form_field.default
                    break
                if not form_field.required:
                    break
                out.write("[input] an answer is required\n")
                continue
            try:
                content[form_field.name] = parse_value(form_field, line)
            except ValueError as exc:
                out.write(f"[input] {exc}\n")
                out.flush()
                continue
            break
    return content


def _field_prompt(form_field: FormField) -> str:
    notes = []
    if form_field.kind == "boolean":
        notes.append("y/n")
    elif form_field.kind == "array":
        notes.append("numbers separated by commas")
    elif form_field.options:
        notes.append("a number or a value")
    elif form_field.format:
        notes.append(form_field.format)
    if form_field.default is not None:
        notes.append(f"default {form_field.default}")
    elif not form_field.required:
        notes.append("optional")
    said = f" ({', '.join(notes)})" if notes else ""
    return f"{form_field.label}{said}"


def _said(action: Action) -> str:
    return {Action.ACCEPT: "accepted", Action.DECLINE: "declined"}.get(action, "cancelled")


def answer_on_terminal(ctx: Context, ask: Ask | None = None, out: TextIO | None = None) -> None:
    """Answer every elicitation of the agents of ``ctx``'s process on the terminal, for as
    long as ``ctx`` lives: shown on ``out`` (stderr by default), asked through ``ask``
    (a line of stdin by default; ``chat`` passes its line editor). Register it before
    the session opens: servers started without a listener are not told they may ask.
    """
    from tether.agent.registry import AGENTS
    from tether.front.asking import lineage

    async def read_stdin(question: str) -> str:
        from tether.cli.terminal import read_line

        sys.stderr.write(f"{question}: ")
        sys.stderr.flush()
        return await read_line(sys.stdin)

    present = on_terminal(out or sys.stderr, ask or read_stdin)

    async def answer(agent: Agent, elicitation: Elicitation) -> Elicited:
        *_, governing = lineage(agent, ctx.get(AGENTS))
        question = ElicitationQuestion(agent, governing, elicitation)
        return await ask_elicitation(question, present, within=None)

    ctx.on(ELICITATION_REQUEST, answer)
