"""The ACP bridge's errors; the server maps each to a specific JSON-RPC error."""

from __future__ import annotations


class BridgeError(Exception):
    """Base class of the bridge's errors; each maps to a JSON-RPC error."""


class UnknownSessionError(BridgeError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"unknown session {session_id!r}: create or load it first")
        self.session_id = session_id


class PromptInFlightError(BridgeError):
    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"session {session_id!r} already has a prompt in flight; "
            "wait for its answer or cancel it first"
        )


class CwdMismatchError(BridgeError):
    def __init__(self, session_id: str, stored: str, asked: str) -> None:
        super().__init__(
            f"session {session_id!r} belongs to {stored!r}, not to the requested cwd {asked!r}"
        )


class BridgeClosedError(BridgeError):
    """The connection is closing: the bridge takes no new work."""


class NotStoredError(BridgeError):
    """What a request would acknowledge could not be stored."""


class SessionIdleError(BridgeError):
    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"session {session_id!r} is idle: there is no turn to steer; "
            "send session/prompt or _tether/queue instead"
        )


class McpUnsupportedError(BridgeError):
    """The client offered MCP servers, but no ``mcp`` plugin is mounted to run them."""

    def __init__(self) -> None:
        super().__init__(
            "this tether runs no MCP servers: its composition has no 'mcp' plugin (tether.mcp)"
        )
