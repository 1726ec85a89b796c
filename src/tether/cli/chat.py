"""``tether chat``: an interactive session in the terminal.

Lines entered are prompts; a prompt entered while a turn runs is queued as a
follow-up (``(queued: …)``), or steers the running turn when sent with
Ctrl-S or ``/steer TEXT``. Commands are listed by ``/help``
(:mod:`tether.cli.chat_commands`); Ctrl-C cancels the running turn or
``/compact`` and never leaves the chat; ``/quit``, ``/exit`` or the end of
input leaves. The conversation is the session log, so ``--resume ID``
continues it after a restart.

On a terminal (stdin and stdout both), input goes through the line editor
(:mod:`tether.cli.line_editor`: history, search, multi-line, completion) and
the work is shown with Markdown and colours (:mod:`tether.cli.surface`; plain
with ``NO_COLOR``); otherwise lines are read from stdin as they come (of any
length) and the answer goes to stdout as plain text, the rest to stderr. What
is shown of the work is :mod:`tether.cli.work`'s.

The ``you>`` prompt appears only once the turn before it is on disk; a turn
that could not be stored is reported instead, on one line (the chat goes
on, and writing resumes when the disk allows). A prompt runs (and ``(queued:
…)`` is shown) only once it is stored; one that cannot be is refused on one
line and never runs. While a turn runs, the editor
shows ``queue>``. SIGTERM and SIGHUP cancel the running turn and leave, with
exit status 143 or 129. ``--mode ask`` puts each tool call to the person
first (:mod:`tether.cli.asking`); the next line entered answers it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TextIO

from tether.agent import (
    Agent,
    AgentStatus,
    CancelCause,
    NeverRan,
    NotStoredError,
    Target,
    TurnHandle,
    UserMessage,
)
from tether.agent.commands import (
    COMMANDS,
    CommandError,
    CommandRegistry,
    parse_command,
)
from tether.agent.events import AGENT_STATUS
from tether.cli.boot import PICK, data_dir_of, open_for, session_choice, session_line, start
from tether.cli.changes import has_snapshots, session_changes, workspace_changes
from tether.cli.chat_commands import BUILTIN_NAMES, help_text, offered
from tether.cli.chat_session import (
    clear_history,
    go_on_with,
    list_models,
    switch_model,
)
from tether.cli.ending import Terminations, acknowledge, dispose_reporting
from tether.cli.own_command import OwnCommand, for_the_model
from tether.cli.spinner import frame
from tether.cli.surface import PlainSurface, Surface
from tether.cli.terminal import colours_wanted, is_terminal
from tether.cli.work import (
    WorkView,
    budget_line,
    follow_children,
    follow_progress,
    meter_for,
    shown_for,
)
from tether.content import TextBlock
from tether.front.session_end import SESSION_ENDING, SessionEndReason
from tether.runtime.signal import CancelSignal
from tether.session.store import SESSION_EVENT

if TYPE_CHECKING:
    from tether.agent import AgentHandle
    from tether.host import Tether
    from tether.llm.metering import UsageMeter
    from tether.session.model import ModelChoice

HINT = "/help lists the commands; Ctrl-C cancels the running turn; /quit leaves"
RUNNING_KEYS = "Enter: queue · Ctrl-S: steer · Ctrl-C: cancel"
QUESTION_KEYS = "y: allow · n: reject · a: always allow · Ctrl-C: cancel the turn"
INPUT_KEYS = "Enter: answer · Ctrl-C: cancel the turn"
IDLE_KEYS = "Alt-Enter: new line · Tab: complete · /help · Ctrl-D: leave"
PLAIN_READ_LIMIT = 1 << 30
"""The stream reader's buffer limit: far above any line a person pastes."""


class _Lines(Protocol):
    """Where entries come from: the line editor, or plain stdin."""

    async def read(self) -> _Entry | None: ...
    def refresh(self) -> None: ...
    def end(self) -> None: ...
    async def drained(self) -> None: ...


class _Entry(Protocol):
    @property
    def text(self) -> str: ...
    @property
    def steer(self) -> bool: ...


class _PlainEntry:
    __slots__ = ("steer", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.steer = False


class _PlainLines:
    """Lines of stdin as they come, of any length; the prompt written to stderr."""

    def __init__(self, chat: _Chat, surface: PlainSurface) -> None:
        self._chat = chat
        self._surface = surface
        self._reader: asyncio.StreamReader | None = None
        self._transport: asyncio.ReadTransport | None = None

    async def read(self) -> _PlainEntry | None:
        if self._reader is None:
            loop = asyncio.get_running_loop()
            self._reader = asyncio.StreamReader(limit=PLAIN_READ_LIMIT)
            reader = self._reader
            self._transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
            )
        raw = await self._reader.readline()
        if not raw:
            return None
        return _PlainEntry(raw.decode(errors="replace").rstrip("\r\n"))

    def refresh(self) -> None:
        chat = self._chat
        if chat.question is not None:
            self._surface.prompt(f"{chat.question[1]}: ")
        elif chat.ready:
            self._surface.prompt("you> ")

    async def drained(self) -> None:
        """Nothing is held: text goes straight to stdout and stderr."""

    def end(self) -> None:
        if self._transport is not None:
            self._transport.close()
        if self._reader is not None and not self._reader.at_eof():
            self._reader.feed_eof()


class _Chat:
    """One chat: its input, what it shows, and what each entry does.

    It is made before tether boots, so that the editor's prompt is drawn (and
    takes keys) while it does; :meth:`attach` gives it the agent.
    """

    tether: Tether
    agent: Agent
    meter: UsageMeter
    view: WorkView

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self._attached = False
        self._queued: list[TurnHandle] = []
        """The prompts queued behind a running turn, until a turn takes them."""
        self.ready = True
        """``you>`` may show: no turn runs, and the one before is on disk."""
        self.question: tuple[asyncio.Future[str], str] | None = None
        self._asking_input = False
        """The open question is a server's request for input (not a permission)."""
        self._status: tuple[str, float] | None = None
        self._compacting: CancelSignal | None = None
        self._own: OwnCommand | None = None
        self._notes: list[str] = []
        """What ``!command`` runs gave, to go with the next prompt sent."""
        self.picking = False
        """``/rewind`` listed the turns: the next entry may pick one (see :meth:`_picked`)."""
        self.renew = False
        """``/new`` asked for a new session: the entries stop until it is open."""
        self.ending: SessionEndReason | None = None
        """Why this session's part of the chat ended (``SessionEnd``'s reason)."""
        self.branch: str | None = None
        """The stored branch ``/rewind`` or ``/fork`` made, which the next session resumes."""
        self._due = asyncio.Event()
        self.terminal = is_terminal(sys.stdin) and is_terminal(sys.stdout)
        self.lines: _Lines
        self.out: TextIO
        if self.terminal:
            from tether.cli.line_editor import LineEditor

            editor = LineEditor(
                history=data_dir_of(args) / "chat-history",
                commands=lambda: offered(self._commands()),
                message=self._message,
                toolbar=self._toolbar,
                interrupt=self._interrupt,
            )
            self.lines = editor
            self.out = editor.out  # type: ignore[assignment]
            self.surface: Surface = _surface_for(self.out)
        else:
            plain = PlainSurface(sys.stdout, sys.stderr)
            self.lines = _PlainLines(self, plain)
            self.out = sys.stderr
            self.surface = plain

    def attach(self, tether: Tether, agent: Agent) -> None:
        """The chat's agent, once tether has booted."""
        self.tether = tether
        self.agent = agent
        self.meter = meter_for(tether, agent)
        self.view = WorkView(
            self.surface,
            thinking=self._args.show_thinking,
            meter=self.meter,
            status=self._set_status if self.terminal else None,
            shown=shown_for(tether, agent),
        )
        self._attached = True

    # -- what the editor shows -------------------------------------------------

    def _message(self) -> str:
        if self.question is not None:
            return "answer> " if self._asking_input else "[y/n/a]> "
        return "you> " if self.ready else "queue> "

    def _toolbar(self) -> str:
        running = self._attached and self.agent.status is AgentStatus.RUNNING
        keys = RUNNING_KEYS if running else IDLE_KEYS
        if self.question is not None:
            keys = INPUT_KEYS if self._asking_input else QUESTION_KEYS
        share = self.meter.context_share() if self._attached else None
        if share is not None:
            keys = f"context {share:.0%} · {keys}"
        if self._status is None:
            return keys
        text, since = self._status
        if "\n" in text:  # a running command's output below it: the keys go last
            return f"{frame(since)} {text}\n{keys}"
        return f"{frame(since)} {text} · {keys}"

    def _set_status(self, text: str | None) -> None:
        # A status that changes (a running command's progress) animates on, unrestarted.
        since = time.monotonic() if self._status is None else self._status[1]
        self._status = None if text is None else (text, since)
        self.lines.refresh()

    # -- the chat ----------------------------------------------------------------

    async def run(
        self, first: asyncio.Future[_Entry | None] | None
    ) -> tuple[int | None, str | None]:
        """Read and act on entries (``first``, the one read while tether booted, if any)
        until input ends; the exit status a signal asked for, and why the last turn is
        not on disk (or ``None``)."""
        agent = self.agent
        if self._args.resume is not None or self._args.continue_:
            self.view.replay(agent.session)
        self.surface.line(f"{session_line(self.tether, agent)} (/help lists the commands)", "dim")
        agent.ctx.on(SESSION_EVENT, self.view)
        agent.ctx.defer(follow_children(self.tether, agent, self.view))
        follow_progress(agent, self.view)
        agent.ctx.on(AGENT_STATUS, self._on_status)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        restore_logs = _logs_to(self.out) if self.terminal else (lambda: None)
        try:
            async with asyncio.TaskGroup() as tasks:
                prompting = tasks.create_task(self._prompter(), name="chat-prompt")
                try:
                    with Terminations(agent, then=self._terminated) as terminations:
                        self.lines.refresh()
                        await self._read_entries(first)
                        self._drop_question()
                        await agent.when_idle()
                        final = await acknowledge(agent)
                finally:
                    prompting.cancel()
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            restore_logs()
        self.surface.end_block()
        await self._drained()
        return terminations.exit_status, final

    async def _read_entries(self, first: asyncio.Future[_Entry | None] | None) -> None:
        while True:
            if first is not None:
                entry, first = await first, None
            else:
                entry = await self.lines.read()
            if entry is None:
                if self.ending is None:
                    self.ending = "prompt_input_exit"
                return
            if self.question is not None:
                answer, self.question = self.question[0], None
                if not answer.done():  # a cancelled call withdrew the question meanwhile
                    answer.set_result(entry.text)
                continue
            text = entry.text.strip()
            if text in ("/quit", "/exit"):
                self.ending = "prompt_input_exit"
                return
            if not await self._picked(text) and text:
                self._echo(text, entry.steer)
                await self._handle(text, steer=entry.steer)
            if self.renew:
                return

    async def _picked(self, text: str) -> bool:
        """After ``/rewind`` listed the turns, the next entry picks one: ``TURN [code|
        conversation|both] [force]`` rewinds, an empty line does nothing; whether it
        was such an entry (anything else is an ordinary entry)."""
        picking, self.picking = self.picking, False
        if not picking or (text and not text[0].isdigit()):
            return False
        if text:
            self._echo(text, False)
            await self._handle(f"/rewind {text}", steer=False)
        else:
            self.surface.line("(no rewind)", "dim")
        return True

    def _echo(self, text: str, steer: bool) -> None:
        """On the editor, the entry stays in the scrollback (folded when long)."""
        if not self.terminal:
            return
        self.view.prompt(text, steer=steer)

    def _on_status(self, _agent: object, status: AgentStatus) -> None:
        if status is AgentStatus.IDLE:
            self._due.set()
        self.lines.refresh()

    async def _prompter(self) -> None:
        """Shows ``you>`` each time the agent goes idle, once the turn before is on disk."""
        while True:
            await self._due.wait()
            self._due.clear()
            unstored = await acknowledge(self.agent)
            if unstored is not None:
                self.surface.line(f"tether: {unstored}", "error")
            if self.agent.status is AgentStatus.RUNNING:
                # A queued prompt already runs: its own end brings the prompt.
                continue
            await self._show_ready()

    async def _show_ready(self) -> None:
        self.surface.end_block()
        await self._drained()
        if not self.ready:
            self.ready = True
            self.lines.refresh()

    async def _drained(self) -> None:
        await self.lines.drained()

    # -- asking (``--mode ask``) ---------------------------------------------------

    async def ask(self, question: str) -> str:
        """Put ``question`` to the person; the next entry is the answer."""
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        if self.terminal:
            self.surface.line(question, "notice")
        await self.lines.drained()  # what the call will do is on screen before the question
        self.question = (answer, question)
        self.lines.refresh()
        try:
            return await answer
        finally:
            if self.question is not None and self.question[0] is answer:
                self.question = None
            self.lines.refresh()

    async def ask_input(self, question: str) -> str:
        """Put a line of a server's request for input to the person (its choices are in
        ``question``); the next entry is the answer."""
        self._asking_input = True
        try:
            return await self.ask(question)
        finally:
            self._asking_input = False

    def _drop_question(self) -> None:
        if self.question is not None and not self.question[0].done():
            self.question[0].set_result("n")

    # -- Ctrl-C ----------------------------------------------------------------------

    def _interrupt(self) -> bool:
        """Cancel the running turn or ``/compact``; whether there was one."""
        if not self._attached:
            return False
        if self._compacting is not None:
            self._compacting.cancel(CancelCause.USER)
            return True
        if self._own is not None:
            self.surface.line("(stopping the command)", "notice")
            self._own.stop()
            return True
        if self.agent.status is AgentStatus.RUNNING:
            self.surface.line("(cancelled)", "notice")
            self._cancel()
            return True
        return False

    def _cancel(self) -> None:
        """Cancel the running turn and what is queued, saying how many queued
        prompts that dropped (they never run)."""
        self.agent.cancel()
        queued, self._queued = self._queued, []
        dropped = sum(isinstance(handle.outcome, NeverRan) for handle in queued)
        if dropped:
            prompts = "prompt" if dropped == 1 else f"{dropped} prompts"
            self.surface.line(f"(the queued {prompts} dropped too: never sent)", "notice")

    def _terminated(self, signal_name: str) -> None:
        """A SIGTERM or SIGHUP: the running turn is cancelled, and the chat ends."""
        self.surface.line(f"({signal_name}: the running turn is cancelled and the chat ends)")
        self.ending = "other"
        if self._own is not None:
            self._own.stop()
        self.lines.end()

    def _on_sigint(self) -> None:
        if not self._interrupt():
            self.surface.line(HINT, "dim")
            self.lines.refresh()

    # -- entries -----------------------------------------------------------------------

    async def _handle(self, text: str, *, steer: bool) -> None:
        """One entry: a command, or a prompt (queued, or steering, if a turn runs)."""
        parsed = parse_command(text)
        if parsed is None and text.startswith("!") and text[1:].strip():
            await self._run_own(text[1:].strip())
            return
        if parsed is None:
            await self._prompt(text, steer=steer)
            return
        self.ready = False
        try:
            await self._command(*parsed)
        except CommandError as exc:
            self.surface.line(f"tether: /{parsed[0]}: {exc}", "error")
        if self.agent.status is AgentStatus.IDLE:
            await self._show_ready()

    async def _prompt(self, text: str, *, steer: bool) -> None:
        running = self.agent.status is AgentStatus.RUNNING
        self.ready = False
        self.lines.refresh()
        steering = steer and running
        if not await self._submit(text, Target.STEERING if steering else Target.QUEUED):
            return
        if steering:
            self.surface.line("(steering: delivered at the next step of this turn)", "dim")
        elif running:
            self.surface.line("(queued: it runs when the current turn ends)", "dim")

    async def _with_mentions(self, text: str) -> UserMessage:
        """The prompt ``text``, with what its ``@path`` and ``@server:uri`` words attach
        (said on a line each)."""
        from tether.cli.mentions import attach_mentions
        from tether.front.prompting import attach_mcp_resources

        attached = attach_mentions(text, Path(self.agent.session.header.cwd or os.getcwd()))
        resources = await attach_mcp_resources(self.agent, text)
        blocks = [*attached.blocks, *resources.blocks]
        notes = [*attached.notes, *resources.notes]
        for note in notes:
            self.surface.line(f"({note})", "dim")
        ran = tuple(TextBlock(note) for note in self._notes)
        return UserMessage((*ran, TextBlock(text), *blocks))

    async def _submit(self, text: str, target: Target) -> bool:
        """Deliver ``text`` once it is stored (``agent.submit``); whether it was. One that
        could not be is said on one line, and never runs."""
        try:
            handle = await self.agent.submit(await self._with_mentions(text), target)
        except NotStoredError as exc:
            self.surface.line(f"tether: {exc}", "error")
            if self.agent.status is AgentStatus.IDLE:
                await self._show_ready()
            return False
        self._notes.clear()  # they went with this prompt
        if target is Target.QUEUED and self.agent.status is AgentStatus.RUNNING:
            self._queued = [h for h in self._queued if h.outcome is None]
            self._queued.append(handle)
        return True

    async def _command(self, name: str, argument: str) -> None:
        say = self.surface.line
        if name == "help":
            for line in help_text(self._commands(), keys=self.terminal).splitlines():
                say(line)
        elif name == "cancel":
            self._cancel()
        elif name == "steer":
            if not argument:
                raise CommandError("give the text: /steer TEXT")
            await self._submit(argument, Target.STEERING)
        elif name == "compact":
            await self._compact()
        elif name == "output":
            for line in self.view.output(argument).splitlines():
                say(line)
        elif name == "thinking":
            if argument not in ("", "on", "off"):
                raise CommandError("use /thinking, /thinking on or /thinking off")
            self.view.thinking = (not self.view.thinking) if not argument else argument == "on"
            say(f"(reasoning is {'shown' if self.view.thinking else 'hidden'})", "dim")
        elif name == "cost":
            say(self.meter.describe())
            if (spent := budget_line(self.agent)) is not None:
                say(spent)
        elif name == "model":
            await self._model(argument)
        elif name == "clear":
            say(clear_history(self.agent), "dim")
        elif name == "new":
            self._new()
        elif name in ("rewind", "fork"):
            await self._branch(name, argument)
        elif name == "diff":
            await self._diff(argument)
        elif name == "sessions":
            from tether.persist.service import PERSISTENCE

            persistence = self.tether.runtime.ctx.get(PERSISTENCE)
            for summary in await persistence.list() if persistence is not None else []:
                say(f"{summary.id}\t{summary.turn_count} turns\t{summary.title or ''}")
        else:
            await self._plugin_command(name, argument)

    def _commands(self) -> CommandRegistry | None:
        return self.tether.runtime.ctx.get(COMMANDS) if self._attached else None

    async def _plugin_command(self, name: str, argument: str) -> None:
        registry = self._commands()
        command = registry.get(name) if registry is not None else None
        if command is None or name in BUILTIN_NAMES:
            self.surface.line(f"unknown command '/{name}'; {HINT}", "error")
            return
        from tether.front.prompting import CommandFailedError, run_command

        try:
            answer = await run_command(command, self.agent, argument)
        except CommandFailedError as exc:
            # A plugin's bug: said in one line (its traceback with --verbose); the chat goes on.
            raise CommandError(str(exc)) from None
        if answer:
            for line in answer.splitlines():
                self.surface.line(line)

    async def _model(self, argument: str) -> None:
        if not argument:
            for line in list_models(self.tether, self.agent).splitlines():
                self.surface.line(line)
            return
        # The switch is logged: the meter follows it, as it follows an editor's.
        self.surface.line(await switch_model(self.tether, self.agent, argument), "dim")

    def _new(self) -> None:
        """``/new``: end this session's part of the chat; :func:`chat` opens the next."""
        if self.agent.status is AgentStatus.RUNNING:
            raise CommandError("a turn is running: wait for it to end, or cancel it, then /new")
        self.renew, self.ending = True, "clear"

    async def _diff(self, argument: str) -> None:
        """``/diff [TURN]``: from the workspace snapshots when there are some, else
        from the log's file-tool calls (:mod:`tether.cli.changes`)."""
        from tether.front.rewind import WORKSPACES

        workspaces = self.tether.runtime.ctx.get(WORKSPACES)
        session = self.agent.session
        if workspaces is not None and has_snapshots(session):
            lines = await workspace_changes(workspaces, session, argument)
        elif argument:
            raise CommandError("this session has no workspace snapshot: use /diff alone")
        else:
            lines = session_changes(session, self.view.shown)
        for line, style in lines:
            self.surface.line(line, style)

    async def _branch(self, name: str, argument: str) -> None:
        """``/rewind`` and ``/fork`` (:mod:`tether.cli.rewind`); a branch made goes on here."""
        from tether.cli.rewind import chat_fork, chat_rewind

        done = await (chat_rewind if name == "rewind" else chat_fork)(
            self.tether, self.agent, argument
        )
        for line in done.lines:
            self.surface.line(line)
        if name == "rewind" and not argument.strip():
            self.picking = True
            self.surface.line(
                "pick: TURN [code|conversation|both] [force], or Enter for none", "dim"
            )
        if done.branch is not None:
            self.branch, self.renew, self.ending = done.branch, True, "other"

    async def _run_own(self, command: str) -> None:
        """``!command``: run it (:mod:`tether.cli.own_command`), show what it printed,
        and keep that for the next prompt."""
        from tether.shell import ShellError
        from tether.shell.definition import SHELL

        shell = self.tether.runtime.ctx.get(SHELL)
        if shell is None:
            self.surface.line("tether: cannot run the command: no shell executor runs", "error")
            return
        cwd = self.agent.session.header.cwd or os.getcwd()
        self._own = own = OwnCommand(command, cwd, shell)
        self.surface.line(f"$ {command}", "tool")
        try:
            result = await own.run()
        except ShellError as exc:
            self.surface.line(f"tether: cannot run the command: {exc}", "error")
            return
        finally:
            self._own = None
        self.view.own_result(result)
        self._notes.append(for_the_model(result))
        self.surface.line("(its output goes with your next prompt)", "dim")

    async def _compact(self) -> None:
        """``/compact``: summarize the older part of the conversation now."""
        from tether.loop.compaction import COMPACTION, CompactionCancelledError, CompactionError

        service = self.tether.runtime.ctx.get(COMPACTION)
        if service is None:
            raise CommandError("/compact needs the agent loop, which is not running")
        self._compacting = CancelSignal()
        say = self.surface.line
        say("(compacting the conversation; Ctrl-C cancels)", "dim")
        try:
            compacted = await service.compact(self.agent, signal=self._compacting)
        except CompactionCancelledError:
            say("(compaction cancelled; the conversation is unchanged)", "notice")
        except CompactionError as exc:
            say(f"tether: cannot compact: {exc}", "error")
        else:
            if compacted is None:
                say("(nothing to compact yet)", "dim")
        finally:
            self._compacting = None


def _logs_to(out: TextIO) -> Callable[[], None]:
    """Send the log lines meant for stderr to ``out`` (above the prompt); returns the undo."""
    moved = [
        handler
        for handler in logging.getLogger().handlers
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr
    ]
    for handler in moved:
        handler.setStream(out)

    def restore() -> None:
        for handler in moved:
            handler.setStream(sys.stderr)

    return restore


def _surface_for(out: TextIO) -> Surface:
    if colours_wanted(sys.stdout):
        from tether.cli.surface import RichSurface

        return RichSurface(out)
    return PlainSurface(out, out)


async def chat(args: argparse.Namespace) -> int:
    if args.mode == "ask":
        from tether.cli.asking import check_can_ask

        check_can_ask("chat")
    session = _Chat(args)
    # Ctrl-C never leaves the chat, not even while tether boots (the line
    # editor may not have the terminal yet, so the key arrives as SIGINT).
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, session._on_sigint)
    # On a terminal the prompt is drawn, and takes keys, while tether boots.
    # (Not while a --resume without an id asks which session: the terminal is the picker's.)
    picking = args.resume == PICK
    first = (
        asyncio.ensure_future(session.lines.read()) if session.terminal and not picking else None
    )
    release_logs: Callable[[], None] = lambda: None  # noqa: E731
    try:
        tether = await start(args, model=args.model, persistent=True)
    except BaseException:
        await _abandon(session, first)
        raise
    try:
        if session.terminal:  # before the session opens: its servers may then ask
            from tether.cli.eliciting import answer_on_terminal

            answer_on_terminal(tether.runtime.ctx, session.ask_input, session.out)
        handle = await open_for(tether, args, cwd=os.getcwd())
        if handle is None:
            await _abandon(session, first)
            return 1
        while True:
            session.attach(tether, handle.agent)
            if args.mode == "ask" or session.terminal:
                from tether.cli.asking import ask_on_terminal

                session.view.asks_first = args.mode == "ask"
                ask_on_terminal(
                    handle.agent,
                    session.ask,
                    session.out,
                    every_call=args.mode == "ask",
                    on_asked=session.view.asked,
                )
            session.ending = None
            exit_status, final = await session.run(first)
            first = None
            before = session_choice(tether, handle.agent.session)
            tether.runtime.ctx.emit(SESSION_ENDING, handle.agent, session.ending or "other")
            failed, release_logs = await dispose_reporting(handle, final, verbose=args.verbose)
            if exit_status is not None:
                return exit_status
            if failed or not session.renew:
                return 1 if failed else 0
            renewed = await _new_session(tether, args, before, resume=session.branch)
            if renewed is None:
                return 1
            handle, session.renew, session.branch = renewed, False, None
    finally:
        try:
            await tether.stop()
        finally:
            release_logs()


async def _new_session(
    tether: Tether, args: argparse.Namespace, before: ModelChoice, *, resume: str | None
) -> AgentHandle | None:
    """``/new``: a new session in this directory (or ``resume``, a branch ``/rewind`` or
    ``/fork`` stored), going on with the model the chat used (``before``); ``None`` once
    the reason it cannot is printed."""
    args.resume, args.continue_ = resume, False  # the sessions after the first are new
    handle = await open_for(tether, args, cwd=os.getcwd())
    if handle is not None:
        go_on_with(handle.agent, before, session_choice(tether, handle.agent.session))
    return handle


async def _abandon(session: _Chat, first: asyncio.Future[_Entry | None] | None) -> None:
    """tether did not start: end the prompt drawn meanwhile."""
    if first is None:
        return
    session.lines.end()
    await asyncio.gather(first, return_exceptions=True)
