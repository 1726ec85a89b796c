"""What can go wrong with an MCP server, as exceptions with messages a person can act on."""

from __future__ import annotations


class McpError(Exception):
    """Base of the MCP client's errors."""


class McpConfigError(McpError, ValueError):
    """A server entry (from ACP ``mcpServers`` or from configuration) is malformed;
    the message names the entry and the field."""


class McpStartError(McpError):
    """A server could not be started: its command is missing, it exited at once, it
    did not answer ``initialize`` in time, or its tool list was unusable."""


class McpUnavailableError(McpError):
    """A server is not running (it failed, died, or was stopped); the message says why."""
