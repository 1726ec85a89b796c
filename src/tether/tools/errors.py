"""Errors raised by the tool registry.

Tool *calls* never raise these: every problem with a call becomes an error
result the model reads. These are for the code that registers tools.
"""

from __future__ import annotations


class ToolError(Exception):
    """Base class of the errors the tool registry raises."""


class ToolConflictError(ToolError):
    """A tool with this name is already registered in the same scope."""
