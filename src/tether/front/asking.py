"""The question asker: whether a person lets one tool call run, asked the same way everywhere.

A policy decides that a call needs approval (the session's mode, or the
call's preview saying it needs approval whatever the mode); this module asks.
The front end only *presents* the question (:data:`Present`): the editor's
``session/request_permission``, a card in the web page, a line on the
terminal. Everything else is decided here, once:

* **kept rules first** — a call that the rules the governing session kept
  cover (:attr:`SessionSettings.allowed <tether.session.settings.SessionSettings.allowed>`,
  folded once from its log) is allowed without asking;
* **it always ends** — a question left unanswered for ``within`` seconds is a
  rejection (logged); a cancel of the call while it is open withdraws it at
  once (the presentation is cancelled) and it is a rejection; a presentation
  that fails is a rejection (the front end logs why);
* **"always" writes a rule** — an :attr:`Answer.ALWAYS` logs the allow rules
  the call stands for (:func:`~tether.front.always.always_for`:
  ``Bash(git status:*)``, ``Edit(src/**)``, a tool) as ``permission/granted``
  in the governing session, so a load or a resume keeps them; a later call
  they cover is allowed unasked, logged as ``permission/ruled`` with the rule
  that allowed it. They never cover a call that needs approval whatever the
  mode, nor one a permission rule asks about (ask and deny rules win). Where
  "always" writes no rule (:attr:`Always.why_not
  <tether.front.always.Always.why_not>`), answering it allows the call once.

``permission/request`` is the event a before-execute policy puts a question
through (:func:`approve`); a front end answers it for the agents it governs.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import os
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from msgspec.structs import replace

from tether.agent.types import Agent
from tether.front.always import Always, always_for
from tether.front.rules import Decision, RuleError, Rules, Verdict, parse_rule
from tether.plugins.fs.errors import FileToolError
from tether.runtime.errors import Veto
from tether.runtime.keys import Serial
from tether.session.ruling import PermissionRuled
from tether.session.settings import MODE_OPTION, PermissionGranted
from tether.tools.execute import ToolInvocation
from tether.tools.permission import Mode, needs_asking
from tether.tools.presentation import DEFAULT_SHOWN

if TYPE_CHECKING:
    from tether.agent.registry import AgentsView
    from tether.runtime import Context
    from tether.session import Session
    from tether.tools.presentation import ToolShown
    from tether.tools.preview import ToolPreview

log = logging.getLogger(__name__)


class PermissionDecision(enum.StrEnum):
    ALLOW = "allow"
    REJECT = "reject"


PERMISSION_REQUEST = Serial[PermissionDecision, Agent, ToolInvocation]("permission/request")
"""Serial event ``(agent, invocation) -> PermissionDecision | None``: may ``agent`` run
``invocation``? The first listener that returns a decision answers; a listener returns
``None`` for agents it does not govern. Nobody answering is a rejection (fail closed)."""


class Answer(enum.StrEnum):
    """What a person answered."""

    ONCE = "once"
    """Allow this call."""
    ALWAYS = "always"
    """Allow this call and, logged in the governing session, what it stands for."""
    REJECT = "reject"


@dataclass(frozen=True, eq=False)
class Question:
    """A tool call put to a person: whose it is, where it is asked, what it will do."""

    agent: Agent
    """The agent whose call it is."""
    governing: Agent
    """The agent whose session rules it and is asked (a child's root; else ``agent``)."""
    invocation: ToolInvocation
    preview: ToolPreview | None
    """What the call will do (kind, title, locations, diff), computed once; ``None``: unknown."""

    @functools.cached_property
    def always(self) -> Always:
        """What "always" would write — the rules the call stands for that the governing
        session does not keep yet (no rules: not offered, and why)."""
        if self.invocation.exec.asked_by:
            return Always((), "a permission rule asks about it every time")
        invocation = self.invocation
        always = always_for(
            invocation.tool_name,
            invocation.args,
            preview=self.preview,
            shown=_shown(invocation),
            cwd=_cwd(invocation),
        )
        kept = self.governing.session.settings.allowed
        new = tuple(rule for rule in always.rules if rule not in kept)
        if new or not always.rules:
            return Always(new, always.why_not)
        return Always((), "its rules are kept already")

    @property
    def asked_by(self) -> tuple[str, ...]:
        """The permission rules that ask about the call whatever the mode (may be none)."""
        return self.invocation.exec.asked_by

    @property
    def tool(self) -> str:
        return self.invocation.tool_name


Present = Callable[[Question], Awaitable[Answer]]
"""A front end's way of putting a :class:`Question` to a person; cancelled when withdrawn.

Raises: anything, when the person cannot be reached (the call is then rejected).
"""


async def ask(question: Question, present: Present, *, within: float | None) -> PermissionDecision:
    """Whether ``question``'s call may run: allowed by a rule its session kept, or
    answered through ``present`` (see the module docs for the timeout, the withdrawal
    and the rules "always" writes)."""
    if _kept_rule_allows(question):
        return PermissionDecision.ALLOW
    signal = question.invocation.exec.signal
    asking = asyncio.ensure_future(present(question))
    stopped = asyncio.ensure_future(signal.wait())
    try:
        await asyncio.wait({asking, stopped}, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in (asking, stopped):
            waiter.cancel()
        await asyncio.gather(asking, stopped, return_exceptions=True)
    if asking.cancelled():
        if stopped.cancelled() and not signal.cancelled:
            log.warning(
                "session %s: the permission request for %s was not answered within %g s; rejected",
                question.governing.id,
                question.tool,
                within,
            )
        return PermissionDecision.REJECT
    if asking.exception() is not None:
        return PermissionDecision.REJECT
    answer = asking.result()
    if answer is Answer.REJECT:
        return PermissionDecision.REJECT
    if answer is Answer.ALWAYS:
        _keep(question.governing, question.always)
    return PermissionDecision.ALLOW


def _kept_rule_allows(question: Question) -> bool:
    """Whether a rule the governing session kept allows the call (logged with it): never
    one a permission rule asks about, nor one that needs approval whatever the mode."""
    invocation = question.invocation
    if question.asked_by:
        return False
    verdict = _kept_verdict(question.governing, invocation, question.preview)
    if verdict is None:
        return False
    question.agent.session.append(
        PermissionRuled(
            call=invocation.exec.call_id,
            tool=invocation.tool_name,
            decision="allow",
            rules=verdict.rules,
        )
    )
    return True


def kept_rule_allows(
    governing: Agent, invocation: ToolInvocation, preview: ToolPreview | None
) -> bool:
    """Whether a rule ``governing``'s session kept would let the call through unasked
    (nothing is logged: the question asker logs it when it decides)."""
    if invocation.exec.asked_by:
        return False
    return _kept_verdict(governing, invocation, preview) is not None


def _kept_verdict(
    governing: Agent, invocation: ToolInvocation, preview: ToolPreview | None
) -> Verdict | None:
    """The allow verdict of ``governing``'s kept rules on the call, ``None`` if none allows
    it or it needs approval whatever the mode."""
    if preview is not None and preview.approval is not None:
        return None
    allowed = governing.session.settings.allowed
    if not allowed:
        return None
    verdict = _kept_rules(allowed).decide(
        invocation.tool_name, invocation.args, shown=_shown(invocation), cwd=_cwd(invocation)
    )
    if verdict is None or verdict.decision is not Decision.ALLOW:
        return None
    return verdict


@functools.lru_cache(maxsize=64)
def _kept_rules(allowed: tuple[str, ...]) -> Rules:
    """The kept rules ``allowed``, read once; one that cannot be read (a log edited by
    hand) allows nothing, and is logged."""
    readable: list[str] = []
    for text in allowed:
        try:
            parse_rule(text)
        except RuleError as exc:
            log.warning("a kept permission rule is ignored: %s", exc)
        else:
            readable.append(text)
    return Rules(allow=readable)


def _keep(governing: Agent, always: Always) -> None:
    """Log in ``governing``'s session each rule of ``always`` it does not keep yet."""
    session = governing.session
    for rule in always.rules:
        if rule not in session.settings.allowed:
            session.append(PermissionGranted(rule=rule))


def _shown(invocation: ToolInvocation) -> ToolShown:
    tool = invocation.tool
    return DEFAULT_SHOWN if tool is None else tool.shown


def _cwd(invocation: ToolInvocation) -> str:
    return invocation.exec.cwd or os.getcwd()


def session_mode(session: Session, default: Mode) -> Mode:
    """The permission mode ``session`` is set to: its log's last ``session/config mode``
    (settings folded once, :attr:`Session.settings`), else ``default`` — also for a
    value no mode has (a log written by a later tether)."""
    stored = session.settings.options.get(MODE_OPTION)
    try:
        return default if stored is None else Mode(stored)
    except ValueError:
        return default


async def approve(
    ctx: Context, agent: Agent, invocation: ToolInvocation, mode: Mode, approval: str | None
) -> ToolInvocation | None:
    """Apply ``mode`` to ``invocation`` (whose preview asked for ``approval``, if any):
    the invocation to run on — marked ``approved`` when it was asked and allowed, as it
    is when nothing needed asking — or ``None`` when the question was withdrawn by a
    cancel of the call (the pipeline then ends it as cancelled, not denied). A call
    already approved (a permission rule allowed it, or a person did) is not asked again.

    The question goes through ``permission/request``.

    Raises:
        Veto: the person (or, failing closed, nobody) did not allow the call.
    """
    if invocation.exec.approved or not needs_asking(mode, invocation.tool_name, approval):
        return invocation
    decision = await ctx.serial(PERMISSION_REQUEST, agent, invocation)
    return _decided(invocation, decision)


async def ask_whatever_the_mode(
    ctx: Context,
    agent: Agent,
    invocation: ToolInvocation,
    *,
    asked_by: tuple[str, ...],
    who: str,
    why: str = "",
    answered: Callable[[PermissionDecision | None], None] | None = None,
) -> ToolInvocation | None:
    """Put ``agent``'s call to a person through ``permission/request`` whatever the mode
    and the session's grants, on behalf of ``asked_by`` (``who`` asks; ``why`` says
    what of it, e.g. the rules): the invocation to run on, marked ``approved``, or
    ``None`` when the question was withdrawn by a cancel of the call. ``answered`` is
    told the decision first (``None``: no one here could answer).

    Raises:
        Veto: the person did not allow the call, or no one here could be asked.
    """
    asked = replace(invocation, exec=replace(invocation.exec, asked_by=asked_by))
    decision = await ctx.serial(PERMISSION_REQUEST, agent, asked)
    if answered is not None:
        answered(decision)
    if decision is PermissionDecision.ALLOW:
        return _approved(asked)
    if invocation.exec.signal.cancelled:
        return None
    if decision is None:
        because = f" ({why})" if why else ""
        raise Veto(
            f"{who} asks about this call{because}, and no one here can answer: it was not run"
        )
    raise Veto(f"the user did not allow this {invocation.tool_name} call (asked by {why or who})")


def asking_each_call(agent: Agent, present: Present) -> _Asking:
    """A ``tool/before-execute`` listener that asks about each of ``agent``'s calls
    through ``present`` (ask mode, no timeout): a rejection — a cancel while the
    question is open included — is a :class:`Veto` the model is told."""
    return _Asking(agent, present)


class _Asking:
    __slots__ = ("_agent", "_present")

    def __init__(self, agent: Agent, present: Present) -> None:
        self._agent = agent
        self._present = present

    async def __call__(
        self,
        invocation: ToolInvocation,
        next_: Callable[[ToolInvocation], Awaitable[ToolInvocation]],
    ) -> ToolInvocation:
        agent = self._agent
        if invocation.exec.agent is not agent or invocation.exec.approved:
            return await next_(invocation)
        preview = await preview_of(invocation)
        approval = None if preview is None else preview.approval
        if not needs_asking(Mode.ASK, invocation.tool_name, approval):
            return await next_(invocation)
        question = Question(agent, agent, invocation, preview)
        decision = await ask(question, self._present, within=None)
        if decision is not PermissionDecision.ALLOW:
            raise Veto(f"the user did not allow this {invocation.tool_name} call")
        return await next_(_approved(invocation))


def answering(agent: Agent, present: Present) -> _Answering:
    """A ``permission/request`` listener that answers for ``agent`` and the child agents
    it delegated to, through ``present`` (no timeout): for a front end with no mode of
    its own to ask in (the terminal in auto mode), so that a permission rule that asks
    reaches the person."""
    return _Answering(agent, present)


class _Answering:
    __slots__ = ("_agent", "_present")

    def __init__(self, agent: Agent, present: Present) -> None:
        self._agent = agent
        self._present = present

    async def __call__(self, agent: Agent, invocation: ToolInvocation) -> PermissionDecision | None:
        if not _descends(agent, self._agent):
            return None
        preview = await preview_of(invocation)
        question = Question(agent, self._agent, invocation, preview)
        return await ask(question, self._present, within=None)


def _descends(agent: Agent, root: Agent) -> bool:
    """Whether ``agent`` is ``root`` or an agent it delegated to, at any depth."""
    from tether.agent.registry import AGENTS

    return any(found is root for found in lineage(agent, root.ctx.get(AGENTS)))


MAX_DEPTH = 16
"""How many delegators :func:`lineage` follows."""


def lineage(agent: Agent, agents: AgentsView | None) -> Iterator[Agent]:
    """``agent``, then the agent that delegated to it, and so on while each is live in
    ``agents`` (at most :data:`MAX_DEPTH` of them)."""
    found: Agent | None = agent
    for _level in range(MAX_DEPTH):
        if found is None:
            return
        yield found
        delegator = found.session.header.delegator
        found = None if delegator is None or agents is None else agents.get(delegator)


def _decided(
    invocation: ToolInvocation, decision: PermissionDecision | None
) -> ToolInvocation | None:
    if decision is not PermissionDecision.ALLOW:
        if invocation.exec.signal.cancelled:
            return None
        raise Veto(f"the user did not allow this {invocation.tool_name} call")
    return _approved(invocation)


def _approved(invocation: ToolInvocation) -> ToolInvocation:
    return replace(invocation, exec=replace(invocation.exec, approved=True))


async def preview_of(invocation: ToolInvocation) -> ToolPreview | None:
    """The call's preview, or ``None``: none given, bad input (the call itself will
    answer it with the reason), or the tool's preview failed (logged)."""
    try:
        return await invocation.preview()
    except FileToolError as exc:
        log.debug("no preview of a %s call: %s", invocation.tool_name, exc)
        return None
    except Exception:
        log.warning("the preview of a %s call failed", invocation.tool_name, exc_info=True)
        return None
