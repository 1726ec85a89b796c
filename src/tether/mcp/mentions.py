"""``@server:uri`` in a prompt: the MCP resource goes with it.

A word of the prompt that starts with ``@``, then the name of one of the
agent's MCP servers that offers resources, a colon and a URI
(``@docs:notes://today``) attaches that resource: the server is asked for it
(``resources/read``) and its text goes with the prompt as an embedded
resource, the form an ``@path`` file takes. Trailing punctuation
(``,.;:!?)]}'"``) is not part of the URI. A word whose server is not one of
the agent's is left as it is; a resource the server does not know, one that
is not text, or one larger than :data:`MAX_ATTACHED_CHARS` is not attached,
and the note says why, on one line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from tether.content import TextBlock, embedded_resource
from tether.mcp.errors import McpUnavailableError
from tether.runtime.signal import CancelSignal

if TYPE_CHECKING:
    from tether.mcp.connection import McpConnection

MAX_ATTACHED_CHARS = 256 * 1024
"""The most characters of one resource a mention attaches (the model can read it with
the server's ``read_resource`` tool)."""

_MENTION = re.compile(r"(?<!\S)@([^\s:]+):(\S+)")
_TRAILING = ",.;:!?)]}'\""


class Attached(NamedTuple):
    """What the resource mentions of one prompt attach, and what the person is told."""

    blocks: tuple[TextBlock, ...]
    notes: tuple[str, ...]
    refused: tuple[str, ...]
    """The notes of the mentions not attached (why each is not)."""


async def attach_resources(text: str, connections: Sequence[McpConnection]) -> Attached:
    """The resources the ``@server:uri`` words of ``text`` name, each once, in order."""
    servers = {connection.name: connection for connection in connections}
    blocks: list[TextBlock] = []
    notes: list[str] = []
    refused: list[str] = []
    seen: set[tuple[str, str]] = set()
    for match in _MENTION.finditer(text):
        server = servers.get(match.group(1))
        uri = match.group(2).rstrip(_TRAILING)
        if server is None or not uri or (server.name, uri) in seen:
            continue
        seen.add((server.name, uri))
        shown = f"@{server.name}:{uri}"
        block, note = await _attach(server, uri, shown)
        if block is not None:
            blocks.append(block)
        else:
            refused.append(note)
        notes.append(note)
    return Attached(tuple(blocks), tuple(notes), tuple(refused))


async def _attach(server: McpConnection, uri: str, shown: str) -> tuple[TextBlock | None, str]:
    import mcp_types as types
    from mcp.shared.exceptions import MCPError

    if not server.offers_resources:
        return None, f"{shown} not attached: MCP server {server.name!r} offers no resources"
    try:
        result = await server.read_resource(uri, CancelSignal())
    except McpUnavailableError as exc:
        return None, f"{shown} not attached: {exc}"
    except MCPError as exc:
        return None, f"{shown} not attached: {exc.error.message}"
    texts: list[str] = []
    for item in result.contents:
        if not isinstance(item, types.TextResourceContents):
            return None, f"{shown} not attached: not text ({item.mime_type or 'binary'})"
        texts.append(item.text)
    joined = "\n".join(texts)
    if len(joined) > MAX_ATTACHED_CHARS:
        return (
            None,
            f"{shown} not attached: {len(joined):,} characters, more than {MAX_ATTACHED_CHARS:,}",
        )
    lines = joined.count("\n") + (not joined.endswith("\n") and bool(joined))
    counted = "1 line" if lines == 1 else f"{lines} lines"
    return embedded_resource(uri, joined), f"attached {shown} ({counted})"
