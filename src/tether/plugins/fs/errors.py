"""The one error of the file tools: its message is what the model reads."""

from __future__ import annotations


class FileToolError(Exception):
    """A file operation refused or failed, with a reason the model can act on.

    Raised for bad input (a missing path, a directory given as a file, a
    binary file, an ambiguous ``old_string`` …); the tool turns it into an
    error result. Nothing is changed on disk when it is raised.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
