"""The event vocabulary: the built-in payloads.

Code writes and reads session events through typed payloads whose class-level
``type`` names the stored event type. Each built-in payload is one
`EventStruct` (a frozen msgspec ``Struct``): its fields are its stored
``data``, so the class is the single definition of the event's shape, and a
stored record decodes straight into it, type-checked in C. Payloads also
check their fields on construction (raising `EventFormatError`, see
`tether.session.fields`), so a payload that exists can be stored and read
back.

Plugins define their types the same way, by subclassing `EventStruct`
(`tether.session.payload`, re-exported here). The older style, an
`EventPayload` subclass with hand-written ``to_data`` and ``from_data``,
keeps working.

Stored formats are extended, never changed: a new need is a new event type
(registered by a plugin), not a new meaning for an old field.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import ClassVar, Literal, Self, cast, get_args

import msgspec

from tether.content import (
    AssistantBlock,
    ImageRef,
    ReasoningBlock,
    RedactedReasoningBlock,
    TextBlock,
    ToolCallBlock,
    UserBlock,
)
from tether.session.errors import EventFormatError
from tether.session.fields import (
    as_tuple,
    bad_field,
    check_bool,
    check_choice,
    check_id,
    check_ordinal,
    check_seconds,
    check_str,
    freeze_data,
    frozen_usage,
)
from tether.session.payload import EventPayload, EventStruct, encode_data

__all__ = [
    "BUILTIN_PAYLOADS",
    "Aborted",
    "AssistantChunk",
    "AssistantMessageEvent",
    "Blocked",
    "ChunkKind",
    "Completed",
    "Errored",
    "EventPayload",
    "EventStruct",
    "InboxOp",
    "InboxQueue",
    "InboxSpliced",
    "Interrupted",
    "MaxTokens",
    "OverBudget",
    "RetryEvent",
    "StepEnd",
    "StepStart",
    "ToolCallEvent",
    "ToolResultEvent",
    "TurnEnd",
    "TurnEndReason",
    "TurnStart",
    "UserMessageEvent",
    "encode_data",
]

_set = msgspec.structs.force_setattr


# -- turns and steps ------------------------------------------------------------


class TurnStart(EventStruct, frozen=True):
    """A turn opens. Turns are numbered 1, 2, … per session and never nest."""

    type: ClassVar[str] = "turn/start"

    turn: int

    def __post_init__(self) -> None:
        check_ordinal(self.type, "turn", self.turn)


class Completed(msgspec.Struct, frozen=True, tag_field="kind", tag="completed"):
    """The turn finished: nothing more was owed."""

    kind: ClassVar[str] = "completed"


class Aborted(msgspec.Struct, frozen=True, tag_field="kind", tag="aborted"):
    """The turn was cancelled; ``cause`` is the cancel cause (``user``,
    ``parent``, ``disposed``, …)."""

    kind: ClassVar[str] = "aborted"

    cause: str

    def __post_init__(self) -> None:
        check_id("turn/end", "reason cause", self.cause)


class Blocked(msgspec.Struct, frozen=True, tag_field="kind", tag="blocked"):
    """The turn was refused: a hook would not let it go on, or the provider
    would not answer (the model declined, or its content filter stopped the
    answer)."""

    kind: ClassVar[str] = "blocked"


class Errored(msgspec.Struct, frozen=True, tag_field="kind", tag="error", omit_defaults=True):
    """The turn failed; ``error`` describes the failure.

    ``code`` is the normalized code of a model failure (``auth``,
    ``rate-limit``, ``context-overflow``, … — see
    :mod:`tether.llm.adapters.errors`), so a frontend can say what to do; it
    is left out (``None``) for any other failure and in logs written before it.
    """

    kind: ClassVar[str] = "error"

    error: str
    code: str | None = None

    def __post_init__(self) -> None:
        check_str("turn/end", "reason error", self.error)
        if self.code is not None:
            check_str("turn/end", "reason code", self.code)


class MaxTokens(msgspec.Struct, frozen=True, tag_field="kind", tag="max-tokens"):
    """The model stopped at its output token limit."""

    kind: ClassVar[str] = "max-tokens"


class OverBudget(msgspec.Struct, frozen=True, tag_field="kind", tag="budget"):
    """A model request was not sent: its reservation did not fit a spend budget
    (the ``budget/exhausted`` receipt before ``turn/end`` says which)."""

    kind: ClassVar[str] = "budget"


class Interrupted(msgspec.Struct, frozen=True, tag_field="kind", tag="interrupted"):
    """The process died mid-turn; written only by crash repair."""

    kind: ClassVar[str] = "interrupted"


TurnEndReason = Completed | Aborted | Blocked | Errored | MaxTokens | OverBudget | Interrupted
"""Why a turn ended. Stored as ``{"kind": ...}``, plus ``cause`` for `Aborted`
and ``error`` for `Errored`."""

_REASON_CLASSES: tuple[type[TurnEndReason], ...] = get_args(TurnEndReason)


class TurnEnd(EventStruct, frozen=True):
    """The open turn closes. Every turn that starts ends with exactly one."""

    type: ClassVar[str] = "turn/end"

    turn: int
    reason: TurnEndReason

    def __post_init__(self) -> None:
        check_ordinal(self.type, "turn", self.turn)
        if not isinstance(self.reason, _REASON_CLASSES):
            raise bad_field(self.type, "reason", "a TurnEndReason", self.reason)


class _StepBoundary(EventStruct, frozen=True):
    """The shape `StepStart` and `StepEnd` share."""

    turn: int
    step: int

    def __post_init__(self) -> None:
        check_ordinal(self.type, "turn", self.turn)
        check_ordinal(self.type, "step", self.step)


class StepStart(_StepBoundary, frozen=True):
    """A step (one model request and the tools it called) opens inside ``turn``.
    Steps are numbered 1, 2, … per turn and never nest."""

    type: ClassVar[str] = "step/start"


class StepEnd(_StepBoundary, frozen=True):
    """The open step closes."""

    type: ClassVar[str] = "step/end"


# -- conversation ---------------------------------------------------------------

_USER_BLOCKS: tuple[type[UserBlock], ...] = (TextBlock, ImageRef)
_ASSISTANT_BLOCKS: tuple[type[AssistantBlock], ...] = (
    TextBlock,
    ReasoningBlock,
    RedactedReasoningBlock,
    ToolCallBlock,
)


def _content(
    type_name: str, value: object, allowed: tuple[type, ...], field: str = "content"
) -> tuple[object, ...]:
    blocks = as_tuple(type_name, field, value)
    for block in blocks:
        if not isinstance(block, allowed):
            names = ", ".join(kind.__name__ for kind in allowed)
            raise bad_field(type_name, f"{field} entries", f"one of {names}", block)
    return blocks


class UserMessageEvent(EventStruct, frozen=True):
    """A user message enters the conversation (model-visible).

    ``id`` identifies the message across the inbox and the log; ``source`` says
    who sent it (``user``, ``steer``, a plugin name, …).
    """

    type: ClassVar[str] = "user/message"

    id: str
    source: str
    content: tuple[UserBlock, ...]

    def __post_init__(self) -> None:
        check_id(self.type, "id", self.id)
        check_id(self.type, "source", self.source)
        _set(self, "content", _content(self.type, self.content, _USER_BLOCKS))


ChunkKind = Literal["text", "reasoning"]
_CHUNK_KINDS: tuple[str, ...] = get_args(ChunkKind)


class AssistantChunk(EventStruct, frozen=True, gc=False):
    """A piece of the answer as it streams. Not model-visible: the step's
    `AssistantMessageEvent` carries the complete content."""

    type: ClassVar[str] = "assistant/chunk"

    kind: ChunkKind
    delta: str

    def __post_init__(self) -> None:
        # Most of a log is chunks: one test, and the culprit only on failure.
        if self.kind not in _CHUNK_KINDS or type(self.delta) is not str:
            check_choice(self.type, "kind", self.kind, _CHUNK_KINDS)
            check_str(self.type, "delta", self.delta)


class AssistantMessageEvent(EventStruct, frozen=True):
    """The model's complete answer for a step (model-visible).

    ``content`` may request tool calls, with ids unique within the message.
    ``finish`` is the provider's finish reason. ``interrupted`` marks an answer
    cut short by a cancel: its content is what had streamed by then. ``usage``
    holds token counts by name, when the provider reported them.

    Tool-call arguments and usage are copied into immutable form on
    construction.
    """

    type: ClassVar[str] = "assistant/message"

    content: tuple[AssistantBlock, ...]
    finish: str
    interrupted: bool = False
    usage: Mapping[str, int] | None = None

    def __post_init__(self) -> None:
        content = _content(self.type, self.content, _ASSISTANT_BLOCKS)
        for block in content:
            if isinstance(block, ToolCallBlock):
                content = self._freeze_tool_calls(cast(tuple[AssistantBlock, ...], content))
                break
        _set(self, "content", content)
        check_str(self.type, "finish", self.finish)
        check_bool(self.type, "interrupted", self.interrupted)
        if self.usage is not None:
            _set(self, "usage", frozen_usage(self.type, self.usage))

    def __hash__(self) -> int:
        # Mappings are unhashable; the other fields keep hashing consistent.
        return hash((self.content, self.finish, self.interrupted))

    @property
    def text(self) -> str:
        """The answer's text blocks, joined (reasoning and tool calls left out)."""
        return "".join(block.text for block in self.content if isinstance(block, TextBlock))

    def _freeze_tool_calls(self, content: tuple[AssistantBlock, ...]) -> tuple[AssistantBlock, ...]:
        seen: set[str] = set()
        blocks: list[AssistantBlock] = []
        for block in content:
            if not isinstance(block, ToolCallBlock):
                blocks.append(block)
                continue
            check_id(self.type, "tool call id", block.id)
            check_id(self.type, "tool call name", block.name)
            if block.id in seen:
                raise EventFormatError(f"{self.type}: duplicate tool call id {block.id!r}")
            seen.add(block.id)
            where = f"{self.type}: arguments of tool call {block.id!r}"
            arguments = freeze_data(block.arguments, where=where)
            blocks.append(ToolCallBlock(block.id, block.name, arguments))
        return tuple(blocks)

    @property
    def tool_calls(self) -> tuple[ToolCallBlock, ...]:
        """The tool calls this answer requests, in order."""
        return tuple(block for block in self.content if isinstance(block, ToolCallBlock))


# -- tools ------------------------------------------------------------------------


class ToolCallEvent(EventStruct, frozen=True, omit_defaults=True):
    """A requested tool call starts executing, with the arguments it runs with:
    the log's *started* record of the call.

    Not model-visible: it tells crash repair that the call may have had
    effects. A requested call that never started has none. For a tool with
    side effects it is durable before the tool starts (the loop flushes the
    session first), so a call whose effect happened is never repaired as one
    that never ran.

    ``idempotency_key`` names this call (and no other) wherever it runs,
    before or after a takeover: the tool sees it as
    :attr:`~tether.tools.definition.ToolExec.idempotency_key` and may hand it
    to the system it changes. ``rerunnable`` records that the tool declared
    itself read-only or idempotent (:attr:`~tether.tools.definition.Tool.rerunnable`):
    running it again is safe, so repair does not report its outcome as
    unknown. Logs written before these fields read as ``None`` and ``False``.
    """

    type: ClassVar[str] = "tool/call"

    id: str
    name: str
    arguments: Mapping[str, object]
    idempotency_key: str | None = None
    rerunnable: bool = False

    def __post_init__(self) -> None:
        check_id(self.type, "id", self.id)
        check_id(self.type, "name", self.name)
        where = f"{self.type}: arguments"
        _set(self, "arguments", freeze_data(self.arguments, where=where))
        if self.idempotency_key is not None and not isinstance(self.idempotency_key, str):
            raise TypeError(f"{self.type}: idempotency_key must be str or None")
        if not isinstance(self.rerunnable, bool):
            raise TypeError(f"{self.type}: rerunnable must be bool")

    def __hash__(self) -> int:
        # Mappings are unhashable; the other fields keep hashing consistent.
        return hash((self.id, self.name))


class ToolResultEvent(EventStruct, frozen=True, omit_defaults=True):
    """The result of a requested tool call (model-visible).

    ``images`` are images the result carries beside its text (``{"type":
    "image", "url": "data:…;base64,…", "mime_type": …}``, as in a user
    message). Stored only when there are some, so a result without images
    is stored as it always was, and logs written before images existed
    load unchanged.
    """

    type: ClassVar[str] = "tool/result"

    id: str
    name: str
    content: str
    is_error: bool
    images: tuple[ImageRef, ...] = ()

    def __post_init__(self) -> None:
        check_id(self.type, "id", self.id)
        check_id(self.type, "name", self.name)
        check_str(self.type, "content", self.content)
        check_bool(self.type, "is_error", self.is_error)
        if self.images or type(self.images) is not tuple:
            _set(self, "images", _content(self.type, self.images, (ImageRef,), "images"))


# -- inbox --------------------------------------------------------------------------

InboxQueue = Literal["queued", "steering"]
InboxOp = Literal["insert", "claim", "cancel", "discard"]
_INBOX_QUEUES: tuple[str, ...] = get_args(InboxQueue)
_INBOX_OPS: tuple[str, ...] = get_args(InboxOp)
_SPLICED = "agent/inbox/spliced"


class _SplicedEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One stored entry of a splice: a whole message for ``insert``, else ``{id}``."""

    id: str
    source: str | None = None
    content: tuple[UserBlock, ...] | None = None


class _SplicedData(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The stored shape of `InboxSpliced`."""

    queue: InboxQueue
    op: InboxOp
    messages: tuple[_SplicedEntry, ...]


class InboxSpliced(EventStruct, frozen=True):
    """One change to an agent's inbox, logged before it takes effect.

    ``insert`` appends ``messages`` to the tail of ``queue``. ``claim`` (the
    driver took them), ``cancel`` (a cancel cleared them) and ``discard``
    (dropped otherwise) remove the messages named by ``ids`` from ``queue``.
    Replaying the splices in order (`tether.session.replay_inbox`) rebuilds
    both FIFOs exactly. Ids are unique within a splice.

    Stored as ``{"queue", "op", "messages"}``, each entry of ``messages`` being
    the full message ``{id, source, content}`` for ``insert`` and ``{id}``
    otherwise.
    """

    type: ClassVar[str] = _SPLICED

    queue: InboxQueue
    op: InboxOp
    messages: tuple[UserMessageEvent, ...] = ()
    ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_choice(self.type, "queue", self.queue, _INBOX_QUEUES)
        check_choice(self.type, "op", self.op, _INBOX_OPS)
        messages = as_tuple(self.type, "messages", self.messages)
        ids = as_tuple(self.type, "ids", self.ids)
        if self.op == "insert":
            if ids:
                raise EventFormatError(f"{self.type}: insert carries messages, not ids")
            for message in messages:
                if not isinstance(message, UserMessageEvent):
                    raise bad_field(self.type, "messages entries", "UserMessageEvent", message)
        else:
            if messages:
                raise EventFormatError(f"{self.type}: {self.op} carries ids, not messages")
            for message_id in ids:
                check_id(self.type, "ids entries", message_id)
        _set(self, "messages", messages)
        _set(self, "ids", ids)
        named = self.message_ids
        if len(set(named)) != len(named):
            raise EventFormatError(f"{self.type}: a message id appears twice in {named!r}")

    @property
    def message_ids(self) -> tuple[str, ...]:
        """The ids this splice names, whatever its op."""
        if self.op == "insert":
            return tuple(message.id for message in self.messages)
        return self.ids

    @classmethod
    def stored_type(cls) -> builtins.type:
        return _SplicedData

    @classmethod
    def from_stored(cls, value: object) -> Self:
        stored = cast(_SplicedData, value)
        if stored.op != "insert":
            for entry in stored.messages:
                if entry.source is not None or entry.content is not None:
                    raise EventFormatError(f"{cls.type}: {stored.op} entries carry only an id")
            return cls(stored.queue, stored.op, ids=tuple(e.id for e in stored.messages))
        try:
            messages = tuple(_inserted(entry) for entry in stored.messages)
        except EventFormatError as error:
            raise EventFormatError(f"{cls.type}: inserted message: {error}") from None
        return cls(stored.queue, stored.op, messages=messages)

    def stored(self) -> object:
        if self.op == "insert":
            entries = tuple(_SplicedEntry(m.id, m.source, m.content) for m in self.messages)
        else:
            entries = tuple(_SplicedEntry(message_id) for message_id in self.ids)
        return _SplicedData(self.queue, self.op, entries)


def _inserted(entry: _SplicedEntry) -> UserMessageEvent:
    if entry.source is None or entry.content is None:
        missing = "source" if entry.source is None else "content"
        raise EventFormatError(f"user/message: Object missing required field `{missing}`")
    return UserMessageEvent(entry.id, entry.source, entry.content)


class RetryEvent(EventStruct, frozen=True):
    """A failed model request that is retried: ``llm/retry``.

    The loop appends it at the attempt boundary: the chunks of the step
    streamed before it (back to the step's start or the previous
    ``llm/retry``) belong to an abandoned attempt, which the model never
    sees (see :mod:`tether.session.attempts`).

    ``attempt`` is the number of the request that failed (1 for the step's
    first); ``delay`` the seconds waited before the next; ``retry_after`` the
    provider's hint, if it gave one; ``max_attempts`` how many requests the
    retry policy allows the step, when it says (logs written before it was
    recorded lack it, and it is stored only when known).
    """

    type: ClassVar[str] = "llm/retry"

    attempt: int
    code: str | None
    error: str
    delay: float
    retry_after: float | None = None
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        check_ordinal(self.type, "attempt", self.attempt)
        if not isinstance(self.code, str | None) or not isinstance(self.error, str):
            raise EventFormatError(f"llm/retry: bad code or error: {self.code!r}, {self.error!r}")
        _set(self, "delay", check_seconds(self.type, "delay", self.delay))
        if self.retry_after is not None:
            _set(self, "retry_after", check_seconds(self.type, "retry_after", self.retry_after))
        if self.max_attempts is not None:
            check_ordinal(self.type, "max_attempts", self.max_attempts)

    def stored(self) -> object:
        if self.max_attempts is not None:
            return self
        return {name: getattr(self, name) for name in self.__struct_fields__[:-1]}


BUILTIN_PAYLOADS: tuple[type[EventStruct], ...] = (
    TurnStart,
    TurnEnd,
    StepStart,
    StepEnd,
    UserMessageEvent,
    AssistantChunk,
    AssistantMessageEvent,
    ToolCallEvent,
    ToolResultEvent,
    InboxSpliced,
    RetryEvent,
)
"""The payload classes of the built-in vocabulary; every `EventRegistry` has
them."""
