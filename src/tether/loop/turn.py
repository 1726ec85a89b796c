"""One turn of an agent: steps of model requests and the tools they call.

A turn, as it lands in the session log::

    turn/start
      (claim one queued prompt + pending steering: agent/inbox/spliced)
      step/start  user/message*  assistant/chunk*  assistant/message
                  (tool/call  tool/result)*                        step/end
      … more steps while tools owe the model a reply or steering arrived …
    turn/end {completed | aborted{cause} | blocked | error{error} | max-tokens | budget}

A turn's model output is bounded: once the text, reasoning and tool-call
arguments streamed during one turn (every step and attempt together) pass
``max_turn_output`` characters, the stream is closed and the turn ends
``error`` with code ``output-limit`` and a message naming the setting; what
streamed is kept as an interrupted ``assistant/message``.

Under a spend budget (:mod:`tether.loop.budget`), the budget's gate is set for
the length of each turn: every model request made in it (retries,
compactions and tools' own requests included) reserves its worst case first.
A request whose reservation does not fit is not sent, and the turn ends
``budget`` after the ``budget/exhausted`` receipt.

The turn **always** closes, whatever happens: a cancel, a model error, a tool
crash, an infrastructure failure. When it is cancelled, text already streamed
is kept as an interrupted ``assistant/message``, tools already started are
given the signal and awaited, and tool calls that never started get synthetic
error results, so the log stays balanced.

Extension points (typed keys in :mod:`tether.loop.hooks`; listeners run in
registration order):

* ``PRE_STEP`` (``agent/pre-step``) — **waterfall**; value: the step's input
  ``tuple[UserMessage, ...]``; args: ``(agent, step)``. Rewrite the input, or
  raise :class:`~tether.runtime.Veto` to reject it (the turn ends ``blocked``).
* ``REQUEST`` (``agent/request``) — **waterfall**; value: the :class:`ModelRequest`; args:
  ``(agent,)``. Adjust the model configuration of one request. Its messages
  hold every image of the tool results; those the model it leaves does not
  accept are replaced by a note after the waterfall.
* ``REQUEST_ERROR`` (``agent/request-error``) — **waterfall**; value: a :class:`RequestError`
  (``retry=False``); args: ``(agent,)``. Return it with ``retry=True`` to
  retry the request (``delay`` seconds later, cancellable), else the turn ends
  with ``error``.
* ``TURN_STOP`` (``agent/turn-stop``) — **serial**; args: ``(agent, turn, step)``, asked after
  every step that would continue. The first listener that returns a
  ``TurnEndReason`` ends the turn with it.
* ``TURN_COMPLETING`` (``agent/turn-completing``) — **serial**; args: ``(agent, turn,
  step)``, asked once a turn would end ``completed``. The first listener that
  answers messages keeps the turn going: they open its next step (user hooks'
  ``Stop``).
* ``TURN_ABORTING`` (``agent/turn-aborting``) — **gather**; args: ``(agent,
  turn)``, awaited when a cancelled turn is about to close: work the turn owns
  elsewhere (child agents) stops before the turn's ``turn/end``. Each
  listener answers what its stop reached (:class:`~tether.session.StopParts`),
  and the turn writes the answers as one ``tool/stopped`` right before its
  ``turn/end`` (:mod:`tether.loop.receipt`).
* ``TURN_CLOSING`` (``agent/turn-closing``) — **emit**; args: ``(agent, turn,
  reason)``, once per turn, after its last step closed and before the stop
  receipt and ``turn/end``: the last moment for a plugin to log into the turn.
* ``PRE_COMPACT`` (``agent/pre-compact``) — **parallel**; args: ``(agent, trigger,
  signal)``, awaited before a compaction asks for its summary.
* ``COMPACTING`` (``agent/compacting``) — **emit**; args: ``(agent, trigger)``,
  when a compaction starts its summary request (:mod:`tether.loop.compaction`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from msgspec.structs import replace

from tether.agent.events import AGENT_ERROR
from tether.agent.inbox import to_event
from tether.agent.types import CancelCause, Target, UserMessage
from tether.content import Message, ToolCallBlock
from tether.llm.assemble import Assembled, Assembler
from tether.llm.chunks import Finish, ReasoningDelta, StreamChunk, TextDelta, ToolCallDelta
from tether.llm.request import ModelRequest, ToolSpec, parse_model_ref
from tether.llm.service import LLM
from tether.llm.spend import BUDGET_CODE, SPENDING, SpendGate
from tether.loop.budget import DEFAULT_RESERVE_OUTPUT, BudgetBook
from tether.loop.compaction import (
    Compaction,
    CompactionCancelledError,
    CompactionError,
    CompactionSettings,
)
from tether.loop.hooks import (
    PRE_STEP,
    REQUEST,
    REQUEST_ERROR,
    TURN_ABORTING,
    TURN_CLOSING,
    TURN_COMPLETING,
    TURN_STOP,
    RequestError,
)
from tether.loop.prompt import PromptSettings, SystemPrompt
from tether.loop.receipt import stop_cause, write_receipt
from tether.runtime import Veto
from tether.runtime.signal import cancelling_current_task
from tether.session import (
    Aborted,
    AssistantChunk,
    AssistantMessageEvent,
    Blocked,
    Completed,
    Errored,
    MaxTokens,
    OverBudget,
    PendingToolCall,
    PromptCut,
    RetryEvent,
    StepEnd,
    StepStart,
    StopParts,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)
from tether.session.environment import NOTED_TYPES, EnvironmentNoted, last_noted
from tether.session.repair import step_closing_payloads
from tether.session.store import SESSIONS
from tether.tools import ToolExec, ToolResult
from tether.tools.execute import ScheduledCall
from tether.tools.registry import TOOLS

if TYPE_CHECKING:
    from contextvars import Token

    from tether.llm.service import LlmView
    from tether.loop.day_budget import DayLedger
    from tether.loop.driver import AgentDriver
    from tether.persist.cluster import Cluster
    from tether.runtime import CancelSignal, Context
    from tether.session.log import Session
    from tether.tools import ToolRegistry

log = logging.getLogger(__name__)

NOT_STARTED = "tool call cancelled before it started"
REFUSED = "tool call not run: the provider refused the answer that made it"
OVERFLOW = "context-overflow"
OUTPUT_LIMIT = "output-limit"
DEFAULT_MAX_TURN_OUTPUT = 1_000_000
"""Characters of model output one turn may stream (about 250,000 tokens)."""
PROMPT_CUT_RATIO = 2
PROMPT_CUT_MIN_COUNTED = 512
"""A request of which the provider counted less than one :data:`PROMPT_CUT_RATIO`-th
of the estimate was cut by the provider (the estimate is rough, never off by half).
A server that cuts a prompt keeps at least half of its context, and no context is
smaller than 1,024 tokens: a count below :data:`PROMPT_CUT_MIN_COUNTED` is not a cut's."""
SCRIPTED = "offline"
"""The provider of the offline model, whose usage figures count words, not a server's
tokens: never compared with the estimate."""
STRAY_CANCEL = "a tool or hook raised CancelledError, but the turn was not cancelled"

_STEP_LIMIT = "the turn reached its limit of {} steps"
_STEP_LIMIT_PATTERN = re.compile(re.escape(_STEP_LIMIT).replace(r"\{\}", r"\d+"))


def _cluster(ctx: Context) -> Cluster | None:
    """The hosts' cluster (sessions stored in PostgreSQL), for the cluster budget."""
    from tether.persist.cluster import CLUSTER

    return ctx.get(CLUSTER)


def step_limit_reached(reason: TurnEndReason) -> bool:
    """Whether a turn ended because it reached the agent's ``max_steps``.

    That turn ends ``error`` (the stored reasons are a fixed set, see
    ``docs/sessions.md``) with a message of its own, which this recognizes.
    """
    return isinstance(reason, Errored) and bool(_STEP_LIMIT_PATTERN.fullmatch(reason.error))


class TurnRunner:
    """Runs turns for the agents of one agent loop."""

    def __init__(
        self,
        ctx: Context,
        *,
        prompt: PromptSettings | None = None,
        compaction: CompactionSettings | None = None,
        max_turn_output: int = DEFAULT_MAX_TURN_OUTPUT,
        reserve_output: int = DEFAULT_RESERVE_OUTPUT,
        day_ledger: DayLedger | None = None,
    ) -> None:
        self._ctx = ctx
        self._max_turn_output = max_turn_output
        self._prompt_settings = prompt or PromptSettings()
        self.budgets = BudgetBook(
            flush=lambda session: ctx.service(SESSIONS).flush(session),
            catalog=lambda: ctx.service(LLM).catalog,
            reserve_output=reserve_output,
            day=day_ledger,
            cluster=lambda: _cluster(ctx),
        )
        """The spend budgets of the loop's sessions (:mod:`tether.loop.budget`)."""
        self._compaction = Compaction(ctx, compaction or CompactionSettings())
        self._compaction.budgets = self.budgets
        self._prompts: weakref.WeakKeyDictionary[AgentDriver, SystemPrompt] = (
            weakref.WeakKeyDictionary()
        )
        self._cut_said: weakref.WeakSet[AgentDriver] = weakref.WeakSet()
        self._noted: weakref.WeakSet[AgentDriver] = weakref.WeakSet()

    @property
    def compaction(self) -> Compaction:
        """The loop's compactor: the ``compaction`` service the plugin provides."""
        return self._compaction

    @property
    def _llm(self) -> LlmView:
        return self._ctx.service(LLM)

    @property
    def _tools(self) -> ToolRegistry:
        return self._ctx.service(TOOLS)

    async def run_turn(self, driver: AgentDriver) -> None:
        """Run one turn; it always ends with ``turn/end`` in the log.

        Once the turn's signal is cancelled it claims no more input, and it
        closes ``aborted {cause}`` whatever else would have ended it (the step
        limit, a ``agent/turn-stop`` listener, a model error). A
        ``CancelledError`` that is not a cancellation of the driver task (a
        tool or hook raised one of its own) ends the turn ``error`` and the
        driver lives on; a real cancellation closes the turn and propagates.
        """
        session = driver.session
        signal = driver.begin_turn()
        turn = session.last_turn + 1
        reason: TurnEndReason = Errored(error="the turn ended unexpectedly")
        spending = self._spending(driver, turn)
        try:
            session.append(TurnStart(turn=turn))
            # A listener of the status change may have cancelled already: then
            # what is queued now was sent after that cancel, and is not ours.
            driver.open_turn(turn, len(session.events) - 1)
            claimed = () if signal.cancelled else driver.claim_turn()
            driver.take_steer_wake()
            reason = await self._steps(driver, turn, claimed, signal)
        except asyncio.CancelledError:
            if not cancelling_current_task():
                log.error(
                    "agent %s: turn %d: a tool or hook raised CancelledError without the turn "
                    "being cancelled",
                    driver.id,
                    turn,
                    exc_info=True,
                )
                reason = Errored(error=STRAY_CANCEL)
            else:
                reason = _aborted(signal, otherwise=CancelCause.DISPOSED)
                raise
        except Exception as exc:
            log.exception("agent %s: turn %d failed", driver.id, turn)
            reason = Errored(error=f"{type(exc).__name__}: {exc}")
        except BaseException:
            reason = _aborted(signal, otherwise=CancelCause.DISPOSED)
            raise
        finally:
            if signal.cancelled and not isinstance(reason, Aborted):
                reason = _aborted(signal)
            parts: tuple[StopParts, ...] = ()
            if signal.cancelled and not cancelling_current_task():
                parts = await self._aborting(driver, turn)
            try:
                if session.open_turn == turn:
                    _close_step(session, NOT_STARTED)
                    self._ctx.emit(TURN_CLOSING, driver.agent, turn, reason)
                    write_receipt(session, turn, stop_cause(reason), parts)
                    session.append(TurnEnd(turn=turn, reason=reason))
            finally:
                driver.end_turn(reason)
            if spending is not None:
                SPENDING.reset(spending)
            if isinstance(reason, Errored):
                # After turn/end: a listener that cancels acts on what comes next.
                self._ctx.emit(AGENT_ERROR, driver.agent, reason.error)

    def _spending(self, driver: AgentDriver, turn: int) -> Token[SpendGate | None] | None:
        """Set the gate of ``driver``'s budget (or its root's) for the turn about to run;
        the token that unsets it, ``None`` when no budget is kept. A root's turn is the
        turn its per-turn limits count in."""
        ledger = self.budgets.ledger(driver)
        if ledger is None:
            return None
        if ledger.root is driver.session:
            ledger.turn = turn
        return SPENDING.set(ledger.gate(driver.session))

    async def _aborting(self, driver: AgentDriver, turn: int) -> tuple[StopParts, ...]:
        """``agent/turn-aborting``: what the cancelled turn owns elsewhere stops first;
        the parts of the stop receipt its listeners answered (none if one failed)."""
        try:
            return await self._ctx.gather(TURN_ABORTING, driver.agent, turn)
        except asyncio.CancelledError:
            if cancelling_current_task():
                raise
            log.error("agent %s: a turn-aborting listener raised CancelledError", driver.id)
        except Exception:
            log.exception("agent %s: a turn-aborting listener failed", driver.id)
        return ()

    async def _steps(
        self,
        driver: AgentDriver,
        turn: int,
        claimed: tuple[UserMessage, ...],
        signal: CancelSignal,
    ) -> TurnEndReason:
        session = driver.session
        agent = driver.agent
        step_input = claimed
        carried: tuple[UserMessage, ...] = ()
        step = 0
        output = OutputBudget(self._max_turn_output)
        while True:
            # Checked before anything is claimed: input accepted after a cancel
            # belongs to a later turn, never to this one.
            if signal.cancelled:
                return _aborted(signal)
            step += 1
            if step > driver.options.max_steps:
                # Steering still pending stays queued for the next turn.
                return Errored(error=_STEP_LIMIT.format(driver.options.max_steps))
            if step > 1:
                # Claimed only now that the step will run: what is claimed is
                # always logged as this step's input.
                step_input = (*carried, *driver.claim_steering())
                carried = ()
            try:
                step_input = await self._ctx.waterfall(PRE_STEP, step_input, agent, step)
            except Veto as veto:
                log.info("agent %s: step input rejected: %s", driver.id, veto.reason)
                return Blocked()
            note = await self._environment_note(driver)
            if signal.cancelled:
                return _aborted(signal)
            session.append(StepStart(turn=turn, step=step))
            if note is not None:
                session.append(note)
            for message in step_input:
                session.append(to_event(message))
            answered = await self._request(driver, signal, output)
            if isinstance(answered, Errored | OverBudget):
                return answered
            assembled, model = answered
            calls = assembled.message.tool_calls
            if signal.cancelled or assembled.finish.reason == "aborted":
                _close_step(session, NOT_STARTED)
                return _aborted(signal)
            if assembled.finish.reason == "refusal":
                # What the provider refused is not acted on: its tool calls never run.
                _close_step(session, REFUSED)
                return Blocked()
            if calls:
                await self._run_tools(driver, calls, assembled, model, signal)
            session.append(StepEnd(turn=turn, step=step))
            if signal.cancelled:
                return _aborted(signal)
            if assembled.finish.reason == "max-tokens":
                return MaxTokens()
            if not calls:
                # A steer still being stored was sent during this turn: it is ours.
                await driver.steering_settled()
                if signal.cancelled:
                    return _aborted(signal)
                if not driver.inbox.has(Target.STEERING):
                    carried = await self._ctx.serial(TURN_COMPLETING, agent, turn, step) or ()
                    if signal.cancelled:
                        return _aborted(signal)
                    if not carried:
                        return Completed()
                    continue
            stop = await self._ctx.serial(TURN_STOP, agent, turn, step)
            if stop is not None:
                return stop

    async def _request(
        self, driver: AgentDriver, signal: CancelSignal, output: OutputBudget
    ) -> tuple[Assembled, str] | Errored | OverBudget:
        """Ask the model; log the stream and the answer; return it with the model
        its request was sent to, the one the ``agent/request`` waterfall left
        (or the error). Every attempt spends ``output``; an attempt that
        exhausts it is not retried.

        The request is compacted first when it would pass the threshold of the
        model's window; a ``context-overflow`` error compacts once and retries
        (see :mod:`tether.loop.compaction`).
        """
        session = driver.session
        agent = driver.agent
        options = driver.options
        visible = self._tools.list(scope=driver.id, only=options.tools)
        tools = tuple(ToolSpec(t.name, t.description, t.schema) for t in visible)
        system = await self._prompt(driver).text(tools)
        messages = await self._fit(driver, system, tools, signal)
        # The model a session/config chose in the log, else the agent's.
        model = driver.history.model()
        if messages is None:
            return _aborted_answer(), model
        request = ModelRequest(model=model, messages=messages, system=system, tools=tools)
        request = self._for_model(driver, await self._ctx.waterfall(REQUEST, request, agent))
        attempt = 0
        overflowed = False
        while True:
            attempt += 1
            assembled = await self._stream(driver, request, signal, output)
            finish = assembled.finish
            if finish.reason != "error" or signal.cancelled:
                _log_answer(session, assembled)
                return assembled, request.model
            if finish.error_code == BUDGET_CODE:
                # Not sent: its receipt (budget/exhausted) is in the log; no retry fits either.
                return OverBudget()
            if finish.error_code == OUTPUT_LIMIT:
                _log_answer(session, assembled)
                return Errored(error=finish.error or OUTPUT_LIMIT, code=OUTPUT_LIMIT)
            if finish.error_code == OVERFLOW and not overflowed:
                overflowed = True
                if not await self._compact_after_overflow(driver, system, tools, signal):
                    if signal.cancelled:
                        return assembled, request.model
                else:
                    session.append(
                        RetryEvent(
                            attempt=attempt,
                            code=OVERFLOW,
                            error=finish.error or OVERFLOW,
                            delay=0.0,
                        )
                    )
                    request = ModelRequest(model, driver.history.messages(), system, tools)
                    request = self._for_model(
                        driver, await self._ctx.waterfall(REQUEST, request, agent)
                    )
                    continue
            decision = await self._ctx.waterfall(
                REQUEST_ERROR,
                RequestError(
                    error=finish.error or "model error",
                    code=finish.error_code,
                    attempt=attempt,
                    retry_after=finish.retry_after,
                ),
                agent,
            )
            if not decision.retry:
                _log_answer(session, assembled)
                return Errored(error=finish.error or "model error", code=finish.error_code)
            session.append(_attempt_boundary(decision))
            if decision.delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(signal.wait(), decision.delay)
            if signal.cancelled:
                # The attempt was abandoned at its boundary: what it streamed
                # is not an answer, so the model never sees it.
                return assembled, request.model

    def _for_model(self, driver: AgentDriver, request: ModelRequest) -> ModelRequest:
        """``request`` as its model can take it: without the images of tool results
        when the model does not accept images (see :class:`History`).

        Applied after the ``agent/request`` waterfall, to the model it left:
        a listener that switches the model switches what the images become.
        """
        history = driver.history
        model = request.model
        if not history.has_tool_images or self._llm.catalog.accepts_images(model):
            return request
        return replace(request, messages=history.without_tool_images(request.messages, model))

    async def _stream(
        self,
        driver: AgentDriver,
        request: ModelRequest,
        signal: CancelSignal,
        output: OutputBudget,
    ) -> Assembled:
        """One attempt: stream the answer, logging its text and reasoning as chunks.

        A chunk that exhausts ``output`` closes the stream (and with it the
        provider's response) at once; the attempt then ends ``error`` with
        code :data:`OUTPUT_LIMIT`.
        """
        session = driver.session
        assembler = Assembler()
        async with contextlib.aclosing(self._llm.stream(request, signal)) as stream:
            async for chunk in stream:
                if output.spend(chunk):
                    assembler.feed(Finish("error", error=output.exhausted, error_code=OUTPUT_LIMIT))
                    break
                assembler.feed(chunk)
                if isinstance(chunk, TextDelta) and chunk.text:
                    session.append(AssistantChunk(kind="text", delta=chunk.text))
                elif isinstance(chunk, ReasoningDelta) and chunk.text:
                    session.append(AssistantChunk(kind="reasoning", delta=chunk.text))
        assembled = assembler.result()
        if assembled.usage is not None and assembled.usage.input_tokens:
            counted = assembled.usage.input_tokens
            self._check_prompt_cut(driver, request, counted)
            driver.history.note_usage(counted)
        return assembled

    async def _environment_note(self, driver: AgentDriver) -> EnvironmentNoted | None:
        """At the agent's first step, the note of the facts of its environment that may
        change (``context/environment``), unless the last note in the log says the same.

        They are not in the system prompt, which stays the same for the session
        (see :mod:`tether.loop.prompt`)."""
        if driver in self._noted:
            return None
        self._noted.add(driver)
        facts = await self._prompt(driver).facts()
        if facts is None or facts == last_noted(driver.session.events.of_types(NOTED_TYPES)):
            return None
        return EnvironmentNoted(text=facts)

    def _check_prompt_cut(self, driver: AgentDriver, request: ModelRequest, counted: int) -> None:
        """Say once per agent (``llm/prompt-cut``) when the provider counted far fewer
        prompt tokens than the request holds: it dropped the front of the prompt."""
        if driver in self._cut_said or counted < PROMPT_CUT_MIN_COUNTED:
            return
        if parse_model_ref(request.model)[0] == SCRIPTED:
            return
        # Reasoning and images are left out: providers count them their own way.
        estimate = self._compaction.request_tokens(driver, request.system, request.tools)
        sent = estimate - driver.history.uncertain_tokens()
        if counted * PROMPT_CUT_RATIO >= sent:
            return
        self._cut_said.add(driver)
        # Info: the front ends say it from the logged event; this is for service logs.
        log.info(
            "agent %s: %s counted %d prompt tokens of about %d sent; the server dropped "
            "the front of the prompt",
            driver.id,
            request.model,
            counted,
            sent,
        )
        driver.session.append(PromptCut(model=request.model, sent=sent, counted=counted))

    async def _fit(
        self,
        driver: AgentDriver,
        system: str,
        tools: tuple[ToolSpec, ...],
        signal: CancelSignal,
    ) -> tuple[Message, ...] | None:
        """The history to send, compacted first when the request would pass the
        threshold; ``None`` when the turn was cancelled during the compaction."""
        messages = driver.history.messages()
        compaction = self._compaction
        tokens = compaction.request_tokens(driver, system, tools)
        if not compaction.due(driver, tokens):
            return messages
        try:
            if await compaction.run(driver, "auto", signal, tokens=tokens) is not None:
                return driver.history.messages()
        except CompactionCancelledError:
            return None
        except CompactionError as exc:
            log.warning("agent %s: compaction failed; asking uncompacted: %s", driver.id, exc)
        return messages

    async def _compact_after_overflow(
        self,
        driver: AgentDriver,
        system: str,
        tools: tuple[ToolSpec, ...],
        signal: CancelSignal,
    ) -> bool:
        """Compact after the provider refused a request as too long; whether it did."""
        compaction = self._compaction
        tokens = compaction.request_tokens(driver, system, tools)
        try:
            return await compaction.run(driver, "overflow", signal, tokens=tokens) is not None
        except CompactionCancelledError:
            return False
        except CompactionError as exc:
            log.warning("agent %s: compaction after an overflow failed: %s", driver.id, exc)
            return False

    def _prompt(self, driver: AgentDriver) -> SystemPrompt:
        prompt = self._prompts.get(driver)
        if prompt is None:
            options = driver.options
            settings = replace(
                self._prompt_settings, system=options.system, system_append=options.system_append
            )
            prompt = self._prompts[driver] = SystemPrompt(
                settings, Path(driver.session.header.cwd or ".")
            )
        return prompt

    async def _run_tools(
        self,
        driver: AgentDriver,
        calls: tuple[ToolCallBlock, ...],
        assembled: Assembled,
        model: str,
        signal: CancelSignal,
    ) -> None:
        """Run the answer's tool calls; log their results in the model's order.
        ``model``, the model the answer's request was sent to (the one the
        ``agent/request`` waterfall left), is each call's :attr:`ToolExec.model`.

        ``tool/call`` (the started record, with the call's idempotency key) is
        logged as each batch starts (the tool registry runs consecutive
        concurrency-safe calls together, others alone); when a call of the
        batch may have side effects (its tool is not
        :attr:`~tether.tools.definition.Tool.rerunnable`), the session is
        flushed before the batch starts, so a crash can never leave an effect
        whose call the log says never ran. A call whose arguments could not be
        parsed is answered without running. Once the turn is cancelled, no
        further call starts.
        """
        session = driver.session
        agent = driver.agent
        invalid = assembled.invalid_calls
        runnable = [call for call in calls if call.id not in invalid]

        async def started(batch: Sequence[ScheduledCall]) -> None:
            if signal.cancelled:
                return  # the registry answers these without starting them
            for item in batch:
                call = item.call
                session.append(
                    ToolCallEvent(
                        id=call.id,
                        name=call.name,
                        arguments=call.arguments,
                        idempotency_key=item.exec.idempotency_key,
                        rerunnable=item.rerunnable,
                    )
                )
            if not all(item.rerunnable for item in batch):
                await self._ctx.service(SESSIONS).flush(session)

        results = await self._tools.execute_all(
            runnable,
            lambda call: ToolExec(
                agent=agent, call_id=call.id, signal=signal, cwd=session.header.cwd, model=model
            ),
            only=driver.options.tools,
            on_start=started,
        )
        by_id = {result.call_id: result for result in results}
        for call in calls:
            result = by_id.get(call.id)
            if result is None:
                reason = invalid[call.id].reason if call.id in invalid else "no result"
                result = ToolResult(
                    call_id=call.id,
                    name=call.name,
                    content=f"invalid arguments for tool {call.name!r}: {reason}",
                    is_error=True,
                )
            session.append(
                ToolResultEvent(
                    id=call.id,
                    name=call.name,
                    content=result.content,
                    is_error=result.is_error,
                    images=result.images,
                )
            )


class OutputBudget:
    """The model output one turn may still stream, in characters.

    Text, reasoning and tool-call arguments count, in every step and every
    attempt of the turn; usage reports and finishes do not.
    """

    __slots__ = ("_left", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._left = limit

    def spend(self, chunk: StreamChunk) -> bool:
        """Count ``chunk``; whether it passes the limit (it is then not part of the answer)."""
        if isinstance(chunk, TextDelta | ReasoningDelta):
            size = len(chunk.text)
        elif isinstance(chunk, ToolCallDelta):
            size = len(chunk.args_delta)
        else:
            return False
        self._left -= size
        return self._left < 0

    @property
    def exhausted(self) -> str:
        """The one-line error of a turn that passed the limit."""
        return (
            f"the model's output passed this turn's limit of {self.limit:,} characters, "
            "so its stream was stopped (max_turn_output in the agent_loop configuration)"
        )


def _log_answer(session: Session, assembled: Assembled) -> None:
    """Log the answer; an empty one only when it carries usage (the tokens were spent)."""
    message = assembled.message
    if not message.content and assembled.usage is None:
        return
    usage = None if assembled.usage is None else assembled.usage.figures()
    session.append(
        AssistantMessageEvent(
            content=message.content,
            finish=assembled.finish.reason,
            interrupted=message.interrupted,
            usage=usage,
        )
    )


def _aborted_answer() -> Assembled:
    """The answer of a request that was cancelled before it was sent."""
    assembler = Assembler()
    assembler.feed(Finish("aborted"))
    return assembler.result()


def _close_step(session: Session, why: str) -> None:
    """Balance an open step: answer pending tool calls, then close it."""

    def result_for(pending: PendingToolCall) -> ToolResultEvent:
        text = why if not pending.started else "tool call interrupted; its outcome is unknown"
        return ToolResultEvent(
            id=pending.call.id, name=pending.call.name, content=text, is_error=True
        )

    for payload in step_closing_payloads(session, result_for):
        session.append(payload)


def _aborted(signal: CancelSignal, *, otherwise: CancelCause = CancelCause.USER) -> Aborted:
    """The reason a cancelled turn closes with: its signal's cause, else ``otherwise``
    (a turn ended by a cancellation of the driver itself is being torn down)."""
    return Aborted(cause=str(signal.reason or otherwise))


def _attempt_boundary(decision: RequestError) -> RetryEvent:
    """``llm/retry``: the chunks streamed so far in this step belong to an abandoned attempt."""
    return RetryEvent(
        attempt=decision.attempt,
        code=decision.code,
        error=decision.error,
        delay=decision.delay,
        retry_after=decision.retry_after,
        max_attempts=decision.max_attempts,
    )
