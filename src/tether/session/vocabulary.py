"""The event vocabulary: the `EventPayload` base class and the built-in payloads.

Code writes and reads session events through typed payloads: frozen
dataclasses whose class-level ``type`` names the stored event type and whose
``to_data``/``from_data`` convert to and from the stored ``data``. Payloads
check their fields on construction (raising `EventFormatError`), so a payload
that exists can be stored and read back.

Stored formats are extended, never changed: a new need is a new event type
(registered by a plugin), not a new meaning for an old field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, ClassVar, Literal, Self, TypeVar, cast, get_args

from tether.content import (
    AssistantBlock,
    ImageRef,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    UserBlock,
)
from tether.frozen import FrozenMapping, NotJsonError, freeze_mapping
from tether.session.errors import EventFormatError

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
    "InboxOp",
    "InboxQueue",
    "InboxSpliced",
    "Interrupted",
    "MaxTokens",
    "RetryEvent",
    "StepEnd",
    "StepStart",
    "ToolCallEvent",
    "ToolResultEvent",
    "TurnEnd",
    "TurnEndReason",
    "TurnStart",
    "UserMessageEvent",
]


class EventPayload:
    """Base class of typed event payloads.

    A subclass is a frozen dataclass that sets the class variable ``type`` (the
    stored type name, such as ``"llm/retry"``) and implements ``to_data`` and
    ``from_data``, with ``cls.from_data(payload.to_data()) == payload``.
    Register it with an `EventRegistry` to append and load it.
    """

    __slots__ = ()

    type: ClassVar[str]

    def to_data(self) -> Mapping[str, object]:
        """Return this payload as JSON-shaped data: str, int, bool, finite float,
        None, mappings with str keys and sequences of those.

        The stored copy is frozen, so the result may be a fresh plain dict.
        """
        raise NotImplementedError

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Self:
        """Rebuild a payload from stored data (deeply frozen).

        Raises:
            EventFormatError: ``data`` does not fit this event type.
        """
        raise NotImplementedError


# Built-in payloads build their data fresh, with every nested object already a
# read-only mapping and every array a tuple, so storing it needs no deep copy:
# that keeps appends cheap. Their ``from_data`` accepts plain or frozen data and
# keeps no reference to anything mutable in it.


# -- field checks -------------------------------------------------------------


def freeze_data(value: object, *, where: str) -> FrozenMapping:
    """:func:`~tether.frozen.freeze_mapping` for event data.

    Raises:
        EventFormatError: ``value`` is not JSON-shaped (the message names the path).
    """
    try:
        return freeze_mapping(value, where=where)
    except NotJsonError as exc:
        raise EventFormatError(str(exc)) from None


def _bad(type_name: str, name: str, expected: str, value: object) -> EventFormatError:
    return EventFormatError(f"{type_name}: {name} must be {expected}, got {value!r}")


def _check_str(type_name: str, name: str, value: object) -> None:
    if not isinstance(value, str):
        raise _bad(type_name, name, "a str", value)


def _check_id(type_name: str, name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise _bad(type_name, name, "a non-empty str", value)


def _check_bool(type_name: str, name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise _bad(type_name, name, "a bool", value)


def _check_ordinal(type_name: str, name: str, value: object) -> None:
    # bool is an int subclass; True must not pass for turn 1.
    if type(value) is not int or value < 1:
        raise _bad(type_name, name, "an int >= 1", value)


def _check_choice(type_name: str, name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise _bad(type_name, name, " or ".join(repr(choice) for choice in choices), value)


def _as_tuple(type_name: str, name: str, value: object) -> tuple[object, ...]:
    if type(value) is tuple:
        return value
    # A str is iterable, but taking one for a sequence of entries is never right.
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise _bad(type_name, name, "a sequence", value)
    return tuple(value)


def _array(type_name: str, name: str, value: object) -> tuple[object, ...] | list[object]:
    if not isinstance(value, tuple | list):
        raise _bad(type_name, name, "an array", value)
    return value


# What stored objects arrive as: plain dicts from records, read-only mappings
# from frozen data. The concrete types come first, so they match without the
# slower check against the abstract class.
_JSON_OBJECT = (dict, MappingProxyType, Mapping)


@dataclass(frozen=True, slots=True)
class _Shape:
    """The fields a stored object must (and may) have."""

    owner: str
    required: frozenset[str]
    optional: frozenset[str] = frozenset()

    def check(self, data: object) -> Mapping[str, Any]:
        """Return ``data`` as a mapping, or raise `EventFormatError` naming
        the missing or unexpected fields.

        The values are unchecked (hence ``Any``): the payload constructors
        that receive them check their types.
        """
        # Stored data is nearly always a plain dict with exactly the required
        # fields: one comparison settles that.
        if type(data) is dict and data.keys() == self.required:
            return data
        if not isinstance(data, _JSON_OBJECT):
            raise EventFormatError(f"{self.owner}: expected an object, got {data!r}")
        keys = data.keys()
        if keys == self.required:
            return data
        missing = self.required - keys
        if missing:
            raise EventFormatError(f"{self.owner}: missing field(s) {', '.join(sorted(missing))}")
        unexpected = keys - self.required - self.optional
        if unexpected:
            names = ", ".join(sorted(map(str, unexpected)))
            raise EventFormatError(f"{self.owner}: unexpected field(s) {names}")
        return data


def _shape(owner: str, *required: str, optional: Iterable[str] = ()) -> _Shape:
    return _Shape(owner, frozenset(required), frozenset(optional))


# -- content blocks -------------------------------------------------------------

_B = TypeVar("_B")

_USER_BLOCKS: tuple[type[UserBlock], ...] = (TextBlock, ImageRef)
_ASSISTANT_BLOCKS: tuple[type[AssistantBlock], ...] = (TextBlock, ReasoningBlock, ToolCallBlock)

_BLOCK_SHAPES = {
    "text": _shape("text block", "type", "text"),
    "image": _shape("image block", "type", "url", optional=["mime_type"]),
    "reasoning": _shape("reasoning block", "type", "text", optional=["signature"]),
    "tool_call": _shape("tool_call block", "type", "id", "name", "arguments"),
}


def _block_to_data(block: UserBlock | AssistantBlock) -> FrozenMapping:
    if isinstance(block, TextBlock):
        data: dict[str, object] = {"type": "text", "text": block.text}
    elif isinstance(block, ToolCallBlock):
        # Payloads hold tool-call arguments frozen already.
        data = {
            "type": "tool_call",
            "id": block.id,
            "name": block.name,
            "arguments": block.arguments,
        }
    elif isinstance(block, ReasoningBlock):
        data = {"type": "reasoning", "text": block.text, "signature": block.signature}
    else:
        data = {"type": "image", "url": block.url, "mime_type": block.mime_type}
    return MappingProxyType(data)


def _block_from_data(type_name: str, item: object) -> UserBlock | AssistantBlock:
    tag = item.get("type") if isinstance(item, _JSON_OBJECT) else None
    shape = _BLOCK_SHAPES.get(tag) if isinstance(tag, str) else None
    if shape is None:
        raise EventFormatError(f"{type_name}: content entry is not a known block: {item!r}")
    data = shape.check(item)
    try:
        if tag == "text":
            return TextBlock(data["text"])
        if tag == "tool_call":
            return ToolCallBlock(data["id"], data["name"], data["arguments"])
        if tag == "reasoning":
            return ReasoningBlock(data["text"], data.get("signature"))
        return ImageRef(data["url"], data.get("mime_type"))
    except TypeError as error:
        raise EventFormatError(f"{type_name}: {error}") from None


def _content(type_name: str, value: object, allowed: tuple[type[_B], ...]) -> tuple[_B, ...]:
    blocks = _as_tuple(type_name, "content", value)
    for block in blocks:
        if not isinstance(block, allowed):
            names = ", ".join(kind.__name__ for kind in allowed)
            raise _bad(type_name, "content entries", f"one of {names}", block)
    return cast(tuple[_B, ...], blocks)


def _content_from_data(type_name: str, value: object) -> tuple[Any, ...]:
    # Typed loosely: the payload constructor checks which blocks it allows.
    return tuple(_block_from_data(type_name, item) for item in _array(type_name, "content", value))


# -- turns and steps ------------------------------------------------------------

_TURN_START = _shape("turn/start", "turn")


@dataclass(frozen=True, slots=True)
class TurnStart(EventPayload):
    """A turn opens. Turns are numbered 1, 2, … per session and never nest."""

    type: ClassVar[str] = "turn/start"

    turn: int

    def __post_init__(self) -> None:
        _check_ordinal(self.type, "turn", self.turn)

    def to_data(self) -> dict[str, object]:
        return {"turn": self.turn}

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Self:
        stored = _TURN_START.check(data)
        return cls(stored["turn"])


@dataclass(frozen=True, slots=True)
class Completed:
    """The turn finished: nothing more was owed."""

    kind: ClassVar[str] = "completed"


@dataclass(frozen=True, slots=True)
class Aborted:
    """The turn was cancelled; ``cause`` is the cancel cause (``user``,
    ``parent``, ``disposed``, …)."""

    kind: ClassVar[str] = "aborted"

    cause: str

    def __post_init__(self) -> None:
        _check_id("turn/end", "reason cause", self.cause)


@dataclass(frozen=True, slots=True)
class Blocked:
    """The turn was refused: a hook would not let it go on, or the provider
    would not answer (the model declined, or its content filter stopped the
    answer)."""

    kind: ClassVar[str] = "blocked"


@dataclass(frozen=True, slots=True)
class Errored:
    """The turn failed; ``error`` describes the failure."""

    kind: ClassVar[str] = "error"

    error: str

    def __post_init__(self) -> None:
        _check_str("turn/end", "reason error", self.error)


@dataclass(frozen=True, slots=True)
class MaxTokens:
    """The model stopped at its output token limit."""

    kind: ClassVar[str] = "max-tokens"


@dataclass(frozen=True, slots=True)
class Interrupted:
    """The process died mid-turn; written only by crash repair."""

    kind: ClassVar[str] = "interrupted"


TurnEndReason = Completed | Aborted | Blocked | Errored | MaxTokens | Interrupted
"""Why a turn ended. Stored as ``{"kind": ...}``, plus ``cause`` for `Aborted`
and ``error`` for `Errored`."""

_REASON_CLASSES: tuple[type[TurnEndReason], ...] = get_args(TurnEndReason)
_REASONS = {reason.kind: reason for reason in _REASON_CLASSES}
_REASON_SHAPES = {
    reason.kind: _shape(
        f"turn/end reason {reason.kind!r}", "kind", *(f.name for f in fields(reason))
    )
    for reason in _REASON_CLASSES
}


def _reason_to_data(reason: TurnEndReason) -> FrozenMapping:
    if isinstance(reason, Aborted):
        return MappingProxyType({"kind": reason.kind, "cause": reason.cause})
    if isinstance(reason, Errored):
        return MappingProxyType({"kind": reason.kind, "error": reason.error})
    return MappingProxyType({"kind": reason.kind})


def _reason_from_data(value: object) -> TurnEndReason:
    kind = value.get("kind") if isinstance(value, Mapping) else None
    if not isinstance(kind, str) or kind not in _REASONS:
        raise _bad("turn/end", "reason", "an object with a known kind", value)
    data = _REASON_SHAPES[kind].check(value)
    # The constructors check the field types.
    if kind == Aborted.kind:
        return Aborted(data["cause"])
    if kind == Errored.kind:
        return Errored(data["error"])
    return cast(Callable[[], TurnEndReason], _REASONS[kind])()


_TURN_END = _shape("turn/end", "turn", "reason")


@dataclass(frozen=True, slots=True)
class TurnEnd(EventPayload):
    """The open turn closes. Every turn that starts ends with exactly one."""

    type: ClassVar[str] = "turn/end"

    turn: int
    reason: TurnEndReason

    def __post_init__(self) -> None:
        _check_ordinal(self.type, "turn", self.turn)
        if not isinstance(self.reason, _REASON_CLASSES):
            raise _bad(self.type, "reason", "a TurnEndReason", self.reason)

    def to_data(self) -> dict[str, object]:
        return {"turn": self.turn, "reason": _reason_to_data(self.reason)}

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Self:
        stored = _TURN_END.check(data)
        return cls(stored["turn"], _reason_from_data(stored["reason"]))


_STEP_SHAPES = {name: _shape(name, "turn", "step") for name in ("step/start", "step/end")}


@dataclass(frozen=True, slots=True)
class _StepBoundary(EventPayload):
    """The shape `StepStart` and `StepEnd` share."""

    turn: int
    step: int

    def __post_init__(self) -> None:
        _check_ordinal(self.type, "turn", self.turn)
        _check_ordinal(self.type, "step", self.step)

    def to_data(self) -> dict[str, object]:
        return {"turn": self.turn, "step": self.step}

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Self:
        stored = _STEP_SHAPES[cls.type].check(data)
        return cls(stored["turn"], stored["step"])


@dataclass(frozen=True, slots=True)
class StepStart(_StepBoundary):
    """A step (one model request and the tools it called) opens inside ``turn``.
    Steps are numbered 1, 2, … per turn and never nest."""

    type: ClassVar[str] = "step/start"


@dataclass(frozen=True, slots=True)
class StepEnd(_StepBoundary):
    """The open step closes."""

    type: ClassVar[str] = "step/end"


# -- conversation ---------------------------------------------------------------

_USER_MESSAGE = _shape("user/message", "id", "source", "content")


@dataclass(frozen=True, slots=True)
class UserMessageEvent(EventPayload):
    """A user message enters the conversation (model-visible).

    ``id`` identifies the message across the inbox and the log; ``source`` says
    who sent it (``user``, ``steer``, a plugin name, …).
    """

    type: ClassVar[str] = "user/message"

    id: str
    source: str
    content: tuple[UserBlock, ...]

    def __post_init__(self) -> None:
        _check_id(self.type, "id", self.id)
        _check_id(self.type, "source", self.source)
        object.__setattr__(self, "content", _content(self.type, self.content, _USER_BLOCKS))

    def to_data(self) -> dict[str, object]:
        return {
            "id": self.id,
            "source": self.source,
            "content": tuple(_block_to_data(block) for block in self.content),
        }

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Self:
        stored = _USER_MESSAGE.check(data)
        content = _content_from_data(cls.type, stored["content"])
        return cls(stored["id"], stored["source"], content)


ChunkKind = Literal["text", "reasoning"]
_CHUNK_KINDS: tuple[str, ...] = get_args(ChunkKind)
_CHUNK = _shape("assistant/chunk", "kind", "delta")


@dataclass(frozen=True, slots=True)
class AssistantChunk(EventPayload):
    """A piece of the answer as it streams. Not model-visible: the step's
    `AssistantMessageEvent` carries the complete content."""

    type: ClassVar[str] = "assistant/chunk"

    kind: ChunkKind
    delta: str

    def __post_init__(self) -> None:
        _check_choice(self.type, "kind", self.kind, _CHUNK_KINDS)
        _check_str(self.type, "delta", self.delta)

    def to_data(self) -> dict[str, object]:
        return {"kind": self.kind, "delta": self.delta}

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Self:
        stored = _CHUNK.check(data)
        return cls(stored["kind"], stored["delta"])


_ASSISTANT_MESSAGE = _shape("assistant/message", "content", "finish", "interrupted", "usage")


@dataclass(frozen=True, slots=True)
class AssistantMessageEvent(EventPayload):
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
    # Mappings are unhashable; the other fields make hashing consistent.
    usage: Mapping[str, int] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        content = _content(self.type, self.content, _ASSISTANT_BLOCKS)
        for block in content:
            if isinstance(block, ToolCallBlock):
                content = self._freeze_tool_calls(content)
                break
        object.__setattr__(self, "content", content)
        _check_str(self.type, "finish", self.finish)
        _check_bool(self.type, "interrupted", self.interrupted)
        if self.usage is not None:
            object.__setattr__(self, "usage", self._frozen_usage(self.usage))

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
            _check_id(self.type, "tool call id", block.id)
            _check_id(self.type, "tool call name", block.name)
            if block.id in seen:
                raise EventFormatError(f"{self.type}: duplicate tool call id {block.id!r}")
            seen.add(block.id)
            where = f"{self.type}: arguments of tool call {block.id!r}"
            arguments = freeze_data(block.arguments, where=where)
            blocks.append(ToolCallBlock(block.id, block.name, arguments))
        return tuple(blocks)

    def _frozen_usage(self, usage: object) -> FrozenMapping:
        if not isinstance(usage, Mapping):
            raise _bad(self.type, "usage", "a mapping of token counts", usage)
        for name, count in usage.items():
            if not isinstance(name, str) or type(count) is not int or count < 0:
                raise _bad(self.type, f"usage[{name!r}]", "an int >= 0", count)
        return MappingProxyType(dict(usage))

    @property
    def tool_calls(self) -> tuple[ToolCallBlock, ...]:
        """The tool calls this answer requests, in order."""
        return tuple(block for block in self.content if isinstance(block, ToolCallBlock))

    def to_data(self) -> dict[str, object]:
        return {
            "content": tuple(_block_to_data(block) for block in self.content),
            "finish": self.finish,
            "interrupted": self.interrupted,
            "usage": self.usage,
        }

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Self:
        stored = _ASSISTANT_MESSAGE.check(data)
        return cls(
            _content_from_data(cls.type, stored["content"]),
            stored["finish"],
            stored["interrupted"],
            stored["usage"],
        )


# -- tools ------------------------------------------------------------------------

_TOOL_CALL = _shape("tool/call", "id", "name", "arguments")
_TOOL_RESULT = _shape("tool/result", "id", "name", "content", "is_error")


@dataclass(frozen=True, slots=True)
class ToolCallEvent(EventPayload):
    """A requested tool call starts executing, with the arguments it runs with.

    Not model-visible: it tells crash repair that the call may have had
    effects. A requested call that never started has none.
    """

    type: ClassVar[str] = "tool/call"

    id: str
    name: str
    # Mappings are unhashable; the other fields make hashing consistent.
    arguments: Mapping[str, object] = field(hash=False)

    def __post_init__(self) -> None:
        _check_id(self.type, "id", self.id)
        _check_id(self.type, "name", self.name)
        where = f"{self.type}: arguments"
        object.__setattr__(self, "arguments", freeze_data(self.arguments, where=where))

    def to_data(self) -> dict[str, object]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Self:
        stored = _TOOL_CALL.check(data)
        return cls(stored["id"], stored["name"], stored["arguments"])


@dataclass(frozen=True, slots=True)
class ToolResultEvent(EventPayload):
    """The result of a requested tool call (model-visible)."""

    type: ClassVar[str] = "tool/result"

    id: str
    name: str
    content: str
    is_error: bool

    def __post_init__(self) -> None:
        _check_id(self.type, "id", self.id)
        _check_id(self.type, "name", self.name)
        _check_str(self.type, "content", self.content)
        _check_bool(self.type, "is_error", self.is_error)

    def to_data(self) -> dict[str, object]:
        return {
            "id": self.id,
            "name": self.name,
            "content": self.content,
            "is_error": self.is_error,
        }

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Self:
        stored = _TOOL_RESULT.check(data)
        return cls(stored["id"], stored["name"], stored["content"], stored["is_error"])


# -- inbox --------------------------------------------------------------------------

InboxQueue = Literal["queued", "steering"]
InboxOp = Literal["insert", "claim", "cancel", "discard"]
_INBOX_QUEUES: tuple[str, ...] = get_args(InboxQueue)
_INBOX_OPS: tuple[str, ...] = get_args(InboxOp)
_INBOX_SPLICED = _shape("agent/inbox/spliced", "queue", "op", "messages")
_INBOX_REF = _shape("agent/inbox/spliced entry", "id")


@dataclass(frozen=True, slots=True)
class InboxSpliced(EventPayload):
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

    type: ClassVar[str] = "agent/inbox/spliced"

    queue: InboxQueue
    op: InboxOp
    messages: tuple[UserMessageEvent, ...] = ()
    ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_choice(self.type, "queue", self.queue, _INBOX_QUEUES)
        _check_choice(self.type, "op", self.op, _INBOX_OPS)
        messages = _as_tuple(self.type, "messages", self.messages)
        ids = _as_tuple(self.type, "ids", self.ids)
        if self.op == "insert":
            if ids:
                raise EventFormatError(f"{self.type}: insert carries messages, not ids")
            for message in messages:
                if not isinstance(message, UserMessageEvent):
                    raise _bad(self.type, "messages entries", "UserMessageEvent", message)
        else:
            if messages:
                raise EventFormatError(f"{self.type}: {self.op} carries ids, not messages")
            for message_id in ids:
                _check_id(self.type, "ids entries", message_id)
        object.__setattr__(self, "messages", messages)
        object.__setattr__(self, "ids", ids)
        named = self.message_ids
        if len(set(named)) != len(named):
            raise EventFormatError(f"{self.type}: a message id appears twice in {named!r}")

    @property
    def message_ids(self) -> tuple[str, ...]:
        """The ids this splice names, whatever its op."""
        if self.op == "insert":
            return tuple(message.id for message in self.messages)
        return self.ids

    def to_data(self) -> dict[str, object]:
        if self.op == "insert":
            entries = tuple(MappingProxyType(message.to_data()) for message in self.messages)
        else:
            entries = tuple(MappingProxyType({"id": message_id}) for message_id in self.ids)
        return {"queue": self.queue, "op": self.op, "messages": entries}

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Self:
        stored = _INBOX_SPLICED.check(data)
        queue, op = stored["queue"], stored["op"]
        # The op decides how to read the entries, so it is checked first.
        _check_choice(cls.type, "op", op, _INBOX_OPS)
        entries = _array(cls.type, "messages", stored["messages"])
        if op != "insert":
            return cls(queue, op, ids=tuple(_INBOX_REF.check(e)["id"] for e in entries))
        try:
            messages = tuple(
                UserMessageEvent.from_data(cast(Mapping[str, object], e)) for e in entries
            )
        except EventFormatError as error:
            raise EventFormatError(f"{cls.type}: inserted message: {error}") from None
        return cls(queue, op, messages=messages)


@dataclass(frozen=True, slots=True)
class RetryEvent(EventPayload):
    """A failed model request that is retried: ``llm/retry``.

    The loop appends it at the attempt boundary: the chunks of the step
    streamed before it (back to the step's start or the previous
    ``llm/retry``) belong to an abandoned attempt, which the model never
    sees (see :mod:`tether.session.attempts`).

    ``attempt`` is the number of the request that failed (1 for the step's
    first); ``delay`` the seconds waited before the next; ``retry_after`` the
    provider's hint, if it gave one.
    """

    type: ClassVar[str] = "llm/retry"

    attempt: int
    code: str | None
    error: str
    delay: float
    retry_after: float | None = None

    def __post_init__(self) -> None:
        if type(self.attempt) is not int or self.attempt < 1:
            raise EventFormatError(f"llm/retry: attempt must be an int >= 1, got {self.attempt!r}")
        if not isinstance(self.code, str | None) or not isinstance(self.error, str):
            raise EventFormatError(f"llm/retry: bad code or error: {self.code!r}, {self.error!r}")
        if not _seconds(self.delay):
            raise EventFormatError(f"llm/retry: delay must be a number >= 0, got {self.delay!r}")
        if self.retry_after is not None and not _seconds(self.retry_after):
            raise EventFormatError(
                f"llm/retry: retry_after must be a number >= 0, got {self.retry_after!r}"
            )

    def to_data(self) -> dict[str, object]:
        return {
            "attempt": self.attempt,
            "code": self.code,
            "error": self.error,
            "delay": float(self.delay),
            "retry_after": None if self.retry_after is None else float(self.retry_after),
        }

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Self:
        try:
            return cls(
                attempt=data["attempt"],  # type: ignore[arg-type]
                code=data["code"],  # type: ignore[arg-type]
                error=data["error"],  # type: ignore[arg-type]
                delay=data["delay"],  # type: ignore[arg-type]
                retry_after=data.get("retry_after"),  # type: ignore[arg-type]
            )
        except KeyError as exc:
            raise EventFormatError(f"llm/retry: missing field {exc}") from None


def _seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < math.inf


BUILTIN_PAYLOADS: tuple[type[EventPayload], ...] = (
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
