"""``initialize`` for protocol version 2, answered before anything heavy is imported.

A client negotiates version 2 by asking for exactly that version in the first
frame of the connection (see :func:`speaks_v2`): version 2 is a draft, so a
client asking for a later version is answered with version 1, the latest
stable one, as before. What this module offers is what
:class:`~tether.acp.v2.server.AcpServerV2` serves; it imports nothing heavy, so
the answer leaves before tether boots (as version 1's does, see
:mod:`tether.acp.handshake`).
"""

from __future__ import annotations

from typing import Any

from tether import __version__

VERSION = 2
"""The protocol version this package speaks (a test pins it to the schema's)."""

REPLAY_FROM_SEQ = "_tether/seq"
"""tether's own ``replayFrom`` cursor: ``{"type": "_tether/seq", "seq": N}`` replays
from the log event ``N`` on (inclusive); every update that shows a log event
carries its seq in ``_meta.tether.seq``."""


def speaks_v2(frame: dict[str, Any]) -> bool:
    """Whether ``frame`` is an ``initialize`` request that asks for version 2."""
    if frame.get("method") != "initialize" or "id" not in frame:
        return False
    params = frame.get("params")
    version = params.get("protocolVersion") if isinstance(params, dict) else None
    return type(version) is int and version == VERSION


def initialize_result(*, images: bool) -> dict[str, Any]:
    """The version 2 ``initialize`` result: the baseline session methods
    (``session: {}``), the prompt content tether takes, MCP over stdio and HTTP,
    ``session/delete``, and agent info. No ``authMethods``: sign-in
    (``auth/login``) is not offered in version 2, so a missing key is reported by the
    session methods (``-32000``)."""
    prompt: dict[str, Any] = {"embeddedContext": {}}
    if images:
        prompt["image"] = {}
    return {
        "protocolVersion": VERSION,
        "info": {"name": "tether", "title": "tether", "version": __version__},
        "capabilities": {
            "session": {"prompt": prompt, "mcp": {"stdio": {}, "http": {}}, "delete": {}},
        },
    }


def early_initialize(frame: dict[str, Any], *, images: bool) -> dict[str, Any]:
    """The response frame to ``frame``, an ``initialize`` that :func:`speaks_v2`."""
    return {"jsonrpc": "2.0", "id": frame["id"], "result": initialize_result(images=images)}
