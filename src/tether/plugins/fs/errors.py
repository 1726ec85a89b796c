"""The one error of the file tools: its message is what the model reads."""

from __future__ import annotations

import errno

from tether.plugins.fs.beneath import NotRegularFileError


class FileToolError(Exception):
    """A file operation refused or failed, with a reason the model can act on.

    Raised for bad input (a missing path, a directory given as a file, a
    binary file, an ambiguous ``old_string`` …); the tool turns it into an
    error result. Nothing is changed on disk when it is raised.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def failure(exc: OSError, shown: str) -> FileToolError:
    """``exc``, met while using ``shown``, as the reason the model reads."""
    if isinstance(exc, NotRegularFileError):
        return FileToolError(f"{shown} is not a regular file")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return FileToolError(f"permission denied: {shown}")
    if exc.errno == errno.ENOENT:
        return FileToolError(f"{shown} does not exist")
    if exc.errno == errno.EISDIR:
        return FileToolError(f"{shown} is a directory, not a file")
    if exc.errno == errno.ENOTDIR:
        return FileToolError(f"{shown}: a part of the path is not a directory")
    if exc.errno in (errno.ELOOP, errno.EXDEV):
        return FileToolError(
            f"{shown} was not opened: a symlink appeared in its path after it was checked "
            "(or its links go in a circle); nothing was read or written"
        )
    return FileToolError(f"{shown}: {exc.strerror or exc}")
