"""The ``permissions`` plugin: the permission rules, held to every tool call an agent makes.

Mount ``tether.front.permissions`` (plugin name ``permissions``); its config
is :class:`PermissionSettings` — the ``allow``, ``ask`` and ``deny`` lists of
:mod:`tether.front.rules`, from the user's and the project's ``tether.yml``
and the ``--allow``/``--ask``/``--deny`` flags. It is the one place the rules
are evaluated, a ``tool/before-execute`` listener put ahead of every other,
for every front end (the terminal, an editor, the web page) and a program
that hosts agents alike:

* **deny** — the call does not run; the model is told which rule refused it;
* **ask** — the call is put to a person through ``permission/request``
  whatever the session's mode and grants (it is asked every time; "always"
  is not offered); where no one can answer (a ``run`` whose stdin is not a
  terminal), it does not run, and the model is told why;
* **allow** — the call runs without asking, whatever the mode. An allow rule
  that names the call's paths also lets a file tool reach outside the
  workspace; one that names only the tool (``Read``) does not: that is still
  asked (see :attr:`~tether.tools.preview.ToolPreview.approval`);
* no rule speaks of the call — the session's mode decides, as before. With
  ``read_only_unasked`` (the default), a read-only tool (its kind ``read``
  or ``search``: ``read``, ``glob``, ``grep``, ``bash_output``) is not asked
  in ``ask`` mode either.

A verdict of the rules is logged with the call as ``permission/ruled``
(:mod:`tether.session.ruling`) in the calling agent's session, before the
call would run. Deny wins over ask, ask over allow.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from msgspec.structs import replace

from tether.front.asking import PermissionDecision, ask_whatever_the_mode, preview_of
from tether.front.rules import Decision, RuleError, Rules, Verdict
from tether.runtime.errors import Veto
from tether.runtime.schema import FieldError, Schema
from tether.session.ruling import PermissionRuled, RuledAnswer
from tether.tools.execute import BEFORE_EXECUTE, ToolInvocation
from tether.tools.presentation import DEFAULT_SHOWN

if TYPE_CHECKING:
    from tether.runtime import Context

__all__ = ["READ_ONLY_KINDS", "PermissionSettings", "RuleGate"]

log = logging.getLogger(__name__)

name = "permissions"

READ_ONLY_KINDS = frozenset({"read", "search"})
"""Tool kinds that change nothing: not asked in ``ask`` mode by default."""


class PermissionSettings(Schema, frozen=True):
    """The ``permissions`` settings (``tether.yml``, ``--allow``/``--ask``/``--deny``;
    see ``docs/security.md``)."""

    allow: tuple[str, ...] = ()
    """Rules whose calls run without asking."""
    ask: tuple[str, ...] = ()
    """Rules whose calls are put to a person every time, whatever the mode."""
    deny: tuple[str, ...] = ()
    """Rules whose calls never run."""
    read_only_unasked: bool = True
    """Whether a read-only tool runs unasked in ``ask`` mode (a rule still decides first)."""

    def __post_init__(self) -> None:
        for field in ("allow", "ask", "deny"):
            for index, text in enumerate(getattr(self, field)):
                try:
                    Rules(allow=(text,))
                except RuleError as exc:
                    raise FieldError((field, index), str(exc)) from None

    def rules(self) -> Rules:
        """The rules these settings hold."""
        return Rules(allow=self.allow, ask=self.ask, deny=self.deny)


Config = PermissionSettings


class RuleGate:
    """The ``tool/before-execute`` listener that holds each agent's call to the rules
    (see the module docs)."""

    def __init__(self, ctx: Context, settings: PermissionSettings) -> None:
        self._ctx = ctx
        self._rules = settings.rules()
        self._read_only_unasked = settings.read_only_unasked
        self._whole = frozenset(
            rule.text
            for rules in self._rules.lists.values()
            for rule in rules
            if rule.specifier is None
        )

    async def __call__(
        self,
        invocation: ToolInvocation,
        next_: Callable[[ToolInvocation], Awaitable[ToolInvocation]],
    ) -> ToolInvocation:
        exec = invocation.exec
        if exec.agent is None:
            return await next_(invocation)  # a program's own call: its author decided
        verdict = self.verdict(invocation)
        if verdict is None:
            if self._read_only_unasked and _read_only(invocation):
                return await next_(await _allowed(invocation, whole_tool=True))
            return await next_(invocation)
        if verdict.decision is Decision.DENY:
            self._log(invocation, verdict)
            raise Veto(f"a permission rule denies this call ({', '.join(verdict.rules)})")
        if verdict.decision is Decision.ALLOW:
            self._log(invocation, verdict)
            whole_tool = all(rule in self._whole for rule in verdict.rules)
            return await next_(await _allowed(invocation, whole_tool=whole_tool))
        return await self._ask(invocation, verdict, next_)

    def verdict(self, invocation: ToolInvocation) -> Verdict | None:
        """What the rules say of ``invocation`` (``None``: nothing)."""
        if not self._rules:
            return None
        tool = invocation.tool
        shown = DEFAULT_SHOWN if tool is None else tool.shown
        cwd = invocation.exec.cwd or os.getcwd()
        return self._rules.decide(invocation.tool_name, invocation.args, shown=shown, cwd=cwd)

    async def _ask(
        self,
        invocation: ToolInvocation,
        verdict: Verdict,
        next_: Callable[[ToolInvocation], Awaitable[ToolInvocation]],
    ) -> ToolInvocation:
        agent = invocation.exec.agent
        assert agent is not None  # only an agent's calls reach here

        def answered(decision: PermissionDecision | None) -> None:
            answer: RuledAnswer = (
                "unanswered"
                if decision is None
                else "allow"
                if decision is PermissionDecision.ALLOW
                else "reject"
            )
            self._log(invocation, verdict, answer)

        approved = await ask_whatever_the_mode(
            self._ctx,
            agent,
            invocation,
            asked_by=verdict.rules,
            who="a permission rule",
            why=", ".join(verdict.rules),
            answered=answered,
        )
        if approved is None:
            return invocation  # withdrawn by a cancel: the pipeline ends it cancelled
        return await next_(approved)

    def _log(
        self, invocation: ToolInvocation, verdict: Verdict, answer: RuledAnswer | None = None
    ) -> None:
        agent = invocation.exec.agent
        assert agent is not None
        agent.session.append(
            PermissionRuled(
                call=invocation.exec.call_id,
                tool=invocation.tool_name,
                decision=verdict.decision.value,
                rules=verdict.rules,
                answer=answer,
            )
        )


def _read_only(invocation: ToolInvocation) -> bool:
    tool = invocation.tool
    return tool is not None and tool.shown.kind in READ_ONLY_KINDS


async def _allowed(invocation: ToolInvocation, *, whole_tool: bool) -> ToolInvocation:
    """``invocation`` marked ``approved`` — unless the allowance named only the tool and
    the call needs approval whatever the mode (a path outside the workspace): that is
    left to be asked."""
    if whole_tool:
        preview = await preview_of(invocation)
        if preview is not None and preview.approval is not None:
            return invocation
    return replace(invocation, exec=replace(invocation.exec, approved=True))


async def apply(ctx: Context, config: PermissionSettings) -> None:
    """Hold every agent's tool call to the rules of ``config``, ahead of every other
    ``tool/before-execute`` listener."""
    ctx.on(BEFORE_EXECUTE, RuleGate(ctx, config), prepend=True)
