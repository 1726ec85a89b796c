"""One ACP session as the bridge keeps it: its agent, its updates, its prompt in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from acp.schema import PermissionOption, RequestPermissionResponse, ToolCallUpdate

from tether.acp.editor_files import ClientFeatures
from tether.acp.errors import BridgeClosedError, PromptInFlightError
from tether.acp.permissions import Mode
from tether.acp.prompts import Outcome, PendingPrompt, outcome_of
from tether.acp.replay import replay
from tether.acp.updates import SessionUpdate, UpdateMapper
from tether.agent import Agent, AgentDisposedError, AgentHandle, CancelCause, UserMessage
from tether.session import Event, InboxSpliced, TurnEnd
from tether.tools.execute import ToolInvocation
from tether.tools.preview import ToolPreview


class ClientLink(Protocol):
    """What the bridge needs from the connection to its client."""

    def send_update(self, session_id: str, update: SessionUpdate) -> None:
        """Write a ``session/update`` now, after every update sent before it."""
        ...

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        """Ask the client; raises when the client fails or goes away."""
        ...

    @property
    def features(self) -> ClientFeatures:
        """What the client advertised it serves (files, terminals)."""
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

    def __init__(self, agent: Agent, link: ClientLink, mode: Mode, *, hold: bool) -> None:
        self.agent = agent
        self.mode = mode
        self.always_allowed: set[str] = set()
        self.previews: dict[str, ToolPreview] = {}
        """The previews of this session's calls that are waiting to run, by call id."""
        self.prompt: PendingPrompt | None = None
        self._link = link
        self._mapper = UpdateMapper(
            live=True, turn=agent.session.last_turn, cwd=agent.session.header.cwd
        )
        self._held: list[Event] | None = [] if hold else None
        self._dispose: Callable[[], Awaitable[None]] | None = None

    @property
    def id(self) -> str:
        return self.agent.id

    def adopt(self, handle: AgentHandle) -> None:
        self._dispose = handle.dispose

    async def dispose(self) -> None:
        """Run the agent's teardown (see :class:`~tether.agent.AgentHandle`)."""
        assert self._dispose is not None, "a record is published only with its handle"
        await self._dispose()

    # -- events -----------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        if self._held is not None:
            self._held.append(event)
            return
        self._show(event)

    def replay(self, events: Sequence[Event]) -> None:
        """Send ``events`` as a replay, then the live events held back meanwhile."""
        send, session_id = self._link.send_update, self.id
        for update in replay(events, self.agent.session.header.cwd):
            send(session_id, update)
        held, self._held = self._held or [], None
        for event in held:
            self._show(event)

    def _show(self, event: Event) -> None:
        for update in self._mapper.updates(event):
            self._link.send_update(self.id, update)
        if self.prompt is not None:
            self._track(self.prompt, event)

    def show_started(self, call_id: str) -> None:
        self._link.send_update(self.id, self._mapper.started(call_id))

    def show_terminal(self, call_id: str, terminal_id: str) -> None:
        """Show the client's terminal running call ``call_id`` in that tool call."""
        self._link.send_update(self.id, self._mapper.terminal(call_id, terminal_id))

    def show_preview(self, call_id: str, preview: ToolPreview) -> None:
        """Show what the call will do (kind, title, locations, diff) before it runs."""
        self._link.send_update(self.id, self._mapper.previewed(call_id, preview))

    def pending_call(
        self, invocation: ToolInvocation, preview: ToolPreview | None = None
    ) -> ToolCallUpdate:
        return self._mapper.pending(
            invocation.exec.call_id, invocation.tool_name, invocation.args, preview
        )

    # -- the prompt in flight ---------------------------------------------------------

    def begin_prompt(self, message: UserMessage) -> asyncio.Future[Outcome]:
        """Queue ``message`` as a followup; the future settles with its outcome.

        Raises:
            PromptInFlightError: a prompt of this session has not been answered.
            BridgeClosedError: the agent is being disposed.
        """
        if self.prompt is not None:
            raise PromptInFlightError(self.id)
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self.prompt = PendingPrompt(message.id, future)
        try:
            self.agent.followup(message)
        except AgentDisposedError as exc:
            self.prompt = None
            raise BridgeClosedError(str(exc)) from None
        return future

    def cancel(self) -> None:
        """``session/cancel``: the prompt in flight answers ``cancelled``."""
        if self.prompt is not None:
            self.prompt.cancel_requested = True
        self.agent.cancel(CancelCause.USER)

    def settle_cancelled(self) -> None:
        """Answer the prompt in flight ``cancelled`` (its agent is gone)."""
        if self.prompt is not None:
            self._settle("cancelled")

    def _track(self, prompt: PendingPrompt, event: Event) -> None:
        payload = event.payload
        if isinstance(payload, InboxSpliced) and prompt.message_id in payload.message_ids:
            if payload.op == "claim":
                prompt.turn = self.agent.session.open_turn
            elif payload.op != "insert":
                self._settle("cancelled")
        elif isinstance(payload, TurnEnd) and payload.turn == prompt.turn:
            self._settle(outcome_of(payload.reason))

    def _settle(self, outcome: Outcome) -> None:
        prompt, self.prompt = self.prompt, None
        assert prompt is not None
        if prompt.cancel_requested:
            outcome = "cancelled"
        if not prompt.future.done():
            prompt.future.set_result(outcome)
