"""Spans folded from a session's events: the trace of a session, rebuilt from its log.

:class:`TraceFold` reads a session's stored events in seq order and yields a
:class:`SpanRecord` for each span as soon as the event that closes it has been
folded. Nothing here reads a clock: a span starts and ends at the ``time`` of
the events that open and close it, and its ids are derived from the session id
and the seq of the event that opens it (:func:`span_id`), so folding the same
log twice (or a log that grew after a crash and its repair) yields the same
spans with the same ids. The OpenTelemetry packages are not needed here; the
exporter (:mod:`tether.telemetry.otlp`) turns records into OTLP.

The shape follows the OpenTelemetry GenAI semantic conventions:

* ``invoke_agent tether`` — one per turn (``turn/start`` to ``turn/end``), the
  root of the turn's trace, with the turn's total usage and cost; a child
  agent's turn is a child of the parent's ``execute_tool`` span of the call that
  delegated to it, in the parent's trace (the caller passes that
  :class:`TraceParent`).
* ``chat {model}`` — one per model request of a step (``step/start`` to the
  step's ``assistant/message``), with the model, the token usage, the cost and
  the finish reason; a retried request is an event (``gen_ai.request.retry``)
  on it.
* ``execute_tool {name}`` — one per tool call (``tool/call`` to
  ``tool/result``), with the tool's name, the call id and the outcome.
* The stop receipt (``tool/stopped``), a compaction and a turn closed by crash
  repair (a crash, or a takeover by another host) are events on the turn's
  span.

Content (prompts, answers, tool arguments and results) is recorded only with
``content=True``; whatever is recorded passes through
:func:`tether.masking.mask_secrets` first.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from tether.content import TextBlock
from tether.frozen import thaw
from tether.masking import mask_secrets
from tether.provider_keys import provider_of
from tether.session import (
    Aborted,
    AssistantMessageEvent,
    Errored,
    Event,
    Interrupted,
    RetryEvent,
    StepEnd,
    StepStart,
    ToolCallEvent,
    ToolResultEvent,
    ToolStopped,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)
from tether.session.compaction import ContextCompacted
from tether.session.model import ModelChoice, ModelTracker
from tether.session.settings import ConfigChanged

__all__ = [
    "FOLDED_TYPES",
    "AttributeValue",
    "Pricing",
    "SpanEventRecord",
    "SpanRecord",
    "TraceFold",
    "TraceParent",
    "span_id",
    "trace_id",
]

AttributeValue = str | bool | int | float | tuple[str, ...]
"""What an attribute may hold (OTLP's scalar and string-array values)."""

Pricing = Callable[[str, Mapping[str, int]], "tuple[float, str] | None"]
"""``(model, usage) -> (amount, currency)``, or ``None`` when the model has no prices."""

AGENT_NAME = "tether"
"""``gen_ai.agent.name`` of every agent span."""


def _digest(*parts: object) -> bytes:
    return hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=16).digest()


def trace_id(session_id: str, seq: int) -> int:
    """The trace id of the turn of ``session_id`` that opened at ``seq`` (never 0)."""
    return int.from_bytes(_digest("trace", session_id, seq), "big") or 1


def span_id(session_id: str, seq: int) -> int:
    """The id of the span of ``session_id`` opened by the event at ``seq`` (never 0)."""
    return int.from_bytes(_digest("span", session_id, seq)[:8], "big") or 1


@dataclass(frozen=True, slots=True)
class TraceParent:
    """Where a session's turns hang: the trace and the span of the delegating call."""

    trace_id: int
    span_id: int


@dataclass(frozen=True, slots=True)
class SpanEventRecord:
    """A timestamped event on a span."""

    name: str
    time: float
    attributes: Mapping[str, AttributeValue]


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One finished span, all of it taken from the log.

    ``start`` and ``end`` are seconds since the epoch (the times of the events
    that opened and closed it); ``end_seq`` is the seq of the closing event,
    which orders exports and marks how far a session has been exported.
    ``error`` is the status description of a failed span (``None``: ok).
    """

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start: float
    end: float
    end_seq: int
    attributes: Mapping[str, AttributeValue]
    events: tuple[SpanEventRecord, ...] = ()
    error: str | None = None

    @property
    def duration(self) -> float:
        """Seconds from start to end (never negative)."""
        return max(0.0, self.end - self.start)


@dataclass(slots=True)
class _Open:
    """A span being folded: what its opening event said, and what came since."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start: float
    attributes: dict[str, AttributeValue]
    events: list[SpanEventRecord] = field(default_factory=list)

    def close(self, end: float, end_seq: int, error: str | None = None) -> SpanRecord:
        return SpanRecord(
            self.name,
            self.trace_id,
            self.span_id,
            self.parent_id,
            self.start,
            max(end, self.start),
            end_seq,
            self.attributes,
            tuple(self.events),
            error,
        )


def _model_name(model: str) -> str:
    return model.partition(":")[2] or model


class TraceFold:
    """The spans of one session, folded from its events in seq order.

    Feed the events from seq 0 in order (:meth:`fold`; those of
    :data:`FOLDED_TYPES` suffice); each call returns the spans the event closed,
    children before parents. ``parent`` places the session's
    turns under a delegating call (a child agent); ``None`` makes each turn the
    root of a trace of its own. ``skip_before`` leaves out the spans that
    close before that seq (a fork's copied events, which are its parent's).
    ``secrets`` are values masked in recorded content and error messages, beside
    what :func:`~tether.masking.mask_secrets` masks by shape.

    Raises:
        ValueError: an event comes out of seq order.
    """

    def __init__(
        self,
        session_id: str,
        model: str,
        *,
        parent: TraceParent | None = None,
        content: bool = False,
        pricing: Pricing | None = None,
        skip_before: int = 0,
        secrets: tuple[str, ...] = (),
    ) -> None:
        self.session_id = session_id
        self._models = ModelTracker(ModelChoice(model))
        self._parent = parent
        self._content = content
        self._pricing = pricing
        self._skip_before = skip_before
        self._secrets = secrets
        self.next_seq = 0
        """The seq of the next event to fold."""
        self._turn: _Open | None = None
        self._chat: _Open | None = None
        self._tools: dict[str, _Open] = {}
        self._prompts: list[str] = []

    # -- the public surface ------------------------------------------------------

    def fold(self, event: Event) -> list[SpanRecord]:
        """Fold ``event``; the spans it closed (empty for most events).

        Events of types outside :data:`FOLDED_TYPES` change nothing and may be
        left out (:meth:`fold_through` says how far the log was read).

        Raises:
            ValueError: ``event`` comes before the next seq.
        """
        if event.seq < self.next_seq:
            raise ValueError(
                f"session {self.session_id}: expected seq {self.next_seq} or later, got {event.seq}"
            )
        self.next_seq = event.seq + 1
        handler = _HANDLERS.get(event.type)
        if handler is None:
            return []
        closed = handler(self, event)
        if closed and closed[-1].end_seq < self._skip_before:
            return []
        return closed

    def fold_all(self, events: Iterable[Event]) -> Iterator[SpanRecord]:
        """Fold each of ``events``; the spans they closed, in order."""
        for event in events:
            yield from self.fold(event)

    def fold_through(self, events: Iterable[Event], stop: int) -> list[SpanRecord]:
        """Fold ``events``, the events of the log before seq ``stop`` that are of the
        :data:`FOLDED_TYPES` (others may be left out); the spans they closed."""
        closed = list(self.fold_all(events))
        self.next_seq = max(self.next_seq, stop)
        return closed

    @property
    def model(self) -> str:
        """The session's model as of the events folded so far."""
        return self._models.current.model

    def _mask(self, text: str) -> str:
        return mask_secrets(text, self._secrets)

    # -- folding -----------------------------------------------------------------

    def _open(
        self, name: str, event: Event, attributes: dict[str, AttributeValue], parent: _Open | None
    ) -> _Open:
        assert parent is not None, f"{name}: no open turn at seq {event.seq}"
        return _Open(
            name,
            parent.trace_id,
            span_id(self.session_id, event.seq),
            parent.span_id,
            event.time,
            attributes,
        )

    def _turn_start(self, event: Event) -> list[SpanRecord]:
        payload = event.payload
        assert isinstance(payload, TurnStart)
        if self._parent is None:
            trace, parent_span = trace_id(self.session_id, event.seq), None
        else:
            trace, parent_span = self._parent.trace_id, self._parent.span_id
        self._turn = _Open(
            f"invoke_agent {AGENT_NAME}",
            trace,
            span_id(self.session_id, event.seq),
            parent_span,
            event.time,
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": AGENT_NAME,
                "gen_ai.agent.id": self.session_id,
                "gen_ai.conversation.id": self.session_id,
                "gen_ai.provider.name": provider_of(self.model),
                "gen_ai.request.model": _model_name(self.model),
                "tether.turn": payload.turn,
            },
        )
        self._prompts = []
        return []

    def _user_message(self, event: Event) -> list[SpanRecord]:
        payload = event.payload
        assert isinstance(payload, UserMessageEvent)
        if self._content:
            text = "".join(b.text for b in payload.content if isinstance(b, TextBlock))
            self._prompts.append(text)
        return []

    def _step_start(self, event: Event) -> list[SpanRecord]:
        payload = event.payload
        assert isinstance(payload, StepStart)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_of(self.model),
            "gen_ai.request.model": _model_name(self.model),
            "gen_ai.conversation.id": self.session_id,
            "tether.step": payload.step,
        }
        self._chat = self._open(f"chat {_model_name(self.model)}", event, attributes, self._turn)
        return []

    def _retry(self, event: Event) -> list[SpanRecord]:
        payload = event.payload
        assert isinstance(payload, RetryEvent)
        if self._chat is not None:
            attributes: dict[str, AttributeValue] = {
                "tether.retry.attempt": payload.attempt,
                "error.type": payload.code or "error",
                "tether.retry.delay": payload.delay,
            }
            self._chat.events.append(
                SpanEventRecord("gen_ai.request.retry", event.time, attributes)
            )
        return []

    def _answer(self, event: Event) -> list[SpanRecord]:
        payload = event.payload
        assert isinstance(payload, AssistantMessageEvent)
        chat, self._chat = self._chat, None
        if chat is None:
            return []
        attributes = chat.attributes
        attributes["gen_ai.response.finish_reasons"] = (payload.finish,)
        usage = payload.usage
        if usage is not None:
            attributes["gen_ai.usage.input_tokens"] = usage.get("input_tokens", 0)
            attributes["gen_ai.usage.output_tokens"] = usage.get("output_tokens", 0)
            if self._turn is not None:
                _add(
                    self._turn.attributes, "gen_ai.usage.input_tokens", usage.get("input_tokens", 0)
                )
                _add(
                    self._turn.attributes,
                    "gen_ai.usage.output_tokens",
                    usage.get("output_tokens", 0),
                )
            cached = usage.get("cached_input_tokens")
            if cached is not None:
                attributes["gen_ai.usage.cache_read.input_tokens"] = cached
            price = None if self._pricing is None else self._pricing(self.model, usage)
            if price is not None:
                attributes["tether.cost"] = round(price[0], 9)
                attributes["tether.cost.currency"] = price[1]
                if self._turn is not None:
                    _add(self._turn.attributes, "tether.cost", round(price[0], 9))
                    self._turn.attributes["tether.cost.currency"] = price[1]
        if payload.interrupted:
            attributes["tether.interrupted"] = True
        if self._content and self._prompts:
            # The prompts logged since the last answer: what this request added.
            attributes["gen_ai.input.messages"] = _messages("user", self._prompts, self._mask)
            self._prompts = []
        if self._content:
            answer = _messages("assistant", [payload.text], self._mask)
            attributes["gen_ai.output.messages"] = answer
        return [chat.close(event.time, event.seq)]

    def _tool_call(self, event: Event) -> list[SpanRecord]:
        payload = event.payload
        assert isinstance(payload, ToolCallEvent)
        attributes = _tool_attributes(payload.name, payload.id)
        if self._content:
            arguments = _masked(thaw(payload.arguments), self._mask)
            attributes["gen_ai.tool.call.arguments"] = json.dumps(
                arguments, ensure_ascii=False, sort_keys=True
            )
        self._tools[payload.id] = self._open(
            f"execute_tool {payload.name}", event, attributes, self._turn
        )
        return []

    def _tool_result(self, event: Event) -> list[SpanRecord]:
        payload = event.payload
        assert isinstance(payload, ToolResultEvent)
        span = self._tools.pop(payload.id, None)
        if span is None:
            # Answered without running (invalid arguments, cancelled before it
            # started): a span of no length, so the call is still seen.
            span = self._open(
                f"execute_tool {payload.name}",
                event,
                {**_tool_attributes(payload.name, payload.id), "tether.tool.started": False},
                self._turn,
            )
        span.attributes["tether.tool.outcome"] = "error" if payload.is_error else "ok"
        if self._content:
            span.attributes["gen_ai.tool.call.result"] = self._mask(payload.content)
        if payload.is_error:
            span.attributes["error.type"] = "tool_error"
            return [span.close(event.time, event.seq, "tool_error")]
        return [span.close(event.time, event.seq)]

    def _step_end(self, event: Event) -> list[SpanRecord]:
        chat, self._chat = self._chat, None
        if chat is None:
            return []
        # The step closed without an answer: the request failed or the process died.
        chat.attributes["error.type"] = "no_answer"
        return [chat.close(event.time, event.seq, "no_answer")]

    def _stopped(self, event: Event) -> list[SpanRecord]:
        payload = event.payload
        assert isinstance(payload, ToolStopped)
        if self._turn is not None:
            attributes: dict[str, AttributeValue] = {
                "tether.stop.cause": payload.cause,
                "tether.stop.calls": tuple(
                    e.id for e in payload.stopped if e.kind in ("call", "terminal")
                ),
                "tether.stop.tasks": tuple(e.id for e in payload.stopped if e.kind == "task"),
                "tether.stop.hooks": tuple(e.id for e in payload.stopped if e.kind == "hook"),
                "tether.stop.agents": tuple(a.id for a in payload.agents),
            }
            self._turn.events.append(SpanEventRecord("tether.tool.stopped", event.time, attributes))
        return []

    def _compacted(self, event: Event) -> list[SpanRecord]:
        payload = event.payload
        assert isinstance(payload, ContextCompacted)
        if self._turn is not None:
            attributes: dict[str, AttributeValue] = {
                "tether.compaction.trigger": payload.trigger,
                "tether.compaction.tokens_before": payload.tokens_before,
            }
            self._turn.events.append(
                SpanEventRecord("tether.context.compacted", event.time, attributes)
            )
        return []

    def _config(self, event: Event) -> list[SpanRecord]:
        self._models.advance(event)
        return []

    def _turn_end(self, event: Event) -> list[SpanRecord]:
        payload = event.payload
        assert isinstance(payload, TurnEnd)
        closed: list[SpanRecord] = []
        # A turn's end closes whatever it left open (a log written before its
        # spans' own closing events existed).
        for span in self._tools.values():
            span.attributes["tether.tool.outcome"] = "unknown"
            closed.append(span.close(event.time, event.seq, "unknown_outcome"))
        self._tools.clear()
        if self._chat is not None:
            closed.append(self._chat.close(event.time, event.seq, "no_answer"))
            self._chat = None
        turn, self._turn = self._turn, None
        if turn is None:
            return closed
        reason = payload.reason
        turn.attributes["tether.turn.end_reason"] = reason.kind
        error: str | None = None
        if isinstance(reason, Aborted):
            turn.attributes["tether.turn.cancel_cause"] = reason.cause
            turn.events.append(
                SpanEventRecord("tether.turn.cancelled", event.time, {"tether.cause": reason.cause})
            )
        elif isinstance(reason, Interrupted):
            # Written only by crash repair, by whichever process (or host) took
            # the session over next.
            turn.events.append(SpanEventRecord("tether.session.recovered", event.time, {}))
            error = "interrupted"
        elif isinstance(reason, Errored):
            error = self._mask(reason.error)
            turn.attributes["error.type"] = reason.code or "error"
        closed.append(turn.close(event.time, event.seq, error))
        return closed


def _tool_attributes(name: str, call_id: str) -> dict[str, AttributeValue]:
    """What every ``execute_tool`` span says of its call."""
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.type": "function",
    }


def _add(attributes: dict[str, AttributeValue], key: str, amount: float) -> None:
    """Add ``amount`` to the number under ``key`` (a turn's totals)."""
    before = attributes.get(key, 0)
    assert isinstance(before, int | float)
    attributes[key] = before + amount


def _messages(role: str, texts: list[str], mask: Callable[[str], str]) -> str:
    """The GenAI conventions' message list, as JSON, each text masked."""
    messages = [{"role": role, "parts": [{"type": "text", "content": mask(t)}]} for t in texts]
    return json.dumps(messages, ensure_ascii=False)


def _masked(value: object, mask: Callable[[str], str]) -> object:
    """``value`` (JSON data) with every string masked: before encoding, where a secret
    still has its own edges (an encoded ``\\n`` before a key hides it)."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, dict):
        return {key: _masked(item, mask) for key, item in value.items()}
    if isinstance(value, list):
        return [_masked(item, mask) for item in value]
    return value


_HANDLERS: dict[str, Callable[[TraceFold, Event], list[SpanRecord]]] = {
    TurnStart.type: TraceFold._turn_start,
    UserMessageEvent.type: TraceFold._user_message,
    StepStart.type: TraceFold._step_start,
    RetryEvent.type: TraceFold._retry,
    AssistantMessageEvent.type: TraceFold._answer,
    ToolCallEvent.type: TraceFold._tool_call,
    ToolResultEvent.type: TraceFold._tool_result,
    StepEnd.type: TraceFold._step_end,
    ToolStopped.type: TraceFold._stopped,
    ContextCompacted.type: TraceFold._compacted,
    ConfigChanged.type: TraceFold._config,
    TurnEnd.type: TraceFold._turn_end,
}

FOLDED_TYPES = frozenset(_HANDLERS)
"""The event types a fold reads; the others (streamed chunks above all) may be skipped."""
