"""Compaction: long conversations stay inside the model's context window.

Before each request the loop estimates its size (:mod:`tether.loop.context`;
a running total, so the check costs a sum). When it passes ``threshold`` of
the model's window, the loop **compacts** first:

1. it picks the range to summarize: from the start of the log to the end of
   a closed step, leaving the most recent messages — up to ``keep_recent`` of
   the window — and the step being run verbatim (no tool call is ever cut
   from its result, and a step's unfinished tool work is never summarized);
2. it asks the agent's model for a summary of that range, written as a plain
   transcript in one user message (long tool output shortened to fit);
3. it appends ``context/compacted`` (:mod:`tether.session.compaction`), which
   names the range. Nothing is removed from the log; every later request is
   derived with the summary in the range's place.

A provider's ``context-overflow`` error triggers one compaction and one
retry of the request, whatever the estimate said. A cancel during the
summary request stops it at once: nothing is appended and the turn closes
``aborted`` as any cancelled turn does. A summary request that fails is
logged; the loop then sends the request uncompacted (or, after an overflow,
ends the turn with the provider's error).

The same work runs by hand through the ``compaction`` service
(:data:`COMPACTION`): ``await ctx.service(COMPACTION).compact(agent)``, which
is what ``/compact`` in ``tether chat`` calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from bisect import bisect_right
from collections.abc import Mapping
from itertools import accumulate
from typing import TYPE_CHECKING

import msgspec

from tether.agent.types import Agent, AgentStatus
from tether.content import (
    AssistantMessage,
    Message,
    TextBlock,
    ToolCallBlock,
    ToolMessage,
    UserRoleMessage,
)
from tether.llm.assemble import Assembler
from tether.llm.request import ModelRequest, ToolSpec
from tether.llm.service import LLM
from tether.loop.agent import driver_of
from tether.loop.budget import BudgetBook, drawing_on
from tether.loop.context import (
    CHARS_PER_TOKEN,
    context_window,
    message_tokens,
    text_tokens,
    tools_tokens,
)
from tether.loop.hooks import COMPACTING, PRE_COMPACT
from tether.runtime.keys import ServiceKey
from tether.runtime.signal import CancelSignal
from tether.session import CompactionTrigger, ContextCompacted, StepEnd
from tether.session.derive import SUMMARY_PREFIX, Conversation
from tether.session.events import of_types
from tether.session.store import SESSIONS
from tether.session.vocabulary import encode_data

if TYPE_CHECKING:
    from tether.loop.driver import AgentDriver
    from tether.runtime import Context
    from tether.session.log import Session

__all__ = [
    "COMPACTION",
    "Compaction",
    "CompactionCancelledError",
    "CompactionError",
    "CompactionSettings",
    "Cut",
    "plan_cut",
    "transcript",
]

log = logging.getLogger(__name__)

SUMMARY_SYSTEM = (
    "You write the summary that replaces the earlier part of a conversation between a user "
    "and a coding agent, so that the agent can carry on the work without it. Be complete "
    "about what matters and brief about the rest."
)

SUMMARY_REQUEST = """\
Summarize the conversation above for the agent that will continue it. Include:
- what the user asked for, in their words where it matters, and any constraints or \
preferences they stated;
- what has been done: files read, created or changed (with paths), commands run and \
what they showed, decisions made and why;
- what is unfinished or was about to be done next, and open questions;
- anything still running (background tasks, with their ids) and how to check on it;
- facts found that will be needed again (names, paths, versions, error messages).
Write it as notes to yourself, in the conversation's language. Do not call tools."""

_PLANNED = frozenset((StepEnd.type, ContextCompacted.type))
"""The types a cut is planned from, beside the conversation."""

_TOOL_OUTPUT_CHARS = 4_000
_ARGUMENT_CHARS = 1_000
_OMITTED = "[The earliest part of the conversation is left out here: it did not fit.]\n\n"


class CompactionError(Exception):
    """A compaction could not be done; the message says why."""


class CompactionCancelledError(CompactionError):
    """The compaction was cancelled (its signal): nothing was appended."""


class CompactionSettings(msgspec.Struct, frozen=True):
    """When and how much to compact (the agent loop's ``compaction`` settings)."""

    enabled: bool = True
    """Compact on its own when a request passes ``threshold`` (``/compact`` and
    a context overflow compact either way)."""
    threshold: float = 0.8
    """The share of the context window a request may fill before compaction."""
    keep_recent: float = 0.25
    """The share of the window that recent messages may keep verbatim."""
    summary_max_tokens: int = 4_096
    """The most tokens the summary may take (at most a quarter of the window)."""
    windows: Mapping[str, int] = msgspec.field(default_factory=dict)
    """Context windows by model reference or name (``context_windows``)."""


class Cut(msgspec.Struct, frozen=True):
    """The range a compaction summarizes, and the messages it stands for."""

    first_seq: int
    last_seq: int
    head: tuple[Message, ...]
    """The messages the model sees now for events ``first_seq`` … ``last_seq``."""


def plan_cut(
    session: Session, keep_tokens: int, conversation: Conversation | None = None
) -> Cut | None:
    """Where to compact ``session``: ``None`` when there is nothing to summarize.

    The range starts at seq 0 (an earlier summary is in it, and is summarized
    again with the rest) and ends at a ``step/end``. Of the ends that leave
    something new to summarize, it takes the earliest whose verbatim tail —
    the messages after it — is at most ``keep_tokens``, or the latest when
    none is that small.

    ``conversation``, when given, is the session's conversation as derived
    up to its last event (an agent's `History` keeps it): its messages are
    the ones the cut names, rather than the log's derived again.
    """
    events = session.events
    if conversation is None:
        conversation = Conversation()
        conversation.advance(events)
    messages, origins = conversation.messages, conversation.origins
    summarized = -1
    ends: list[int] = []
    for event in of_types(events, _PLANNED):
        if event.type == StepEnd.type:
            ends.append(event.seq)
        elif event.type == ContextCompacted.type:
            payload = event.payload
            if isinstance(payload, ContextCompacted):
                summarized = max(summarized, payload.last_seq)
    if not ends:
        return None
    sizes = [message_tokens(message) for message in messages]
    prefix = [0, *accumulate(sizes)]
    total = prefix[-1]
    first_new = bisect_right(origins, summarized)
    chosen: int | None = None
    for end in ends:
        count = bisect_right(origins, end)  # messages at or before the end
        if count <= first_new:
            continue  # nothing new to summarize up to here
        chosen = end
        if total - prefix[count] <= keep_tokens:
            break
    if chosen is None:
        return None
    return Cut(0, chosen, tuple(messages[: bisect_right(origins, chosen)]))


def transcript(messages: tuple[Message, ...], max_chars: int) -> str:
    """``messages`` as a plain-text transcript of at most about ``max_chars``.

    Tool output and call arguments are shortened first (keeping their start
    and end); if that is not enough, the earliest part is left out, with a note.
    """
    limit = _TOOL_OUTPUT_CHARS
    while True:
        text = "\n\n".join(_entry(message, limit) for message in messages)
        if len(text) <= max_chars or limit <= 200:
            break
        limit //= 2
    if len(text) > max_chars:
        text = _OMITTED + text[len(text) - max_chars :]
    return text


def _entry(message: Message, limit: int) -> str:
    if isinstance(message, ToolMessage):
        outcome = "error" if message.is_error else "result"
        images = "".join(f"\n(an image: {i.mime_type or 'image'})" for i in message.images)
        return f"[{message.name} {outcome}]\n{_shorten(message.content, limit)}{images}"
    if isinstance(message, UserRoleMessage):
        text = _text(message)
        if text.startswith(SUMMARY_PREFIX):
            return f"[summary of the conversation before]\n{text[len(SUMMARY_PREFIX) :]}"
        return f"[user]\n{text}"
    if isinstance(message, AssistantMessage):
        parts = [_text(message)] if _text(message) else []
        for block in message.content:
            if isinstance(block, ToolCallBlock):
                arguments = _shorten(_json(block.arguments), min(limit, _ARGUMENT_CHARS))
                parts.append(f"(calls {block.name} {arguments})")
        if message.interrupted:
            parts.append("(the answer was interrupted)")
        return "[assistant]\n" + "\n".join(parts)
    return ""


def _text(message: UserRoleMessage | AssistantMessage) -> str:
    blocks = message.content
    texts = [block.text for block in blocks if isinstance(block, TextBlock)]
    images = sum(1 for block in blocks if getattr(block, "type", None) == "image")
    if images:
        texts.append(f"({images} image{'s' if images > 1 else ''})")
    return "\n".join(texts)


def _shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n… [{len(text) - limit} characters left out] …\n{text[-tail:]}"


def _json(value: object) -> str:
    try:
        return encode_data(value).decode()
    except (TypeError, ValueError, NotImplementedError):
        return str(value)


COMPACTION = ServiceKey["Compaction"]("compaction")
"""``ctx.compaction``: compact an agent's conversation (see :class:`Compaction`)."""


class Compaction:
    """The ``compaction`` service of one agent loop, and the loop's own compactor."""

    def __init__(self, ctx: Context, settings: CompactionSettings) -> None:
        self._ctx = ctx
        self.budgets: BudgetBook | None = None
        """The spend budgets its summaries draw on (set by the turn runner)."""
        self.settings = settings
        self._tool_tokens: dict[tuple[str, ...], int] = {}
        self._windows: dict[str, int] = {}
        self._locks: weakref.WeakKeyDictionary[AgentDriver, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    def window(self, model: str) -> int:
        """The context window of ``model``, in tokens."""
        window = self._windows.get(model)
        if window is None:
            window = self._windows[model] = context_window(model, self.settings.windows)
        return window

    def request_tokens(
        self, driver: AgentDriver, system: str | None, tools: tuple[ToolSpec, ...]
    ) -> int:
        """The estimated size of a request of the agent's history now (after
        ``driver.history.messages()``), in tokens."""
        return driver.history.tokens(text_tokens(system or "") + self._tools_tokens(tools))

    def due(self, driver: AgentDriver, tokens: int) -> bool:
        """Whether a request of ``tokens`` should be compacted first."""
        settings = self.settings
        model = driver.history.model()
        return settings.enabled and tokens > settings.threshold * self.window(model)

    async def compact(
        self, agent: Agent, *, signal: CancelSignal | None = None
    ) -> ContextCompacted | None:
        """Compact ``agent``'s conversation now; the summary, or ``None`` when
        there is nothing to compact yet.

        The agent must be idle. When this returns, the ``context/compacted``
        event is on disk (flushed). Cancelling ``signal`` (or the task that
        awaits this) stops the summary request; nothing is appended then.

        Raises:
            CompactionError: ``agent`` is not an agent of this loop, is
                disposed or running, or the model could not summarize.
            CompactionCancelledError: ``signal`` was cancelled.
        """
        driver = driver_of(agent)
        if driver is None:
            raise CompactionError(f"agent {agent.id!r} is not run by this agent loop")
        if driver.closed:
            raise CompactionError(f"agent {agent.id!r} is disposed")
        if driver.status is AgentStatus.RUNNING:
            raise CompactionError(
                "a turn is running; compact once it has ended (or cancel it first)"
            )
        driver.history.messages()
        compacted = await self.run(
            driver, "manual", signal or CancelSignal(), tokens=driver.history.tokens()
        )
        if compacted is not None:
            await self._ctx.service(SESSIONS).flush(driver.session)
        return compacted

    async def run(
        self, driver: AgentDriver, trigger: CompactionTrigger, signal: CancelSignal, *, tokens: int
    ) -> ContextCompacted | None:
        """Summarize the older part of ``driver``'s conversation and append the
        summary; ``None`` when there is nothing to summarize.

        One compaction of an agent runs at a time; a second waits for the
        first and then plans afresh.

        Raises:
            CompactionError: the model could not summarize.
            CompactionCancelledError: ``signal`` was cancelled.
        """
        lock = self._locks.setdefault(driver, asyncio.Lock())
        async with lock:
            if signal.cancelled:
                raise CompactionCancelledError("the compaction was cancelled")
            model = driver.history.model()
            window = self.window(model)
            cut = plan_cut(
                driver.session,
                int(self.settings.keep_recent * window),
                driver.history.conversation(),
            )
            if cut is None:
                return None
            await self._before(driver, trigger, signal)
            if signal.cancelled:
                raise CompactionCancelledError("the compaction was cancelled")
            self._ctx.emit(COMPACTING, driver.agent, trigger)
            gate = None if self.budgets is None else self.budgets.gate_of(driver.session)
            with drawing_on(gate, "compaction"):
                summary = await self._summarize(model, window, cut, signal)
            compacted = ContextCompacted(
                first_seq=cut.first_seq,
                last_seq=cut.last_seq,
                summary=summary,
                trigger=trigger,
                model=model,
                tokens_before=tokens,
            )
            driver.session.append(compacted)
            log.info(
                "agent %s: compacted seq %d-%d (%s, about %d tokens before)",
                driver.id,
                cut.first_seq,
                cut.last_seq,
                trigger,
                tokens,
            )
            return compacted

    async def _before(
        self, driver: AgentDriver, trigger: CompactionTrigger, signal: CancelSignal
    ) -> None:
        """``agent/pre-compact``: its listeners run before the summary is asked for; a
        failure is logged and the compaction goes on."""
        try:
            await self._ctx.parallel(PRE_COMPACT, driver.agent, trigger, signal)
        except Exception:
            log.exception("agent %s: a pre-compact listener failed", driver.id)

    async def _summarize(self, model: str, window: int, cut: Cut, signal: CancelSignal) -> str:
        # A small window cannot spend a large share on the answer.
        max_tokens = min(self.settings.summary_max_tokens, window // 4)
        room = window - max_tokens - text_tokens(SUMMARY_SYSTEM + SUMMARY_REQUEST)
        max_chars = max(4_000, int(room * 0.9) * CHARS_PER_TOKEN)
        body = transcript(cut.head, max_chars)
        request = ModelRequest(
            model=model,
            messages=(UserRoleMessage((TextBlock(f"{body}\n\n---\n\n{SUMMARY_REQUEST}"),)),),
            system=SUMMARY_SYSTEM,
            max_tokens=max_tokens,
        )
        assembler = Assembler()
        stream = self._ctx.service(LLM).stream(request, signal)
        async with contextlib.aclosing(stream):
            async for chunk in stream:
                assembler.feed(chunk)
        result = assembler.result()
        if signal.cancelled or result.finish.reason == "aborted":
            raise CompactionCancelledError("the compaction was cancelled")
        if result.finish.reason == "error":
            raise CompactionError(
                f"the summary request failed: {result.finish.error or 'model error'}"
            )
        text = result.text.strip()
        if not text:
            raise CompactionError("the model answered the summary request with no text")
        return text

    def _tools_tokens(self, tools: tuple[ToolSpec, ...]) -> int:
        key = tuple(tool.name for tool in tools)
        tokens = self._tool_tokens.get(key)
        if tokens is None:
            if len(self._tool_tokens) > 64:
                self._tool_tokens.clear()
            tokens = self._tool_tokens[key] = tools_tokens(tools)
        return tokens
