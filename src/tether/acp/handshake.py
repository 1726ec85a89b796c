"""``initialize``, answered before anything heavy is imported.

An editor waits for the answer to ``initialize`` before it shows the agent,
so the command answers that first request itself — from this module, which
imports nothing heavy — and imports the connection and boots tether right after.
:class:`~tether.acp.server.AcpServer` answers a later ``initialize`` from the
same :func:`initialize_result`, so there is one definition of what tether
offers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tether import __version__
from tether.acp.steering import ADVERTISED

PROTOCOL_VERSION = 1
"""The latest ACP protocol version tether speaks (a test pins it to the schema's)."""

SUPPORTED_VERSIONS = frozenset({PROTOCOL_VERSION})

MAX_PROTOCOL_VERSION = 65535
"""Protocol versions are unsigned 16-bit integers."""


def valid_protocol_version(value: object) -> bool:
    """Whether ``value`` is a protocol version a client may ask for (0 to 65535)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    return 0 <= value <= MAX_PROTOCOL_VERSION


def negotiate(requested: int) -> int:
    """The version to answer ``initialize`` with, as the protocol prescribes: the
    client's own when tether supports it, else the latest tether supports."""
    return requested if requested in SUPPORTED_VERSIONS else PROTOCOL_VERSION


def initialize_result(
    *,
    images: bool,
    requested: int = PROTOCOL_VERSION,
    auth_methods: Sequence[Mapping[str, object]] = (),
) -> dict[str, Any]:
    """The ``initialize`` result for a client that asked for version ``requested``:
    the negotiated protocol version, capabilities, ``auth_methods`` (see
    :mod:`tether.acp.auth`), agent info (wire names). ``logout`` is offered with the
    sign-in methods: there is a sign-in to end only when the model needs a key."""
    capabilities: dict[str, Any] = {
        "loadSession": True,
        "promptCapabilities": {"image": images, "audio": False, "embeddedContext": True},
        "sessionCapabilities": {
            "list": {},
            "delete": {},
            "resume": {},
            "close": {},
            "fork": {},
        },
        # stdio servers are the baseline every agent supports; both HTTP transports work too.
        "mcpCapabilities": {"http": True, "sse": True},
    }
    if auth_methods:
        capabilities["auth"] = {"logout": {}}
    return {
        "protocolVersion": negotiate(requested),
        "agentCapabilities": capabilities,
        "authMethods": [dict(method) for method in auth_methods],
        "agentInfo": {"name": "tether", "title": "tether", "version": __version__},
        "_meta": ADVERTISED,
    }


def early_initialize(
    frame: dict[str, Any], *, images: bool, auth_methods: Sequence[Mapping[str, object]] = ()
) -> dict[str, Any] | None:
    """The response frame to ``frame`` if it is a well-formed ``initialize``, else ``None``.

    Anything else (another method, a notification, bad params) is left to the
    connection (:mod:`tether.acp.rpc`), which answers it with the right error.
    """
    if frame.get("method") != "initialize" or "id" not in frame:
        return None
    params = frame.get("params")
    version = params.get("protocolVersion") if isinstance(params, dict) else None
    if not valid_protocol_version(version):
        return None
    assert isinstance(version, int)
    result = initialize_result(images=images, requested=version, auth_methods=auth_methods)
    return {"jsonrpc": "2.0", "id": frame["id"], "result": result}
