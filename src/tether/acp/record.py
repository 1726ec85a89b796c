"""One ACP session as the bridge keeps it: its agent, its updates, its prompt in flight.

What the session is set to — its mode, its model, the rules kept by "allow
always" — lives in its log (:mod:`tether.session.settings`), not here: the
record reads :attr:`Session.settings <tether.session.Session.settings>`
(folded once as the log grows) and every change is an append, so a load or
a resume restores exactly what the editor had set.

The updates are read from the log through a session view's
:class:`~tether.front.follow.Cursor`: each event heard moves the cursor on,
and while a replay is being sent nothing is shown live — the log keeps what
is appended meanwhile, and the replay's end shows it from the cursor (no
gap, no duplicate). A prompt is answered from its
:class:`~tether.agent.TurnHandle`, once the updates of its turn were sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from tether.acp.delegation import ChildProgress
from tether.acp.editor_files import ClientFeatures
from tether.acp.errors import BridgeClosedError, BridgeError, PromptInFlightError
from tether.acp.permissions import Mode
from tether.acp.prompts import Outcome, outcome_of
from tether.acp.replay import Shows, sequenced
from tether.acp.updates import (
    SessionUpdate,
    UpdateMapper,
    notice,
    plan_update,
    stored_preview,
)
from tether.acp.usage import UsageMeter
from tether.acp.wire import (
    CreateElicitationRequest,
    CreateElicitationResponse,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallUpdate,
)
from tether.agent import (
    Agent,
    AgentDisposedError,
    AgentHandle,
    CancelCause,
    TurnHandle,
    UserMessage,
)
from tether.content import TextBlock
from tether.front.asking import session_mode
from tether.front.follow import Cursor
from tether.llm.catalog import ModelCatalog
from tether.loop.budget import BUDGETS
from tether.session import (
    Event,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    UserMessageEvent,
)
from tether.session.budget import BUDGET_OPTIONS, NO_LIMIT
from tether.session.elicitation import ElicitationCompleted
from tether.session.model import session_model
from tether.session.settings import (
    MODE_OPTION,
    MODEL_OPTION,
    SANDBOX_OPTION,
    ConfigChanged,
    SessionSettings,
)
from tether.shell.sandbox import SANDBOX, Sandbox, SandboxMode
from tether.tools.execute import ToolInvocation
from tether.tools.preview import ToolPreview
from tether.tools.progress import ToolProgress
from tether.tools.registry import TOOLS, shown_in

REPLAY_BATCH = 1000
"""Updates a replay sends before it waits for them to leave (see `SessionRecord.replay`)."""


class ClientLink(Protocol):
    """What the bridge needs from the connection to its client."""

    def send_update(self, session_id: str, update: SessionUpdate, seq: int | None = None) -> None:
        """Write a ``session/update`` now, after every update sent before it; ``seq`` is
        the log event it shows (``None``: live news no event of the log holds)."""
        ...

    def complete_elicitation(self, elicitation_id: str) -> None:
        """``elicitation/complete``: the URL question ``elicitation_id`` the client was
        asked (``elicitation/create``) is done with, at its server's word."""
        ...

    async def drain(self) -> None:
        """Return once the updates written so far have left this process's
        buffers (or the client is gone: what is written then is dropped)."""
        ...

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        """Ask the client; raises when the client fails or goes away."""
        ...

    async def create_elicitation(
        self, request: CreateElicitationRequest
    ) -> CreateElicitationResponse:
        """``elicitation/create``: the person's answer; raises when the client fails or
        goes away."""
        ...

    @property
    def features(self) -> ClientFeatures:
        """What the client advertised it serves (files, terminals, elicitation)."""
        ...

    async def read_text_file(self, session_id: str, path: str) -> str:
        """``fs/read_text_file``: the text of the client's buffer (or file) at ``path``."""
        ...

    async def write_text_file(self, session_id: str, path: str, content: str) -> None:
        """``fs/write_text_file``: replace the client's buffer (or file) at ``path``."""
        ...

    async def create_terminal(
        self, session_id: str, command: str, args: list[str], cwd: str, output_byte_limit: int
    ) -> str:
        """``terminal/create``: the new terminal's id."""
        ...

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str
    ) -> tuple[int | None, str | None]:
        """``terminal/wait_for_exit``: the exit code and signal."""
        ...

    async def terminal_output(self, session_id: str, terminal_id: str) -> tuple[str, bool]:
        """``terminal/output``: the output kept, and whether its head was cut."""
        ...

    async def kill_terminal(self, session_id: str, terminal_id: str) -> None:
        """``terminal/kill``."""
        ...

    async def release_terminal(self, session_id: str, terminal_id: str) -> None:
        """``terminal/release``."""
        ...


class SessionRecord:
    """One ACP session: its agent, the handle's disposer, its mode, its prompt in flight.

    Its :meth:`on_event` hears the session's events (from before the agent is
    published, so it sees every one) and turns them into updates, in order,
    while tracking the prompt in flight.
    """

    def __init__(
        self,
        agent: Agent,
        link: ClientLink,
        mode: Mode,
        *,
        hold: bool,
        catalog: ModelCatalog | None = None,
        namer: Callable[[SessionRecord, str], None] | None = None,
    ) -> None:
        self.agent = agent
        self._default_mode = mode
        self._prompts: list[_Prompt] = []
        """The prompts not yet answered, oldest first: every one but the last was cancelled."""
        self._link = link
        events = agent.session.events
        self._sent = Cursor(len(events) - 1)
        """The last event shown: those before the record are the history a replay shows."""
        self._live = asyncio.Event()
        """Set while heard events are shown at once (not while the session opens or replays)."""
        if not hold:
            self._live.set()
        self._replaying = asyncio.Lock()
        self._dispose: Callable[[], Awaitable[None]] | None = None
        self.catalog = catalog or ModelCatalog()
        self.configured_model = session_model(agent.session, at=0).model
        """The model the session was created with (the agent loop's)."""
        self.meter = self._new_meter()
        self._tasks: dict[str, ChildProgress] = {}
        self._progress_shown: SessionUpdate | None = None
        """The last progress update sent (see :meth:`show_progress`)."""
        """The ``task`` calls of the running turn still waiting on their child, by call id."""
        for event in events:
            self.meter.advance(event)
        titled = any(event.type == UserMessageEvent.type for event in events)
        self._namer = None if titled else namer
        """Called once with the first prompt's text, to have a model name the session."""
        self.shown = shown_in(agent.ctx.get(TOOLS), agent.id)
        """How the calls of this session's tools are shown."""
        features = link.features
        self._mapper = UpdateMapper(
            shown=self.shown,
            live=True,
            turn=agent.session.last_turn,
            meter=self.meter,
            titled=titled,
            cwd=agent.session.header.cwd,
            notices=features.notices,
            compaction=features.compaction,
            echo=features.echo_prompts,
            cancelled_calls=features.cancelled_calls,
        )

    @property
    def id(self) -> str:
        return self.agent.id

    @property
    def settings(self) -> SessionSettings:
        """What the log says the session is set to (mode, model, grants, plan)."""
        return self.agent.session.settings

    # -- settings (each change is appended to the log) ------------------------------

    @property
    def mode(self) -> Mode:
        """The permission mode: the log's last ``session/config mode``, else the default."""
        return session_mode(self.agent.session, self._default_mode)

    @property
    def model(self) -> str:
        """The model of the next request (as the agent loop reads it from the log)."""
        return session_model(self.agent.session).model

    def set_mode(self, mode: Mode) -> bool:
        """Log ``mode`` as the session's mode; whether it changed anything."""
        if mode is self.mode:
            return False
        self.agent.session.append(ConfigChanged(option=MODE_OPTION, value=mode.value))
        return True

    @property
    def sandbox(self) -> Sandbox | None:
        """The ``sandbox`` service of the session's agent, when there is one."""
        return self.agent.ctx.get(SANDBOX)

    def set_sandbox(self, mode: SandboxMode) -> bool:
        """Log ``mode`` as the sandbox mode of the session's next processes; whether it
        changed anything.

        Raises:
            BridgeError: the session has no sandbox.
        """
        sandbox = self.sandbox
        if sandbox is None:
            raise BridgeError("this session has no sandbox (the sandbox plugin is not mounted)")
        if mode is sandbox.mode_for(self.settings.options):
            return False
        self.agent.session.append(ConfigChanged(option=SANDBOX_OPTION, value=mode.value))
        return True

    def set_model(self, model: str) -> bool:
        """Log ``model`` as the model of the next request; whether it changed anything."""
        if model == self.model:
            return False
        self.agent.session.append(ConfigChanged(option=MODEL_OPTION, value=model))
        return True

    def budget_value(self, option: str) -> str:
        """The session's limit of budget option ``option`` as the option shows it: the
        log's last ``session/config`` of it, else the configured limit, else ``off``."""
        stored = self.settings.options.get(option)
        if stored is not None:
            return stored
        budgets = self.agent.ctx.get(BUDGETS)
        ledger = None if budgets is None else budgets.of(self.agent.id)
        field, unit = BUDGET_OPTIONS[option]
        limit = None if ledger is None else getattr(ledger.configured, field)
        if limit is None:
            return NO_LIMIT
        return f"{limit:g}" if unit == "usd" else str(int(limit))

    def set_budget(self, option: str, value: str) -> bool:
        """Log ``value`` as the session's limit of budget option ``option``; whether it
        changed anything."""
        if value == self.budget_value(option):
            return False
        self.agent.session.append(ConfigChanged(option=option, value=value))
        return True

    def _new_meter(self) -> UsageMeter:
        return UsageMeter(self.catalog, self.configured_model)

    def adopt(self, handle: AgentHandle) -> None:
        self._dispose = handle.dispose

    async def dispose(self) -> None:
        """Run the agent's teardown (see :class:`~tether.agent.AgentHandle`)."""
        assert self._dispose is not None, "a record is published only with its handle"
        await self._dispose()

    # -- events -----------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        if self._live.is_set():
            for unsent in self._sent.next(event, self.agent.session.events):
                self._show(unsent)

    async def replay(self, stop: int | None = None, start: int = 0) -> None:
        """Send the session's events from seq ``start`` up to seq ``stop`` (default: all
        it has now) as a replay, then the live events held back meanwhile, and go live.

        The log is decoded and sent a batch at a time (`REPLAY_BATCH`
        updates): each batch leaves for the client (`ClientLink.drain`)
        before the next is decoded, so a replay holds one batch, not the
        log. Events appended meanwhile are shown live after the replay, read
        from the log (no gap, no duplicate); replays of one session take turns.
        """
        async with self._replaying:
            session = self.agent.session
            stop = len(session.events) if stop is None else stop
            self._live.clear()  # appended from here on: shown after the replay
            self._sent.seq = max(self._sent.seq, stop - 1)
            send, session_id = self._link.send_update, self.id
            features = self._link.features
            try:
                updates = sequenced(
                    session.events,
                    self._new_meter(),
                    session.header.cwd,
                    stop=stop,
                    start=start,
                    shown=self.shown,
                    shows=Shows(features.compaction, features.cancelled_calls),
                )
                for count, (seq, update) in enumerate(updates, 1):
                    send(session_id, update, seq)
                    if count % REPLAY_BATCH == 0:
                        await self._link.drain()
                await self._link.drain()
            finally:
                self.attach()  # a replay cut short leaves no prompt waiting on it

    def attach(self) -> None:
        """Show what the log gained while the session was opening (or replaying), and
        go live."""
        while batch := self._sent.take(self.agent.session.events):
            for event in batch:
                self._show(event)
        self._live.set()

    def state_updates(self) -> list[SessionUpdate]:
        """What a client re-attaching without a replay needs: the usage and the plan."""
        updates = []
        usage = self.meter.update()
        if usage is not None:
            updates.append(usage)
        if self.settings.plan:
            updates.append(plan_update(self.settings.plan))
        return updates

    def send(self, update: SessionUpdate) -> None:
        """Send one update of this session to the client now."""
        self._link.send_update(self.id, update)

    def notify(self, severity: str, title: str, description: str) -> None:
        """Send a ``notice`` now if the client shows notices (else nothing: the
        request that failed says it)."""
        if self._link.features.notices:
            self.send(notice(severity, title, description))

    def _show(self, event: Event) -> None:
        for update in self._mapper.updates(event):
            self._link.send_update(self.id, update, event.seq)
        payload = event.payload
        if isinstance(payload, ToolCallEvent) and self.shown(payload.name).delegates:
            self._tasks[payload.id] = ChildProgress(self.shown)
        elif isinstance(payload, ToolResultEvent):
            self._tasks.pop(payload.id, None)
        elif isinstance(payload, TurnEnd):
            self._tasks.clear()
        elif isinstance(payload, ElicitationCompleted) and self._link.features.elicitation_url:
            # Live only: a replay's questions were answered long ago.
            self._link.complete_elicitation(payload.elicitation)
        if self._namer is not None and event.type == UserMessageEvent.type:
            payload = event.payload
            assert isinstance(payload, UserMessageEvent)
            text = "\n".join(b.text for b in payload.content if isinstance(b, TextBlock))
            if text.strip():
                namer, self._namer = self._namer, None
                namer(self, text)

    def show_child(self, call_id: str, event: Event) -> None:
        """Show ``event`` of the child agent started by this session's ``task`` call
        ``call_id`` in that call, while it runs (see :mod:`tether.acp.delegation`)."""
        progress = self._tasks.get(call_id)
        if progress is not None and self._live.is_set() and progress.advance(event):
            self._link.send_update(self.id, progress.update(self._mapper.tool_call_id(call_id)))

    def show_progress(self, progress: ToolProgress) -> None:
        """Show a running call's progress in that call (a report that changes nothing
        shown — the same lines, the same whole second — is not sent)."""
        update = self._mapper.progress(progress)
        if not self._live.is_set() or update == self._progress_shown:
            return
        self._progress_shown = update
        self._link.send_update(self.id, update)

    def show_started(self, call_id: str) -> None:
        self._link.send_update(self.id, self._mapper.started(call_id))

    def show_terminal(self, call_id: str, terminal_id: str) -> None:
        """Show the client's terminal running call ``call_id`` in that tool call."""
        self._link.send_update(self.id, self._mapper.terminal(call_id, terminal_id))

    def show_preview(self, call_id: str, preview: ToolPreview) -> None:
        """Show what the call will do (kind, title, locations, diff) before it runs,
        and log it (``tool/previewed``) so a replay shows it again."""
        stored = self.agent.session.append(stored_preview(call_id, preview))
        self._link.send_update(self.id, self._mapper.previewed(call_id, preview), stored.seq)

    def pending_call(
        self, invocation: ToolInvocation, preview: ToolPreview | None = None
    ) -> ToolCallUpdate:
        return self._mapper.pending(
            invocation.exec.call_id, invocation.tool_name, invocation.shown_args, preview
        )

    # -- the prompts in flight ---------------------------------------------------------

    @property
    def answering(self) -> bool:
        """Whether a prompt of this session has not been answered yet."""
        return bool(self._prompts)

    def begin_prompt(self, message: UserMessage) -> asyncio.Future[Outcome]:
        """Queue ``message`` as a followup; the future settles with its outcome once its
        turn handle says how it ended and the updates of that turn were sent.

        A prompt sent after a cancel is accepted while the cancelled one is
        still to answer: the cancel cleared or aborted everything queued
        before it, so the new prompt runs as a turn of its own, after the
        cancelled one has answered ``cancelled``.

        Raises:
            PromptInFlightError: a prompt of this session that was not
                cancelled has not been answered.
            BridgeClosedError: the agent is being disposed.
        """
        if any(not prompt.cancel_requested for prompt in self._prompts):
            raise PromptInFlightError(self.id)
        try:
            prompt = _Prompt(self.agent.followup(message))
        except AgentDisposedError as exc:
            raise BridgeClosedError(str(exc)) from None
        self._prompts.append(prompt)
        prompt.answer = asyncio.ensure_future(self._answer(prompt))
        return prompt.answer

    async def _answer(self, prompt: _Prompt) -> Outcome:
        """How ``prompt`` ended, once its handle settled (the agent's teardown settles
        it too), every prompt asked before it was answered, and the record shows
        events live again: every update of its turn, held back by a replay under
        way, was sent first."""
        try:
            outcome = await prompt.handle.ended()
            for earlier in self._prompts[: self._prompts.index(prompt)]:
                if earlier.answer is not None:
                    await asyncio.wait({earlier.answer})  # answered in the order asked
            await self._live.wait()
        finally:
            self._prompts.remove(prompt)
        return "cancelled" if prompt.cancel_requested else outcome_of(outcome)

    def cancel(self) -> None:
        """``session/cancel``: every prompt in flight answers ``cancelled``."""
        self.mark_cancelled()
        self.agent.cancel(CancelCause.USER)

    def mark_cancelled(self) -> None:
        """Have every prompt in flight answer ``cancelled``, however its turn ends."""
        for prompt in self._prompts:
            prompt.cancel_requested = True


class _Prompt:
    """A ``session/prompt`` in flight: its turn handle, and whether it was cancelled."""

    __slots__ = ("answer", "cancel_requested", "handle")

    def __init__(self, handle: TurnHandle) -> None:
        self.handle = handle
        self.cancel_requested = False
        self.answer: asyncio.Future[Outcome] | None = None
        """The task answering it (kept here until it is done)."""
