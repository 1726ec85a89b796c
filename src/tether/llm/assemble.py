"""Folding a chunk stream into the assistant message it describes.

:class:`Assembler` is fed :mod:`~tether.llm.chunks` one at a time and builds the
:class:`~tether.content.AssistantMessage`:

* consecutive text deltas fold into one :class:`TextBlock`, and consecutive
  reasoning deltas into one :class:`ReasoningBlock`; a block of another kind
  in between starts a new block, and so does reasoning that follows a
  signature (the provider signs each of its reasoning blocks once, at its
  end, so two signed blocks stay two, each with its own signature);
* a :class:`RedactedReasoning` is a :class:`RedactedReasoningBlock` of its own;
* tool-call deltas fold by ``index`` into one :class:`ToolCallBlock` whose
  ``arguments`` is the decoded JSON object;
* blocks appear in the order their first chunk arrived.

Malformed tool calls never raise: a call whose arguments are not a JSON object
(or that has no name) is kept with ``arguments == {}`` and reported in
:attr:`Assembled.invalid_calls`, so the loop can answer it with an error result
the model sees.

Tool-call ids are unique within the message, whatever the model sent: a call
whose id an earlier call of the same answer already has is given a new one
(``<id>_2``, ``<id>_3``, …, so an id stays within ``[A-Za-z0-9_-]``, as
Anthropic requires), and the original is recorded in
:attr:`Assembled.renamed_calls`. Each call then runs and gets its own result;
a misbehaving model cannot fail the turn with a message the session log would
refuse.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from types import MappingProxyType

import msgspec

from tether.content import (
    AssistantBlock,
    AssistantMessage,
    ReasoningBlock,
    RedactedReasoningBlock,
    TextBlock,
    ToolCallBlock,
)
from tether.llm.chunks import (
    Finish,
    ReasoningDelta,
    RedactedReasoning,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    Usage,
)

__all__ = ["Assembled", "Assembler", "InvalidToolCall", "assemble"]

log = logging.getLogger(__name__)

MISSING_FINISH = "the model stream ended without a finish"
"""The error of the finish :meth:`Assembler.result` supplies when none was fed."""


class InvalidToolCall(msgspec.Struct, frozen=True):
    """Why a tool call of an answer cannot run, and what the model actually sent."""

    call_id: str
    name: str
    raw_arguments: str
    reason: str


def _frozen_mapping() -> Mapping[str, InvalidToolCall]:
    return MappingProxyType({})


def _frozen_renames() -> Mapping[str, str]:
    return MappingProxyType({})


class Assembled(msgspec.Struct, frozen=True):
    """The outcome of one model stream.

    ``message`` is the assistant's answer; it is marked ``interrupted`` when the
    stream finished with ``"aborted"`` or ``"error"`` (see
    :meth:`Assembler.partial`). ``text`` is its text blocks joined.
    ``invalid_calls`` maps the id of each tool call of ``message`` that cannot
    run to the reason; such a call carries ``arguments == {}``.
    ``renamed_calls`` maps the id given to each call whose id the model had
    already used in this answer to the id the model sent.
    """

    message: AssistantMessage
    finish: Finish
    usage: Usage | None
    text: str
    invalid_calls: Mapping[str, InvalidToolCall] = msgspec.field(default_factory=_frozen_mapping)
    renamed_calls: Mapping[str, str] = msgspec.field(default_factory=_frozen_renames)

    def __hash__(self) -> int:
        # Mappings are unhashable; the other fields keep the hash consistent
        # with equality.
        return hash((self.message, self.finish, self.usage, self.text))


class _Text:
    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[str] = []


class _Reasoning:
    __slots__ = ("parts", "signature")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.signature: str | None = None


class _Call:
    __slots__ = ("args", "id", "index", "name")

    def __init__(self, index: int) -> None:
        self.index = index
        self.id: str | None = None
        self.name: str | None = None
        self.args: list[str] = []

    @property
    def call_id(self) -> str:
        # Adapters for providers that send no call ids must supply their own;
        # this fallback only keeps the block well-formed.
        return self.id if self.id is not None else f"call_{self.index}"


_Part = _Text | _Reasoning | _Call | RedactedReasoningBlock


class Assembler:
    """Accumulates the chunks of one model stream; see the module docstring."""

    __slots__ = ("_calls", "_finish", "_open", "_parts", "_usage")

    def __init__(self) -> None:
        self._parts: list[_Part] = []
        self._calls: dict[int, _Call] = {}
        # The text or reasoning part that the next delta of its kind extends.
        self._open: _Text | _Reasoning | None = None
        self._usage: Usage | None = None
        self._finish: Finish | None = None

    @property
    def finished(self) -> bool:
        """True once a :class:`Finish` has been fed."""
        return self._finish is not None

    def feed(self, chunk: StreamChunk) -> None:
        """Add the next chunk of the stream.

        A :class:`Usage` replaces an earlier one (providers report cumulative
        counts). Empty text deltas create no block.

        Raises:
            ValueError: a chunk is fed after the :class:`Finish`.
            TypeError: ``chunk`` is not a stream chunk.
        """
        if self._finish is not None:
            raise ValueError(f"chunk {chunk!r} fed after the stream finished")
        if isinstance(chunk, TextDelta):
            if chunk.text:
                self._text_part().parts.append(chunk.text)
        elif isinstance(chunk, ReasoningDelta):
            if chunk.text or chunk.signature is not None:
                part = self._reasoning_part(starts_text=bool(chunk.text))
                part.parts.append(chunk.text)
                if chunk.signature is not None:
                    part.signature = chunk.signature
        elif isinstance(chunk, ToolCallDelta):
            self._feed_call(chunk)
        elif isinstance(chunk, RedactedReasoning):
            self._open = None
            self._parts.append(RedactedReasoningBlock(chunk.data))
        elif isinstance(chunk, Usage):
            self._usage = chunk
        elif isinstance(chunk, Finish):
            self._finish = chunk
        else:
            raise TypeError(f"not a stream chunk: {chunk!r}")

    def result(self) -> Assembled:
        """The assembled answer.

        A stream that ended without a :class:`Finish` gets
        ``Finish("error", error=MISSING_FINISH)``. When the finish is
        ``"aborted"`` or ``"error"`` the message is :meth:`partial`; otherwise
        every tool call is kept, the malformed ones listed in
        :attr:`Assembled.invalid_calls`.
        """
        finish = self._finish or Finish("error", error=MISSING_FINISH)
        ids = _UniqueIds()
        if finish.reason in ("aborted", "error"):
            message = self._partial(ids)
            return Assembled(
                message, finish, self._usage, _text_of(message), renamed_calls=ids.renamed()
            )
        blocks: list[AssistantBlock] = []
        invalid: dict[str, InvalidToolCall] = {}
        for part in self._parts:
            if isinstance(part, _Call):
                block, problem = _complete_call(part, ids.give(part.call_id))
                if problem is not None:
                    invalid[block.id] = problem
                blocks.append(block)
            else:
                blocks.append(_block_of(part))
        message = AssistantMessage(tuple(blocks))
        return Assembled(
            message,
            finish,
            self._usage,
            _text_of(message),
            MappingProxyType(invalid),
            ids.renamed(),
        )

    def partial(self) -> AssistantMessage:
        """What has streamed so far, as an interrupted assistant message.

        Text and reasoning are kept as they are. A tool call is kept only if it
        has a name and its arguments already form a complete JSON object; the
        others were cut off mid-stream and are dropped. Ids are made unique as
        in :meth:`result`.
        """
        return self._partial(_UniqueIds())

    def _partial(self, ids: _UniqueIds) -> AssistantMessage:
        blocks: list[AssistantBlock] = []
        for part in self._parts:
            if isinstance(part, _Call):
                arguments = _decode("".join(part.args))
                if part.name is not None and isinstance(arguments, dict):
                    blocks.append(ToolCallBlock(ids.give(part.call_id), part.name, arguments))
            else:
                blocks.append(_block_of(part))
        return AssistantMessage(tuple(blocks), interrupted=True)

    def _text_part(self) -> _Text:
        if not isinstance(self._open, _Text):
            self._open = _Text()
            self._parts.append(self._open)
        return self._open

    def _reasoning_part(self, *, starts_text: bool) -> _Reasoning:
        open_part = self._open
        if not isinstance(open_part, _Reasoning) or (
            starts_text and open_part.signature is not None
        ):
            open_part = self._open = _Reasoning()
            self._parts.append(open_part)
        return open_part

    def _feed_call(self, chunk: ToolCallDelta) -> None:
        self._open = None
        call = self._calls.get(chunk.index)
        if call is None:
            call = self._calls[chunk.index] = _Call(chunk.index)
            self._parts.append(call)
        # The first id and name win: some providers repeat them on every
        # fragment, none changes them.
        if call.id is None:
            call.id = chunk.id
        if call.name is None:
            call.name = chunk.name
        call.args.append(chunk.args_delta)


def assemble(chunks: Iterable[StreamChunk]) -> Assembled:
    """Feed every chunk of ``chunks`` to a new :class:`Assembler` and return its result.

    Raises:
        ValueError, TypeError: as :meth:`Assembler.feed`.
    """
    assembler = Assembler()
    for chunk in chunks:
        assembler.feed(chunk)
    return assembler.result()


def _block_of(
    part: _Text | _Reasoning | RedactedReasoningBlock,
) -> TextBlock | ReasoningBlock | RedactedReasoningBlock:
    if isinstance(part, _Text):
        return TextBlock("".join(part.parts))
    if isinstance(part, _Reasoning):
        return ReasoningBlock("".join(part.parts), part.signature)
    return part


def _text_of(message: AssistantMessage) -> str:
    return "".join(block.text for block in message.content if isinstance(block, TextBlock))


class _UniqueIds:
    """Hands out the ids of one message's tool calls, each once (see the module docstring)."""

    __slots__ = ("_renamed", "_used")

    def __init__(self) -> None:
        self._used: set[str] = set()
        self._renamed: dict[str, str] = {}

    def give(self, wanted: str) -> str:
        given = wanted
        suffix = 1
        while given in self._used:
            suffix += 1
            given = f"{wanted}_{suffix}"
        self._used.add(given)
        if given != wanted:
            self._renamed[given] = wanted
        return given

    def renamed(self) -> Mapping[str, str]:
        if self._renamed:
            log.warning(
                "the model repeated tool-call ids within one answer; renamed %s",
                ", ".join(f"{old!r} to {new!r}" for new, old in self._renamed.items()),
            )
        return MappingProxyType(self._renamed)


def _complete_call(call: _Call, call_id: str) -> tuple[ToolCallBlock, InvalidToolCall | None]:
    raw = "".join(call.args)
    name = call.name or ""
    # No arguments at all is how providers send a call of a parameterless tool.
    arguments = _decode(raw) if raw.strip() else {}
    if not name:
        reason = "the model sent no tool name"
    elif isinstance(arguments, dict):
        return ToolCallBlock(call_id, name, arguments), None
    else:
        reason = arguments
    block = ToolCallBlock(call_id, name, {})
    return block, InvalidToolCall(call_id, name, raw, reason)


def _decode(raw: str) -> dict[str, object] | str:
    """The JSON object ``raw`` encodes, or the reason it encodes none."""
    try:
        value: object = json.loads(raw)
    except json.JSONDecodeError as exc:
        return f"the arguments are not valid JSON: {exc}"
    if not isinstance(value, dict):
        return f"the arguments must be a JSON object, not {_json_type(value)}"
    return value


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array"
