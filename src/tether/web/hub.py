"""The ``web`` plugin: what the web app does to sessions, and what it owns.

``tether web`` mounts this plugin (name ``web``; it injects ``agents`` and
``sessions``, and reads ``persistence`` and ``shell`` when mounted). It
provides the ``web`` service, a :class:`WebHub`, which the HTTP app
(:mod:`tether.web.app`) drives for every browser tab and script.

**Ownership.** A session created, or resumed because it was prompted, goes
through ``ctx.agents`` of this plugin's fiber: the hub keeps each handle and
its teardown (:meth:`WebHub.close`, the plugin's unload) disposes every one,
their closing events durable before it returns. A tab that goes away owns
nothing: the session and its turn go on.

**One live owner.** A session is prompted where it is live. One live in this
process is prompted here; one whose lease another process holds is refused
with :class:`LiveElsewhereError` naming the holder (its host on PostgreSQL,
its pid otherwise); one live nowhere is resumed here first.

**The one stop.** :meth:`WebHub.cancel` calls ``agent.cancel(user)`` once per
stop: while that stop is settling (until the agent is idle again), further
calls return ``False`` and do nothing, so a hundred clicks are one cancel.
A session live on another host (PostgreSQL) is stopped there:
:meth:`WebHub.cancel_elsewhere` sends the cross-host cancel
(:meth:`Cluster.cancel <tether.persist.cluster.Cluster.cancel>`), which the
holder's ``cluster`` plugin turns into ``agent.cancel(user)``; for
:data:`CANCEL_SETTLE` seconds after one is sent from here, further calls send
nothing (a hundred clicks are one cancel there too).

**Permission questions.** The hub's session host (:mod:`tether.front.host`)
applies the session's mode before every tool call of an agent in this
process (for a child agent, its root's mode), and the question asker
(:mod:`tether.front.asking`) answers ``permission/request``; the hub
presents a question in the page: it waits until someone answers in a tab,
the call is cancelled (a rejection, withdrawn), or ``permission_timeout``
passes (a rejection). "Always allow" writes the rules its button names
(``Always allow Bash(git status:*)``) into the governing session's allow
list, as in every front end: later calls they cover run without asking,
after a resume too; where it can write none the card says why.

**Background tasks** are shown and killed only for the session that owns
them.

Listeners (registered by the plugin): ``session/event`` wakes followers
(:mod:`tether.front.follow`) and ends a call's progress; ``tool/progress``
keeps a running call's latest progress and nudges the followers of its
session; ``tool/before-execute`` applies the mode;
``permission/request`` asks the page; ``elicitation/request`` puts a server's
request for input in the page (a form from its schema, or its URL as a link,
answered accept, decline or cancel; withdrawn and timed out as a permission
question is); ``agent/disposed`` forgets a handle
disposed by another owner.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Annotated, NamedTuple

import msgspec
from msgspec import Meta

from tether.agent import Agent, AgentHandle, CancelCause, NotStoredError, Target, UserMessage
from tether.agent.elicitation import Action as ElicitAction
from tether.agent.elicitation import Elicited, FormField, check_content
from tether.agent.registry import AGENTS
from tether.front.always import Always
from tether.front.asking import Answer, session_mode
from tether.front.follow import SessionViews
from tether.front.hook_output import asked_by_text
from tether.front.host import SessionHost
from tether.persist.backends.lease import Holder
from tether.persist.cluster import CLUSTER, SessionNotLiveError
from tether.persist.service import PERSISTENCE
from tether.runtime.keys import ServiceKey
from tether.runtime.schema import Schema
from tether.session import Event, Session, ToolResultEvent, TurnEnd
from tether.session.settings import MODE_OPTION, MODEL_OPTION, SANDBOX_OPTION, ConfigChanged
from tether.session.store import SESSION_DISPOSED, SESSION_EVENT, SESSIONS
from tether.shell.definition import SHELL, BashTask, ShellExecutor, TaskStatus
from tether.shell.sandbox import SandboxMode
from tether.tools.permission import Mode
from tether.tools.progress import TOOL_PROGRESS, ToolProgress

if TYPE_CHECKING:
    from tether.agent import AgentsView
    from tether.front.asking import Question as Asked
    from tether.front.eliciting import ElicitationQuestion
    from tether.runtime import Context
    from tether.tools.preview import Diff, ToolPreview

log = logging.getLogger(__name__)

name = "web"
inject = ("agents", "sessions")

WEB = ServiceKey["WebHub"]("web")
"""``ctx.web``: the sessions the web app drives."""

CANCEL_SETTLE = 2.0
"""Seconds after a cross-host cancel of a session during which another one is not sent."""

TAIL_CHARS = 4000
"""How much of a background task's latest output the page shows."""


class Config(Schema, frozen=True):
    mode: Mode = Mode.ASK
    """The permission mode of a session that does not name one (a resumed one)."""
    permission_timeout: Annotated[float, Meta(gt=0)] = 600.0
    """Seconds a permission question may stay unanswered; then it is a rejection."""


class WebError(Exception):
    """A request the hub refuses; the app maps each kind to its HTTP status."""


class UnknownSessionError(WebError, LookupError):
    """No session of this id is live here or stored."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id}")


class LiveElsewhereError(WebError):
    """The session is live in another process: only that process may prompt it."""

    def __init__(self, session_id: str, holder: Holder) -> None:
        super().__init__(f"session {session_id} is live {holder.where}")
        self.holder = holder


class UnknownTaskError(WebError, LookupError):
    """No background task of this id belongs to the session (or it does not exist)."""

    def __init__(self, session_id: str, task_id: str) -> None:
        super().__init__(f"no background task {task_id} in session {session_id}")


class HubClosedError(WebError):
    """The web app is shutting down."""


class NotAttachedError(WebError):
    """A resource a prompt's ``@server:uri`` names could not be attached; the message
    says which and why."""


class Sent(NamedTuple):
    """What :meth:`WebHub.prompt` did with a text."""

    agent: Agent
    command: str | None
    """The command the text ran (its name), or ``None``: it was sent as a prompt."""
    answer: str | None
    """What the command answered, for the person."""
    attached: tuple[str, ...]
    """A line for each resource the prompt's mentions attached."""


class Question(msgspec.Struct, eq=False):
    """A tool call waiting for a person's answer in the page."""

    id: str
    session_id: str
    """The session whose page asks (a child agent's calls are asked in its root's)."""
    agent_id: str
    call_id: str
    tool: str
    arguments: dict[str, object]
    title: str | None
    diffs: list[dict[str, object]]
    asked_at: float
    always: Always
    asked_by: str | None
    """Who asks whatever the mode: permission rules, a hook and its reason (or ``None``)."""
    """What "Always allow" would write (no rules: not offered, and why)."""
    answer: asyncio.Future[Answer]

    def __repr__(self) -> str:
        # The future's repr (its state and callbacks) tells nothing about the question.
        shown = (name for name in self.__struct_fields__ if name != "answer")
        return f"Question({', '.join(f'{name}={getattr(self, name)!r}' for name in shown)})"

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "session_id": self.session_id,
            "agent_id": self.agent_id,
            "call_id": self.call_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "title": self.title,
            "diffs": self.diffs,
            "asked_at": self.asked_at,
            "always": self.always.label or None,
            "always_rules": list(self.always.rules),
            "not_always": None if self.always.rules else self.always.why_not,
            "asked_by": self.asked_by,
        }


class Elicitation(msgspec.Struct, eq=False):
    """A server's request for input waiting for a person's answer in the page."""

    id: str
    session_id: str
    """The session whose page asks (a child agent's server asks in its root's)."""
    agent_id: str
    server: str
    message: str
    mode: str
    """``form`` or ``url``."""
    url: str | None
    fields: tuple[FormField, ...]
    asked_at: float
    answer: asyncio.Future[Elicited]

    def __repr__(self) -> str:
        return (
            f"Elicitation(id={self.id!r}, session_id={self.session_id!r}, server={self.server!r})"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "session_id": self.session_id,
            "agent_id": self.agent_id,
            "server": self.server,
            "message": self.message,
            "mode": self.mode,
            "url": self.url,
            "fields": [_field_json(f) for f in self.fields],
            "asked_at": self.asked_at,
        }


def _field_json(form_field: FormField) -> dict[str, object]:
    return {
        "name": form_field.name,
        "kind": form_field.kind,
        "label": form_field.label,
        "description": form_field.description,
        "required": form_field.required,
        "options": [
            {"value": value, "title": title}
            for value, title in zip(form_field.options, form_field.option_titles, strict=True)
        ],
        "default": form_field.default,
        "minimum": form_field.minimum,
        "maximum": form_field.maximum,
        "format": form_field.format,
    }


class WebHub:
    """The ``web`` service (see the module docs)."""

    def __init__(self, ctx: Context, config: Config) -> None:
        self._ctx = ctx
        self.config = config
        store = ctx.service(SESSIONS)
        self.follows = SessionViews(store, ctx.get(PERSISTENCE))
        """Every view's reader of session events (:meth:`SessionViews.follow`)."""
        self._host: SessionHost[AgentHandle] = SessionHost(
            ctx, self, answer_within=config.permission_timeout, name="web"
        )
        self._opening: dict[str, asyncio.Task[Agent]] = {}
        self._stopping: dict[str, asyncio.Task[None]] = {}
        self._sent_cancels: dict[str, float] = {}
        self._questions: dict[str, Question] = {}
        self._elicitations: dict[str, Elicitation] = {}
        self._ids = itertools.count(1)
        self._running: dict[str, dict[str, ToolProgress]] = {}
        """By session, the latest progress of each of its calls still running."""

    @property
    def host(self) -> SessionHost[AgentHandle]:
        """The sessions the web app owns, their tool calls' questions, their teardown."""
        return self._host

    # -- reading ---------------------------------------------------------------------

    def live_agent(self, session_id: str) -> Agent | None:
        """The agent of ``session_id`` if it is live in this process."""
        return self._agents.get(session_id)

    def live_agents(self) -> list[Agent]:
        """Every agent live in this process, in the order they were published."""
        return self._agents.list()

    def owns(self, session_id: str) -> bool:
        """Whether the web app opened ``session_id`` (and will dispose it)."""
        return self._host.get(session_id) is not None

    def mode_of(self, agent: Agent) -> Mode:
        """The permission mode ``agent``'s session is set to (its log says; else the default)."""
        return session_mode(agent.session, self.config.mode)

    def questions(self, session_id: str) -> list[Question]:
        """The questions open in ``session_id``'s page, oldest first."""
        return [q for q in self._questions.values() if q.session_id == session_id]

    def elicitations(self, session_id: str) -> list[Elicitation]:
        """The servers' requests for input open in ``session_id``'s page, oldest first."""
        return [e for e in self._elicitations.values() if e.session_id == session_id]

    def here(self) -> Holder:
        """This process as a holder (with its host id where hosts share sessions)."""
        cluster = self._ctx.get(CLUSTER)
        return Holder(os.getpid(), None if cluster is None else cluster.host_id)

    async def holder(self, session_id: str) -> Holder | None:
        """The other process (on PostgreSQL: on any host) that has ``session_id`` live,
        else ``None``."""
        if self.live_agent(session_id) is not None or self._ctx.service(SESSIONS).get(session_id):
            return None
        persistence = self._ctx.get(PERSISTENCE)
        return None if persistence is None else await persistence.holder(session_id)

    # -- sessions --------------------------------------------------------------------

    async def create(
        self,
        cwd: str,
        *,
        model: str | None,
        mode: Mode | None,
        sandbox: SandboxMode | None = None,
    ) -> Agent:
        """A new session working in ``cwd``, owned by the web app; ``model`` and ``mode``
        are set in its log when given (else the composed model and the default mode), and
        so is ``sandbox`` (else the session follows the sandbox setting's mode).

        Raises:
            HubClosedError: the app is shutting down.
            AgentError: from ``ctx.agents.create``.
        """
        self._host.check_open()

        async def setup(agent: Agent) -> None:
            if model is not None:
                agent.session.append(ConfigChanged(option=MODEL_OPTION, value=model))
            agent.session.append(ConfigChanged(option=MODE_OPTION, value=mode or self.config.mode))
            if sandbox is not None:
                agent.session.append(ConfigChanged(option=SANDBOX_OPTION, value=sandbox))

        handle = await self._agents.create(cwd=cwd, setup=setup)
        try:
            await self._host.store(handle, created=True)
        except Exception as exc:
            refused = NotStoredError.of(handle.agent.id, "the session", exc)
            log.warning("%s", refused)  # one line, no traceback
            raise refused from None
        return await self._keep(handle)

    async def open(self, session_id: str) -> Agent:
        """The agent of ``session_id``: live here, or resumed here (owned by the web app).

        Concurrent opens of one session resume it once.

        Raises:
            LiveElsewhereError: another process has it live.
            UnknownSessionError: it is neither live here nor stored.
            HubClosedError, AgentError, CorruptLogError: the resume failed.
        """
        agent = self.live_agent(session_id)
        if agent is not None:
            return agent
        self._host.check_open()
        opening = self._opening.get(session_id)
        if opening is None:
            opening = self._host.spawn(self._resume(session_id), name=f"web-resume:{session_id}")
            self._opening[session_id] = opening
            opening.add_done_callback(lambda _: self._opening.pop(session_id, None))
        return await asyncio.shield(opening)

    async def _resume(self, session_id: str) -> Agent:
        holder = await self.holder(session_id)
        if holder is not None:
            raise LiveElsewhereError(session_id, holder)
        persistence = self._ctx.get(PERSISTENCE)
        if persistence is None or not await persistence.exists(session_id):
            raise UnknownSessionError(session_id)
        handle = await self._agents.resume(session_id)
        return await self._keep(handle)

    async def _keep(self, handle: AgentHandle) -> Agent:
        await self._host.publish(handle)
        self.follows.nudge(handle.agent.id)  # its views show it live now
        return handle.agent

    async def prompt(self, session_id: str, text: str, *, steer: bool = False) -> Sent:
        """Run the command ``text`` names (``/name argument``, as in the chat and an
        editor: :mod:`tether.front.prompting`), or queue ``text`` as its own next turn
        of ``session_id`` — or, with ``steer``, deliver it to the running turn at its
        next step (a turn starts when idle) — with the resources its ``@server:uri``
        words name; return once it is stored.

        Accepted durably, or refused: the agent's durable delivery
        (:meth:`~tether.agent.Agent.submit`) lets a step claim the prompt only once
        it is stored, and withdraws one that could not be: it never runs. A prompt
        one of whose resources cannot be attached is not sent.

        Raises:
            CommandError: the command refused its input (a server's prompt: a
                missing argument, the server's refusal).
            CommandFailedError: the command failed on a bug of its own.
            NotAttachedError: a resource a mention names could not be attached.
            NotStoredError: it could not be stored (one line saying why).
            As :meth:`open`.
        """
        from tether.agent.commands import COMMANDS
        from tether.front.prompting import attach_mcp_resources, command_for, run_command

        agent = await self.open(session_id)
        named = command_for(self._ctx.get(COMMANDS), text)
        if named is not None:
            command, argument = named
            return Sent(agent, command.name, await run_command(command, agent, argument), ())
        attached = await attach_mcp_resources(agent, text)
        if attached.refused:
            raise NotAttachedError(attached.refused[0])
        message = UserMessage((*UserMessage.text(text).content, *attached.blocks))
        try:
            await agent.submit(message, Target.STEERING if steer else Target.QUEUED)
        except NotStoredError as exc:
            log.warning("%s", exc)  # one line, no traceback
            raise
        return Sent(agent, None, None, attached.notes)

    def cancel(self, session_id: str) -> bool:
        """Stop ``session_id``'s work (cause ``user``), once per stop; ``False`` when a stop
        of it is still settling (nothing is done then). See the module docs.

        Raises:
            UnknownSessionError: the session is not live here.
        """
        agent = self.live_agent(session_id)
        if agent is None:
            raise UnknownSessionError(session_id)
        if session_id in self._stopping:
            return False
        agent.cancel(CancelCause.USER)
        stopping = self._host.keep(
            asyncio.get_running_loop().create_task(agent.when_idle(), name=f"web-stop:{session_id}")
        )
        self._stopping[session_id] = stopping
        stopping.add_done_callback(lambda _: self._stopping.pop(session_id, None))
        return True

    async def cancel_elsewhere(self, session_id: str) -> Holder | None:
        """Stop ``session_id``'s work on the host that has it live (cause ``user``): the
        holder it was sent to, once per :data:`CANCEL_SETTLE` seconds (``None`` for a
        repeat meanwhile, when nothing is sent). See the module docs.

        Raises:
            LiveElsewhereError: sessions are not shared between hosts here (no
                ``cluster`` service), so the holder cannot be reached.
            UnknownSessionError: no host has the session live.
        """
        holder = await self.holder(session_id)
        if holder is None:
            raise UnknownSessionError(session_id)
        cluster = self._ctx.get(CLUSTER)
        if cluster is None:
            raise LiveElsewhereError(session_id, holder)
        now = time.monotonic()
        if now < self._sent_cancels.get(session_id, 0.0):
            return None
        self._sent_cancels = {s: t for s, t in self._sent_cancels.items() if t > now}
        self._sent_cancels[session_id] = now + CANCEL_SETTLE
        try:
            await cluster.cancel(session_id)
        except SessionNotLiveError:
            del self._sent_cancels[session_id]
            raise UnknownSessionError(session_id) from None
        return holder

    # -- background tasks --------------------------------------------------------------

    def tasks(self, session_id: str) -> list[BashTask]:
        """The background tasks ``session_id`` owns, in start order."""
        shell = self._ctx.get(SHELL)
        if shell is None:
            return []
        return [task for task in shell.list() if self._fenced(shell, task.id, session_id)]

    def task_tail(self, session_id: str, task_id: str) -> tuple[BashTask, str, str]:
        """A task of ``session_id`` with the latest of its stdout and stderr (nothing taken).

        Raises:
            UnknownTaskError: no such task, or another session's.
        """
        shell = self._owned_task(session_id, task_id)
        task = shell.get(task_id)
        assert task is not None
        stdout, stderr = shell.output_tail(task_id)
        return task, stdout[-TAIL_CHARS:], stderr[-TAIL_CHARS:]

    async def kill(self, session_id: str, task_id: str) -> BashTask:
        """Kill a task of ``session_id``; its final snapshot (with the stop report).

        Raises:
            UnknownTaskError: no such task, or another session's.
        """
        shell = self._owned_task(session_id, task_id)
        task = shell.get(task_id)
        if task is not None and task.status is not TaskStatus.RUNNING:
            return task
        return await shell.kill(task_id)

    def _owned_task(self, session_id: str, task_id: str) -> ShellExecutor:
        """The executor, once ``task_id`` is known to be ``session_id``'s.

        Raises:
            UnknownTaskError: no such task, or another session's.
        """
        shell = self._ctx.get(SHELL)
        if shell is None or not self._fenced(shell, task_id, session_id):
            raise UnknownTaskError(session_id, task_id)
        return shell

    @staticmethod
    def _fenced(shell: ShellExecutor, task_id: str, session_id: str) -> bool:
        """Whether ``task_id`` exists and ``session_id`` owns it (an unowned task belongs
        to no page)."""
        return shell.get(task_id) is not None and shell.owner_of(task_id) == session_id

    # -- permission questions ------------------------------------------------------------

    def answer(
        self, session_id: str, question_id: str, allow: bool, *, always: bool = False
    ) -> bool:
        """Answer an open question of ``session_id``; ``False`` if it is no longer open.

        ``always`` (with ``allow``) also writes the rules the question offers to
        always allow, logged in ``session_id`` (see the module docs).

        Raises:
            WebError: ``always`` for a question that does not offer it.
        """
        question = self._questions.get(question_id)
        if question is None or question.session_id != session_id or question.answer.done():
            return False
        if always and allow and not question.always.rules:
            raise WebError(f"question {question_id} cannot be always allowed")
        answer = (Answer.ALWAYS if always else Answer.ONCE) if allow else Answer.REJECT
        question.answer.set_result(answer)
        return True

    async def present(self, asked: Asked) -> Answer:
        """Put ``asked`` to the governing session's page until a tab answers it (or the
        asker withdraws it)."""
        preview = asked.preview
        question = Question(
            id=f"q{next(self._ids)}",
            session_id=asked.governing.id,
            agent_id=asked.agent.id,
            call_id=asked.invocation.exec.call_id,
            tool=asked.tool,
            arguments=_plain(asked.invocation.shown_args),
            title=None if preview is None else preview.title,
            diffs=[] if preview is None else [_diff(d) for d in preview.diffs],
            asked_at=time.time(),
            always=asked.always,
            asked_by=asked_by_text(asked.invocation.exec.asked_by),
            answer=asyncio.get_running_loop().create_future(),
        )
        self._questions[question.id] = question
        self.follows.nudge(question.session_id)
        try:
            return await question.answer
        finally:
            del self._questions[question.id]
            self.follows.nudge(question.session_id)

    def answer_elicitation(
        self, session_id: str, elicitation_id: str, action: str, content: object
    ) -> bool:
        """Answer an open request for input of ``session_id`` (``accept`` with the form's
        ``content``, ``decline`` or ``cancel``); ``False`` if it is no longer open.

        Raises:
            WebError: an unknown action, or content that does not fit the form (the
                request stays open: the page may answer again).
        """
        asked = self._elicitations.get(elicitation_id)
        if asked is None or asked.session_id != session_id or asked.answer.done():
            return False
        try:
            chosen = ElicitAction(action)
        except ValueError:
            raise WebError("action must be accept, decline or cancel") from None
        checked = None
        if chosen is ElicitAction.ACCEPT and asked.mode == "form":
            if content is not None and not isinstance(content, dict):
                raise WebError("content must be an object")
            try:
                checked = check_content(asked.fields, content)
            except ValueError as exc:
                raise WebError(str(exc)) from None
        asked.answer.set_result(Elicited(chosen, checked))
        return True

    async def present_elicitation(self, question: ElicitationQuestion) -> Elicited:
        """Put a server's request for input to the governing session's page until a tab
        answers it (or the asker withdraws it)."""
        elicitation = question.elicitation
        asked = Elicitation(
            id=f"e{next(self._ids)}",
            session_id=question.governing.id,
            agent_id=question.agent.id,
            server=elicitation.server,
            message=elicitation.message,
            mode=elicitation.mode,
            url=elicitation.url,
            fields=elicitation.fields,
            asked_at=time.time(),
            answer=asyncio.get_running_loop().create_future(),
        )
        self._elicitations[asked.id] = asked
        self.follows.nudge(asked.session_id)
        try:
            return await asked.answer
        finally:
            del self._elicitations[asked.id]
            self.follows.nudge(asked.session_id)

    # -- what the session host asks of the hub -------------------------------------------

    expected: tuple[type[Exception], ...] = (WebError,)
    """A failure of an open still in flight at teardown is its caller's to report."""

    def refusal(self, opening: str | None) -> HubClosedError:
        return HubClosedError("the web app is shutting down")

    def governs(self, agent: Agent) -> bool:
        # Every agent live in this process is shown, and asked, here — but for the
        # sessions another front end opened (an ACP client of /acp): asked there.
        return not self._host.governed_elsewhere(agent)

    def mode(self, governing: Agent) -> Mode:
        return self.mode_of(governing)

    def previewed(self, governing: Agent, agent: Agent, call_id: str, preview: ToolPreview) -> None:
        pass  # a question shows the preview; nothing else does

    def started(self, governing: Agent, agent: Agent, call_id: str) -> None:
        pass  # the log shows the call running

    def on_forgotten(self, agent: Agent) -> None:
        self.follows.nudge(agent.id)  # its views show it is no longer the web app's

    def on_closing(self) -> None:
        for question in list(self._questions.values()):
            if not question.answer.done():
                question.answer.set_result(Answer.REJECT)
        for asked in list(self._elicitations.values()):
            if not asked.answer.done():
                asked.answer.set_result(
                    Elicited(ElicitAction.CANCEL, reason="the web app is shutting down")
                )

    def on_closed(self, disposed: int) -> None:
        pass

    # -- listeners and teardown ---------------------------------------------------------

    def progress(self, session_id: str) -> list[ToolProgress]:
        """The latest progress of each call of ``session_id`` still running, oldest first."""
        return list(self._running.get(session_id, {}).values())

    def on_tool_progress(self, agent: Agent, progress: ToolProgress) -> None:
        """``tool/progress``: keep it for the session's page and have its followers say so."""
        self._running.setdefault(agent.id, {})[progress.call_id] = progress
        self.follows.nudge(agent.id)

    def children(self, session_id: str) -> list[dict[str, object]]:
        """The child agents of ``session_id`` live here, each ``{id, call, task}`` (the
        parent's call that delegated to it, and its task), in the order they started."""
        found: list[dict[str, object]] = []
        for agent in self.live_agents():
            header = agent.session.header
            delegation = header.delegation
            if delegation is not None and header.delegator == session_id:
                found.append({"id": agent.id, "call": delegation.call, "task": delegation.task})
        return found

    def on_session_event(self, session: Session, event: Event) -> None:
        """``session/event``: a call's result (or its turn's end) ends its progress; the
        session's followers are nudged to say so. A child agent's first event has its
        parent's followers say that it runs (:meth:`children`)."""
        parent = session.header.delegator
        if parent is not None and event.seq == 0:
            self.follows.nudge(parent)
        running = self._running.get(session.id)
        if running is None:
            return
        payload = event.payload
        ended = isinstance(payload, ToolResultEvent) and running.pop(payload.id, None) is not None
        if not running or isinstance(payload, TurnEnd):
            del self._running[session.id]
        if ended:
            self.follows.nudge(session.id)

    def on_session_disposed(self, session: Session) -> None:
        """``session/disposed``: nothing of it runs here anymore."""
        self._running.pop(session.id, None)

    def close(self) -> Awaitable[None]:
        """Dispose every session the web app opened (once; every call awaits the one run).

        Questions still open are rejected; opens and stops in flight are awaited.
        """
        return self._host.close()

    @property
    def _agents(self) -> AgentsView:
        return self._ctx.service(AGENTS)


def _diff(diff: Diff) -> dict[str, object]:
    """The change a question shows: its texts and their unified diff as numbered hunks
    (:mod:`tether.front.diffs`, the diff the terminal prints)."""
    from tether.front.diffs import hunks

    changed = hunks(diff.path, diff.old_text, diff.new_text)
    return {"old_text": diff.old_text, "new_text": diff.new_text, **changed.to_json()}


def _plain(value: object) -> dict[str, object]:
    from tether.frozen import thaw

    thawed = thaw(value)
    return thawed if isinstance(thawed, dict) else {"value": thawed}


async def apply(ctx: Context, config: Config) -> None:
    """Provide the ``web`` service; its sessions and listeners unwind as one effect."""
    hub = WebHub(ctx, config)

    def lifecycle() -> Iterator[Callable[[], object]]:
        yield ctx.listen(SESSION_EVENT, hub.follows.on_session_event)
        yield ctx.listen(SESSION_DISPOSED, hub.follows.on_session_disposed)
        yield ctx.listen(SESSION_EVENT, hub.on_session_event)
        yield ctx.listen(SESSION_DISPOSED, hub.on_session_disposed)
        yield ctx.listen(TOOL_PROGRESS, hub.on_tool_progress)
        yield from hub.host.listening()
        # Last in, first out: the sessions close while the listeners still stand.
        yield hub.close

    await ctx.effect(lifecycle, label="web hub")
    ctx.provide(WEB, hub)
