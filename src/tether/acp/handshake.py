"""``initialize``, answered before the SDK is imported.

The SDK's import (its protocol schema) dominates the start of ``tether acp``.
An editor waits for the answer to ``initialize`` before it shows the agent,
so the command answers that first request itself — from this module, which
imports nothing heavy — and imports the SDK and boots tether right after.
:class:`~tether.acp.server.AcpServer` answers a later ``initialize`` from the
same :func:`initialize_result`, so there is one definition of what tether
offers.
"""

from __future__ import annotations

from typing import Any

from tether import __version__

PROTOCOL_VERSION = 1
"""The ACP protocol version tether speaks (a test pins it to the SDK's)."""


def initialize_result(*, images: bool) -> dict[str, Any]:
    """The ``initialize`` result: protocol version, capabilities, agent info (wire names)."""
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": True,
            "promptCapabilities": {"image": images, "audio": False, "embeddedContext": True},
            "sessionCapabilities": {"list": {}},
        },
        "authMethods": [],
        "agentInfo": {"name": "tether", "title": "tether", "version": __version__},
    }


def early_initialize(frame: dict[str, Any], *, images: bool) -> dict[str, Any] | None:
    """The response frame to ``frame`` if it is a well-formed ``initialize``, else ``None``.

    Anything else (another method, a notification, bad params) is left to the
    SDK, which answers it with the right error.
    """
    if frame.get("method") != "initialize" or "id" not in frame:
        return None
    params = frame.get("params")
    version = params.get("protocolVersion") if isinstance(params, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        return None
    return {"jsonrpc": "2.0", "id": frame["id"], "result": initialize_result(images=images)}
