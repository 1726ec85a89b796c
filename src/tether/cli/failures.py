"""What the command line says when storage, its own output or the model fails: one line.

Disk full, a read-only or unwritable directory, a damaged database, a closed
stdout: each is an environment problem, not a bug, so the user gets one clear
line on stderr and a nonzero exit status, never a traceback. A failed model
request (a bad key, a spent quota, a conversation too long, a network down)
is one line too, with what to do
(:func:`tether.front.outcomes.model_failure`, which the web page uses too).
"""

from __future__ import annotations

import errno
import logging

EXIT_FAILED = 1


class StartRefusedError(Exception):
    """tether cannot work as promised (sessions would not be stored): it does not start."""


_PLAIN = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EPIPE: "the output was closed",
    errno.EIO: "an input/output error occurred",
}


def describe(exc: BaseException) -> str | None:
    """One line saying what went wrong, for the storage and output errors a user can meet.

    ``None`` for any other exception (a bug, which keeps its traceback).
    """
    if isinstance(exc, OSError):
        what = _PLAIN.get(exc.errno or 0) or exc.strerror or str(exc)
        return what + (f": {exc.filename}" if exc.filename else "")
    module = type(exc).__module__
    if module == "sqlite3" or module.startswith("psycopg"):
        from tether.persist.backends.errors import storage_failure

        return storage_failure(exc)
    return None


class OneLineFormatter(logging.Formatter):
    """Log records as one line each: an exception is named, its traceback left out.

    The command line's logs without ``--verbose``: no traceback reaches a
    user; ``--verbose`` shows them in full.
    """

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(
            logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        )
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            line += f": {type(error).__name__}: {_first_line(error)}"
        return line


def _first_line(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup) and error.exceptions:
        return _first_line(error.exceptions[0])
    return (str(error).splitlines() or [""])[0]
