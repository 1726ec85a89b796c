"""Tool calls a model wrote as text, turned into real calls.

Small local models, and some servers, answer with a tool call written out
instead of a native one: a fenced JSON object with ``name`` and
``arguments``, or the same object between ``<tool_call>`` and
``</tool_call>`` (the Qwen and Hermes format) or ``<tools>`` and ``</tools>``,
or an answer that is that object alone::

    I'll look at the file first.
    ```json
    {"name": "read", "arguments": {"path": "app.py"}}
    ```

:class:`TextCallDecoder` wraps an answer's decoder and makes each such call
a :class:`~tether.llm.chunks.ToolCallDelta`, so it is logged, shown and run
as a call; the text around it stays text. Only objects that name a tool the
request offers count (``arguments`` may be an object or a JSON string;
``parameters`` is read as ``arguments``); anything else is left as it was
written. An answer that made native calls, or that did not end normally
(cut at the token limit, refused), is left as it was written too.

Text that may open such a call is held back until it is clear: a fence
whose first line is ``{``, a ``<tool_call>`` or ``<tools>`` tag, or an answer that begins
with ``{`` is held to its end; any other text streams as it comes.

**Results a model writes itself.** Having written a call, a small model
often goes on to write its result too, between ``<tool_response>`` tags (the
tag its chat template puts around real results), and then what it makes of
it; or it writes such a block with no call at all, and says the work is
done. No tool produced that text, so it is never kept as if one had: from
a ``<tool_response>`` tag at the start of a line on, the answer is left out
(held back like a call, so it never reaches the person either). After a
call, the real result follows; without one, a note in its place says that
no tool ran (:data:`MADE_UP_NOTE`).

Which providers get this is a setting (``text_tool_calls``, see
:mod:`tether.llm.adapters.openai`): on by default only for a server on this
machine (a base URL on ``127.0.0.1``, ``localhost`` or ``::1``).
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import TYPE_CHECKING

from tether.llm.adapters.decoding import Decoder
from tether.llm.adapters.http import dumps
from tether.llm.chunks import Finish, StreamChunk, TextDelta, ToolCallDelta

if TYPE_CHECKING:
    from httpx_sse import ServerSentEvent

__all__ = ["MADE_UP_NOTE", "TextCallDecoder", "is_local", "parse_calls"]

log = logging.getLogger(__name__)

_FENCE = "```"
# ``<tools>``: small models copy the tag their chat template puts around the tool
# definitions (Qwen's), and write a call inside it.
_RESPONSE = "<tool_response>"
_MARKERS = (_FENCE, "<tool_call>", "<tools>", _RESPONSE)
# A result the model writes itself: the tag at the start of a line.
_MADE_UP = re.compile(r"^[ \t]*<tool_response>", re.MULTILINE)
MADE_UP_NOTE = (
    "[a tool result the model wrote itself was left out here, with what followed it: no tool ran]"
)
"""What stands in an answer for a result the model wrote without making a call."""
# A fenced block: the fence, an info string (json, tool_call, …), the body, the fence.
_FENCED = re.compile(r"```[\w-]*[ \t]*\n(?P<body>.*?)\n?```", re.DOTALL)
_TAGGED = re.compile(r"<(?P<tag>tool_call|tools)>(?P<body>.*?)</(?P=tag)>", re.DOTALL)


def is_local(base_url: str | None) -> bool:
    """Whether ``base_url`` is a server on this machine (a loopback host)."""
    if base_url is None:
        return False
    from urllib.parse import urlsplit

    try:
        host = (urlsplit(base_url).hostname or "").lower()
    except ValueError:
        return False
    return host in ("localhost", "::1") or host.startswith("127.")


def parse_calls(body: str, tools: frozenset[str]) -> list[tuple[str, str]] | None:
    """The calls (name, arguments as JSON) ``body`` writes, or ``None`` if it is not
    one or more calls of ``tools`` (a JSON object, or a list of them)."""
    try:
        value: object = json.loads(body)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    calls: list[tuple[str, str]] = []
    for item in items:
        if not isinstance(item, dict) or not set(item) <= {"name", "arguments", "parameters"}:
            return None
        name = item.get("name")
        arguments = item.get("arguments", item.get("parameters", {}))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return None
        if not isinstance(name, str) or name not in tools or not isinstance(arguments, dict):
            return None
        calls.append((name, dumps(arguments)))
    return calls or None


class TextCallDecoder:
    """A :class:`~tether.llm.adapters.decoding.Decoder` that turns the written tool
    calls of ``inner``'s text into calls (see the module docstring)."""

    __slots__ = ("_calls", "_held", "_inner", "_line_start", "_native", "_said", "_tools")

    def __init__(self, inner: Decoder, tools: frozenset[str]) -> None:
        self._inner = inner
        self._tools = tools
        self._held = ""
        """Text not passed on yet: it may open a written call."""
        self._said = False
        """Whether any text but white space was passed on."""
        self._line_start = True
        """Whether the text passed on ends at the start of a line (white space aside)."""
        self._native = False
        self._calls = 0

    @property
    def done(self) -> bool:
        return self._inner.done

    def feed(self, event: ServerSentEvent) -> list[StreamChunk]:
        """``inner``'s chunks, with text that may open a written call held back."""
        chunks: list[StreamChunk] = []
        for chunk in self._inner.feed(event):
            if isinstance(chunk, TextDelta) and not self._native:
                self._held += chunk.text
                chunks.extend(self._release())
            else:
                if isinstance(chunk, ToolCallDelta):
                    self._native = True
                chunks.append(chunk)
        return chunks

    def end(self) -> list[StreamChunk]:
        """The held text, as text and calls, then ``inner``'s closing chunks (a finish
        ``tool-calls`` when a written call was found in an answer that ended ``stop``).

        Raises:
            ProviderError: as ``inner``'s ``end`` does.
        """
        closing = self._inner.end()
        finish = closing[-1]
        assert isinstance(finish, Finish)
        held, self._held = self._held, ""
        if not held:
            return closing
        if self._native or finish.reason != "stop":
            return [TextDelta(held), *closing]
        chunks = self._written(held)
        if self._calls:
            closing[-1] = Finish("tool-calls")
        return [*chunks, *closing]

    def _release(self) -> list[StreamChunk]:
        """Pass on the held text up to where a written call may begin."""
        held = self._held
        if not self._said and (not held.strip() or held.lstrip().startswith("{")):
            return []  # the whole answer may be one call: held to the end
        start = min((i for i in (held.find(m) for m in _MARKERS) if i >= 0), default=-1)
        if start < 0:
            # Hold a tail that may be the first characters of a marker.
            return self._pass(len(held) - max(_partial(held, m) for m in _MARKERS))
        if held.startswith(_FENCE, start) and not self._fence_may_call(held[start:]):
            # A fence that opens something else (code): pass it on, watch what follows.
            out = self._pass(start + len(_FENCE))
            return out + self._release()
        return self._pass(start)

    def _fence_may_call(self, text: str) -> bool:
        """Whether the fenced block ``text`` starts may hold a call (undecided counts)."""
        first_line, newline, rest = text[len(_FENCE) :].partition("\n")
        if not newline:
            return True
        if first_line.strip() not in ("", "json", "tool_call", "tool_code"):
            return False
        body = rest.lstrip()
        return not body or body.startswith(("{", "["))

    def _pass(self, size: int) -> list[StreamChunk]:
        if size <= 0:
            return []
        text, self._held = self._held[:size], self._held[size:]
        self._said = self._said or bool(text.strip())
        _, newline, last = text.rpartition("\n")
        self._line_start = not last.strip() and (bool(newline) or self._line_start)
        return [TextDelta(text)]

    def _written(self, text: str) -> list[StreamChunk]:
        """``text`` (a whole answer's rest) as text and calls, without a result the
        model wrote itself (see the module docstring)."""
        made_up = next((m for m in _MADE_UP.finditer(text) if m.start() or self._line_start), None)
        if made_up is None:
            return self._calls_in(text)
        log.info("a tool result the model wrote itself was left out of its answer")
        chunks = self._calls_in(text[: made_up.start()])
        if self._calls:
            return [c for c in chunks if not isinstance(c, TextDelta) or c.text.strip()]
        kept = text[: made_up.start()]
        return [TextDelta(kept + MADE_UP_NOTE if kept.strip() else MADE_UP_NOTE)]

    def _calls_in(self, text: str) -> list[StreamChunk]:
        """``text`` as text and the calls it writes."""
        if not self._said:
            whole = parse_calls(text.strip(), self._tools)
            if whole is not None:
                return self._deltas(whole)
        chunks: list[StreamChunk] = []
        position = 0
        for match in _blocks(text):
            calls = parse_calls(match.group("body").strip(), self._tools)
            if calls is None:
                continue
            if text[position : match.start()].strip():
                chunks.append(TextDelta(text[position : match.start()]))
            chunks.extend(self._deltas(calls))
            position = match.end()
        if text[position:].strip() or not chunks:
            chunks.append(TextDelta(text[position:]))
        return chunks

    def _deltas(self, calls: list[tuple[str, str]]) -> list[StreamChunk]:
        deltas: list[StreamChunk] = []
        for name, arguments in calls:
            call_id = f"call_{os.urandom(12).hex()}"
            deltas.append(ToolCallDelta(self._calls, call_id, name, arguments))
            self._calls += 1
        return deltas


def _blocks(text: str) -> list[re.Match[str]]:
    """The fenced and tagged blocks of ``text``, in order, none inside another."""
    found = sorted([*_FENCED.finditer(text), *_TAGGED.finditer(text)], key=lambda m: m.start())
    blocks: list[re.Match[str]] = []
    for match in found:
        if not blocks or match.start() >= blocks[-1].end():
            blocks.append(match)
    return blocks


def _partial(text: str, marker: str) -> int:
    """How many of the first characters (not all) of ``marker`` ``text`` ends with."""
    return max((size for size in range(1, len(marker)) if text.endswith(marker[:size])), default=0)
