"""The one error of the file tools: its message is what the model reads."""

from __future__ import annotations

import errno
import json
import posixpath

from tether.plugins.fs.beneath import NotRegularFileError

__all__ = ["FileToolError", "binary", "failure", "is_directory", "missing", "next_call"]


class FileToolError(Exception):
    """A file operation refused or failed, with a reason the model can act on.

    Raised for bad input (a missing path, a directory given as a file, a
    binary file, an ambiguous ``old_string`` …); the tool turns it into an
    error result. Nothing is changed on disk when it is raised.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def next_call(tool: str, **arguments: object) -> str:
    """The call an error result tells the model to make, written as it makes it:
    ``call the read tool with {"path": "app.py"}``."""
    return f"call the {tool} tool with {json.dumps(arguments)}"


def missing(shown: str) -> FileToolError:
    """``shown`` does not exist: the glob call that finds where it is."""
    name = posixpath.basename(shown.rstrip("/")) or shown
    find = next_call("glob", pattern=f"**/{name}")
    return FileToolError(f"{shown} does not exist; to find where it is, {find}")


def is_directory(shown: str) -> FileToolError:
    """``shown`` is a directory where a file was wanted: the glob call that lists it."""
    listing = next_call("glob", pattern="*", path=shown)
    return FileToolError(f"{shown} is a directory, not a file; to list its files, {listing}")


def binary(shown: str) -> FileToolError:
    """``shown`` holds NUL bytes: not text, and what to look at it with instead."""
    return FileToolError(
        f"{shown} is a binary file (it holds NUL bytes), not a text file; look at it with the "
        "bash tool instead (for example file or xxd)"
    )


def failure(exc: OSError, shown: str) -> FileToolError:
    """``exc``, met while using ``shown``, as the reason the model reads."""
    if isinstance(exc, NotRegularFileError):
        return FileToolError(f"{shown} is not a regular file")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return FileToolError(f"permission denied: {shown}")
    if exc.errno == errno.ENOENT:
        return missing(shown)
    if exc.errno == errno.EISDIR:
        return is_directory(shown)
    if exc.errno == errno.ENOTDIR:
        return FileToolError(f"{shown}: a part of the path is not a directory")
    if exc.errno in (errno.ELOOP, errno.EXDEV):
        return FileToolError(
            f"{shown} was not opened: a symlink appeared in its path after it was checked "
            "(or its links go in a circle); nothing was read or written"
        )
    return FileToolError(f"{shown}: {exc.strerror or exc}")
