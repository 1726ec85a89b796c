"""Server-sent events from a streamed response body, as the providers write them.

The event stream format (the HTML standard's ``text/event-stream``): lines
separated by ``\\r\\n``, ``\\r`` or ``\\n``; ``data:``, ``event:``, ``id:`` and
``retry:`` fields; ``:`` comments (keep-alive pings); a blank line ends an
event. An event without data is not dispatched.

One extension: llama.cpp's server reports a failure inside a stream as a
line of its own, ``error: {…JSON…}``, then ``data: [DONE]``. The standard
says an unknown field is ignored, which would turn the failure into an
answer that ended without a finish. Here that line is an event named
``error`` whose data is the JSON, the shape other providers (Anthropic) give
an error event, so the decoders read both the same way.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from httpx_sse import ServerSentEvent

__all__ = ["ERROR_EVENT", "parse_events"]

ERROR_EVENT = "error"
"""The name of the event an ``error:`` line (llama.cpp) becomes."""


async def parse_events(chunks: AsyncIterable[str]) -> AsyncGenerator[ServerSentEvent, None]:
    """The events in ``chunks`` (the body's text, in pieces cut anywhere).

    A last event not followed by a blank line (a body cut short) is not
    dispatched: it may be incomplete.
    """
    from httpx_sse import ServerSentEvent  # imported with httpx, on first use

    pending = ""
    event = ""
    data: list[str] = []
    last_id = ""
    retry: int | None = None
    async for chunk in chunks:
        text = pending + chunk
        # A "\r" at the end may be the first half of "\r\n": wait for the next piece.
        held = text.endswith("\r")
        if held:
            text = text[:-1]
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        pending = lines.pop() + ("\r" if held else "")
        for line in lines:
            if not line:
                if data:
                    yield ServerSentEvent(event or None, "\n".join(data), last_id, retry)
                event, data = "", []
                continue
            name, colon, value = line.partition(":")
            if not name and colon:
                continue  # a comment
            if value.startswith(" "):
                value = value[1:]
            if name == "data":
                data.append(value)
            elif name == "event":
                event = value
            elif name == ERROR_EVENT:
                event = ERROR_EVENT
                data.append(value)
            elif name == "id" and "\0" not in value:
                last_id = value
            elif name == "retry" and value.isdigit():
                retry = int(value)
