"""The OpenAI Chat Completions wire format (streaming), both ways.

* :func:`request_body` maps a :class:`~tether.llm.request.ModelRequest` to the
  JSON body of ``POST {base_url}/chat/completions`` with ``stream: true`` and
  ``stream_options.include_usage``; :class:`RequestEncoder` writes the same
  body as bytes, encoding each message of a conversation only once.
* :class:`StreamDecoder` maps the ``data:`` payloads of the answer to
  normalized :mod:`~tether.llm.chunks`.

Field names are the protocol's. Providers that speak it with extensions
(DeepSeek, vLLM, llama.cpp server, Ollama) are covered by these rules:

* ``delta.refusal`` (the model declined) streams as text and ends the
  answer ``refusal``, whatever finish reason follows it;
* an error may come as an event of its own (llama.cpp's ``error:`` line,
  see :mod:`~tether.llm.adapters.sse`) or as a payload's ``error``;
* reasoning arrives as ``delta.reasoning_content`` (DeepSeek, vLLM) or
  ``delta.reasoning`` and becomes :class:`ReasoningDelta`;
* tool-call fragments are keyed by ``index``; a server that omits it gets
  one index per new call id; a call without an id gets a generated one;
* with ``replay_reasoning``, an assistant message that called tools carries
  its reasoning back as ``reasoning_content`` (DeepSeek rejects the next
  request of a tool loop without it; messages without tool calls never carry
  it, as DeepSeek ignores it there);
* a tool message holds text only, so the images of tool results follow the
  run of tool messages they belong to, in one ``user`` message: a line naming
  each call, then its images as ``image_url`` parts (``data:`` URLs). They
  cannot come between the tool messages, which must directly follow the
  assistant message that made the calls.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.content import (
    AssistantMessage,
    ImageRef,
    Message,
    ReasoningBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolMessage,
    UserRoleMessage,
)
from tether.llm.adapters.decoding import (
    closing_chunks,
    event_data,
    optional_count,
    stream_error,
    token_count,
)
from tether.llm.adapters.errors import ErrorCode
from tether.llm.adapters.fragments import FragmentCache
from tether.llm.adapters.http import dumps
from tether.llm.adapters.sse import ERROR_EVENT
from tether.llm.chunks import (
    Finish,
    FinishReason,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from tether.llm.request import ModelRequest, ToolSpec

if TYPE_CHECKING:
    from httpx_sse import ServerSentEvent

__all__ = ["RequestEncoder", "StreamDecoder", "message_to_wire", "request_body"]

_FINISH: Mapping[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "length": "max-tokens",
    "content_filter": "refusal",
}

# Finish reasons that report a failure rather than an answer.
_FINISH_ERRORS: Mapping[str, tuple[ErrorCode, str]] = {
    "insufficient_system_resource": (
        "server",
        "the provider stopped the answer: insufficient system resource",
    ),
}


def request_body(
    request: ModelRequest,
    *,
    model: str,
    replay_reasoning: bool,
    max_tokens_field: str = "max_tokens",
    parallel_tool_calls: bool = False,
) -> dict[str, object]:
    """The Chat Completions request for ``request``, sent to ``model``.

    With ``parallel_tool_calls``, a request that offers tools asks for
    ``parallel_tool_calls`` (llama.cpp's server allows one call per answer
    without it; OpenAI rejects it in a request without tools).
    """
    messages: list[dict[str, object]] = []
    if request.system:
        messages.append(_system(request.system))
    with_images: list[ToolMessage] = []
    for message in request.messages:
        if with_images and type(message) is not ToolMessage:
            messages.append(_images_message(with_images))
            with_images = []
        wire = message_to_wire(message, replay_reasoning=replay_reasoning)
        if wire is not None:
            messages.append(wire)
        if type(message) is ToolMessage and message.images:
            with_images.append(message)
    if with_images:
        messages.append(_images_message(with_images))
    settings = _settings(request, max_tokens_field, parallel_tool_calls=parallel_tool_calls)
    return {"model": model, "messages": messages, **settings}


def _image_parts(message: ToolMessage) -> list[dict[str, object]]:
    """The parts that show the images of tool result ``message`` in a user message."""
    noun = "image" if len(message.images) == 1 else "images"
    label = f"The {noun} returned by the {message.name} call {message.call_id}:"
    parts: list[dict[str, object]] = [{"type": "text", "text": label}]
    parts.extend({"type": "image_url", "image_url": {"url": i.url}} for i in message.images)
    return parts


def _images_message(results: list[ToolMessage]) -> dict[str, object]:
    """The user message that carries the images of the tool results ``results``."""
    return {"role": "user", "content": [part for r in results for part in _image_parts(r)]}


class RequestEncoder:
    """:func:`request_body` as the bytes sent, each message encoded once.

    The messages of a conversation are the same objects from one request to
    the next, so their JSON is kept (see :class:`FragmentCache`) and a request
    encodes only the messages it adds; a request whose messages extend those
    of an earlier request of its conversation (the conversation's first
    message tells which) reuses that request's joined JSON, so its cost does
    not grow with the conversation. The system prompt and the tool
    definitions, the same from one request to the next too, are encoded
    again only when they change. The bytes decode to exactly what
    :func:`request_body` returns.
    """

    __slots__ = (
        "_conversations",
        "_fragments",
        "_image_parts",
        "_max_tokens_field",
        "_parallel_tool_calls",
        "_system",
        "_system_json",
        "_tools",
        "_tools_json",
    )

    _CONVERSATIONS = 16
    """How many conversations' last requests are kept (an adapter serves every agent)."""

    def __init__(
        self,
        *,
        replay_reasoning: bool,
        max_tokens_field: str = "max_tokens",
        parallel_tool_calls: bool = False,
    ) -> None:
        self._max_tokens_field = max_tokens_field
        self._parallel_tool_calls = parallel_tool_calls
        self._conversations: dict[int, tuple[tuple[Message, ...], str, bool]] = {}
        """By the ``id`` of a conversation's first message (which the entry keeps
        alive): its last request's messages, their JSON joined, and whether a tool
        result among them has images (only then does a request need the walk
        that places them)."""
        self._system = ""
        self._system_json = ""
        self._tools: tuple[ToolSpec, ...] = ()
        self._tools_json = ""

        def encode(message: Message) -> str:
            wire = message_to_wire(message, replay_reasoning=replay_reasoning)
            return "" if wire is None else dumps(wire)

        def encode_images(message: Message) -> str:
            assert isinstance(message, ToolMessage)
            return dumps(_image_parts(message))[1:-1]

        self._fragments = FragmentCache(encode)
        self._image_parts = FragmentCache(encode_images)

    def encode(self, request: ModelRequest, *, model: str) -> bytes:
        """The JSON body asking ``model`` for the answer to ``request``."""
        joined, imaged = self._joined(request.messages)
        if imaged:
            # Tool results with images: the images are placed after their run
            # of tool messages, from the kept fragments.
            parts = self._fragments.fragments(request.messages)
            joined = ",".join(filter(None, self._place_images(request.messages, parts)))
        messages = ",".join(filter(None, (self._encoded_system(request.system), joined)))
        # The settings always hold the model, so the object is never empty.
        settings = dumps(
            {
                "model": model,
                **_settings(
                    request,
                    self._max_tokens_field,
                    tools=False,
                    parallel_tool_calls=self._parallel_tool_calls,
                ),
            }
        )
        tools = self._encoded_tools(request.tools)
        return f'{settings[:-1]}{tools},"messages":[{messages}]}}'.encode()

    def _joined(self, messages: tuple[Message, ...]) -> tuple[str, bool]:
        """The JSON of ``messages`` joined by commas ("" is a message that is not sent),
        and whether a tool result among them has images."""
        if not messages:
            return "", False
        key = id(messages[0])
        known = self._conversations.pop(key, None)
        if known is not None and messages[: len(known[0])] == known[0]:
            sent, sent_json, imaged = known
            new = messages[len(sent) :]
            added = ",".join(filter(None, self._fragments.fragments(new)))
            joined = ",".join(filter(None, (sent_json, added)))
            imaged = imaged or _has_images(new)
        else:
            joined = ",".join(filter(None, self._fragments.fragments(messages)))
            imaged = _has_images(messages)
        if len(self._conversations) >= self._CONVERSATIONS:
            del self._conversations[next(iter(self._conversations))]
        self._conversations[key] = (messages, joined, imaged)
        return joined, imaged

    def _encoded_system(self, system: str | None) -> str:
        """The system message's JSON ("" for none), encoded again only when it changes."""
        if not system:
            return ""
        if system != self._system:
            self._system, self._system_json = system, dumps(_system(system))
        return self._system_json

    def _encoded_tools(self, tools: tuple[ToolSpec, ...]) -> str:
        """``,"tools":[…]`` for ``tools`` (nothing for none), as encoded for the last request
        while they compare equal to its (a tool's schema is the same object from one
        request to the next, so comparing them costs little)."""
        if tools != self._tools:
            self._tools = tools
            self._tools_json = f',"tools":{dumps(_tools(tools))}' if tools else ""
        return self._tools_json

    def _place_images(self, messages: tuple[Message, ...], parts: list[str]) -> list[str]:
        """``parts`` with the user message carrying tool results' images after each
        run of tool messages that has some (as :func:`request_body` places it)."""
        placed: list[str] = []
        held: list[str] = []
        for message, part in zip(messages, parts, strict=True):
            if held and type(message) is not ToolMessage:
                placed.append(_user_parts(held))
                held = []
            placed.append(part)
            if type(message) is ToolMessage and message.images:
                held.extend(self._image_parts.fragments((message,)))
        if held:
            placed.append(_user_parts(held))
        return placed


def _has_images(messages: tuple[Message, ...]) -> bool:
    return any(type(message) is ToolMessage and message.images for message in messages)


def _user_parts(parts: list[str]) -> str:
    return f'{{"role":"user","content":[{",".join(parts)}]}}'


def _system(text: str) -> dict[str, object]:
    return {"role": "system", "content": text}


def _settings(
    request: ModelRequest,
    max_tokens_field: str,
    *,
    tools: bool = True,
    parallel_tool_calls: bool = False,
) -> dict[str, object]:
    """Everything in the body but the model and the messages (and, without ``tools``, the tools)."""
    settings: dict[str, object] = {"stream": True, "stream_options": {"include_usage": True}}
    if tools and request.tools:
        settings["tools"] = _tools(request.tools)
    if parallel_tool_calls and request.tools:
        settings["parallel_tool_calls"] = True
    if request.max_tokens is not None:
        settings[max_tokens_field] = request.max_tokens
    if request.temperature is not None:
        settings["temperature"] = request.temperature
    return settings


def _tools(tools: tuple[ToolSpec, ...]) -> list[dict[str, object]]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in tools
    ]


def message_to_wire(message: Message, *, replay_reasoning: bool) -> dict[str, object] | None:
    """One message in the protocol's shape; ``None`` for an answer with nothing to send.

    An assistant answer with neither text nor tool calls (one cancelled while
    it was still reasoning) is left out: providers reject empty assistant
    messages.
    """
    if isinstance(message, UserRoleMessage):
        return {"role": "user", "content": _user_content(message)}
    if isinstance(message, AssistantMessage):
        return _assistant(message, replay_reasoning)
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.call_id, "content": message.content}
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": message.text}
    raise TypeError(f"not a message: {message!r}")


def _user_content(message: UserRoleMessage) -> str | list[dict[str, object]]:
    if all(isinstance(block, TextBlock) for block in message.content):
        # Plain text is what every compatible server accepts.
        return "".join(block.text for block in message.content if isinstance(block, TextBlock))
    parts: list[dict[str, object]] = []
    for block in message.content:
        if isinstance(block, ImageRef):
            parts.append({"type": "image_url", "image_url": {"url": block.url}})
        else:
            parts.append({"type": "text", "text": block.text})
    return parts


def _assistant(message: AssistantMessage, replay_reasoning: bool) -> dict[str, object] | None:
    text = "".join(block.text for block in message.content if isinstance(block, TextBlock))
    calls = message.tool_calls
    if not text and not calls:
        return None
    wire: dict[str, object] = {"role": "assistant", "content": text or None}
    if calls:
        wire["tool_calls"] = [_call(call) for call in calls]
        if replay_reasoning:
            reasoning = "".join(
                block.text for block in message.content if isinstance(block, ReasoningBlock)
            )
            if reasoning:
                wire["reasoning_content"] = reasoning
    return wire


def _call(call: ToolCallBlock) -> dict[str, object]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": dumps(call.arguments)},
    }


class StreamDecoder:
    """Folds the ``data:`` payloads of one answer into stream chunks.

    Feed each payload to :meth:`feed`; call :meth:`end` when the stream is
    over, for the :class:`Usage` and the :class:`Finish` (providers send the
    usage after the finish reason, so both wait for the end).
    """

    __slots__ = (
        "_calls",
        "_finish_reason",
        "_last_index",
        "_refused",
        "_usage",
        "done",
        "provider",
    )

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.done = False
        """True once ``[DONE]`` arrived."""
        self._finish_reason: str | None = None
        self._usage: Usage | None = None
        self._refused = False
        """A ``delta.refusal`` arrived: the model declined to answer."""
        # Tool calls seen so far: index -> the id they go by.
        self._calls: dict[int, str] = {}
        self._last_index = 0

    def feed(self, event: ServerSentEvent) -> list[StreamChunk]:
        """The chunks one event's ``data:`` payload carries.

        Raises:
            ProviderError: the payload reports an error, or is not JSON.
        """
        if event.data == "[DONE]":
            self.done = True
            return []
        payload = event_data(self.provider, event.data)
        if not isinstance(payload, dict):
            return []
        # llama.cpp sends its error as the event itself (see adapters.sse).
        error = payload if event.event == ERROR_EVENT else payload.get("error")
        if error:
            raise stream_error(self.provider, error)
        usage = payload.get("usage")
        if isinstance(usage, dict):
            self._usage = _usage(usage)
        chunks: list[StreamChunk] = []
        for choice in payload.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._delta(delta, chunks)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self._finish_reason = reason
        return chunks

    def end(self) -> list[StreamChunk]:
        """The closing chunks: the usage (if reported), then the finish.

        Raises:
            ProviderError: the stream ended before a finish reason
                (``transport``), or with one that reports a failure.
        """
        chunks = closing_chunks(
            self.provider,
            self._finish_reason,
            finishes=_FINISH,
            failures=_FINISH_ERRORS,
            called_tools=bool(self._calls),
            usage=self._usage,
        )
        if self._refused:
            # The provider ends a refusal with an ordinary "stop".
            chunks[-1] = Finish("refusal")
        return chunks

    def _delta(self, delta: dict[str, Any], chunks: list[StreamChunk]) -> None:
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            chunks.append(ReasoningDelta(reasoning))
        content = delta.get("content")
        if isinstance(content, str) and content:
            chunks.append(TextDelta(content))
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            # The refusal's text is the answer the person sees.
            self._refused = True
            chunks.append(TextDelta(refusal))
        for call in delta.get("tool_calls") or ():
            if isinstance(call, dict):
                chunks.append(self._call_delta(call))

    def _call_delta(self, call: dict[str, Any]) -> ToolCallDelta:
        raw_id = call.get("id")
        call_id = raw_id if isinstance(raw_id, str) and raw_id else None
        index = call.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            index = self._index_for(call_id)
        self._last_index = index
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        name = function.get("name")
        arguments = function.get("arguments")
        if index in self._calls:
            call_id = None
        else:
            call_id = call_id or f"call_{os.urandom(12).hex()}"
            self._calls[index] = call_id
        if isinstance(arguments, dict):
            # Some servers send the arguments decoded, in one piece.
            arguments = dumps(arguments)
        return ToolCallDelta(
            index,
            call_id,
            name if isinstance(name, str) and name else None,
            arguments if isinstance(arguments, str) else "",
        )

    def _index_for(self, call_id: str | None) -> int:
        """The index of a fragment that has none: a new id is a new call."""
        if call_id is None:
            return self._last_index
        for index, known in self._calls.items():
            if known == call_id:
                return index
        return len(self._calls)


def _usage(usage: dict[str, Any]) -> Usage:
    prompt = token_count(usage.get("prompt_tokens"))
    completion = token_count(usage.get("completion_tokens"))
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    cached = optional_count(
        prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else None
    )
    if cached is None:
        # DeepSeek reports cache hits beside the OpenAI details.
        cached = optional_count(usage.get("prompt_cache_hit_tokens"))
    reasoning = optional_count(
        completion_details.get("reasoning_tokens") if isinstance(completion_details, dict) else None
    )
    return Usage(
        input_tokens=prompt,
        output_tokens=completion,
        reasoning_tokens=reasoning,
        cached_tokens=cached,
    )
