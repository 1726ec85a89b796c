"""Secrets stay with tether: out of its environment block, so no tool can read them there.

A process's environment block — what ``/proc/PID/environ`` shows — is fixed
when it starts; any process of the same user (every tool tether runs) can
read it, and root can read anything. So the ``tether`` command never keeps a
secret there. :func:`fence`, its first step, looks for *fenced* variables:
names that look secret (containing ``KEY``, ``TOKEN``, ``SECRET`` or
``PASSWORD``: the API keys the adapters read, ``TETHER_API_KEY`` among them)
and a ``TETHER_*`` setting whose value is a URL with credentials. If it finds
any, it re-executes the command with them removed from the environment and
hands them over on an inherited descriptor — an anonymous memory file
(``memfd``), so there is no limit to their size; a pipe where there is no
memfd — never on the command line or in the environment; the new process
reads it, closes it, and keeps the variables in memory only
(:func:`environ`). It also marks itself non-dumpable, so a process of the
same (non-root) user can neither attach to it nor read its memory. It never
fails open: when the hand-over cannot be made, tether refuses to start (one
line, status 2) rather than run with the secrets in its environment block.

What remains (see ``docs/shell.md``): root, and anything that can ptrace as
root, can still read tether's memory; a key given in a composition file
(``api_key:``) is in that file. The re-exec costs one more interpreter start
(measured in ``bench/bench_cli.py``).

tether's own ``TETHER_*`` settings stay in its environment (they are not
secret), but like secrets they are never passed to a tool
(:func:`~tether.shell.environment.child_environment`).

This module imports only the standard library and little of it: it runs
before anything else, in the process that re-executes too.
"""

from __future__ import annotations

import collections
import errno
import json
import os
import sys
from collections.abc import Mapping
from typing import NoReturn

HANDOVER_ENV = "TETHER_FENCED_FD"
"""Names the descriptor the fenced variables arrive on, in the re-executed process."""

SECRET_NAME_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
"""A variable whose name contains one of these (in any case) is a secret."""

INTERNAL_PREFIX = "TETHER_"
"""tether's own settings: for tether alone, never for the commands it runs."""

_PR_SET_DUMPABLE = 4

_fenced: dict[str, str] = {}
_environ: Mapping[str, str] = collections.ChainMap(_fenced, os.environ)


def is_secret(name: str) -> bool:
    """Whether the variable ``name`` looks like it holds a secret."""
    upper = name.upper()
    return any(part in upper for part in SECRET_NAME_PARTS)


def is_internal(name: str) -> bool:
    """Whether the variable ``name`` is one of tether's own settings (``TETHER_*``)."""
    return name.upper().startswith(INTERNAL_PREFIX)


def is_fenced(name: str, value: str) -> bool:
    """Whether the variable is kept out of tether's environment block: a secret, or a
    ``TETHER_*`` setting holding a URL with credentials."""
    return is_secret(name) or (is_internal(name) and "://" in value and "@" in value)


def environ() -> Mapping[str, str]:
    """tether's environment: the fenced variables it was handed, over ``os.environ``.

    The place to read a key or a ``TETHER_*`` setting; ``os.environ`` no
    longer has them in a fenced process. The mapping is live.
    """
    return _environ


def fence() -> None:
    """Keep the fenced variables out of this process's environment block (see the module).

    In a process started with secrets in its environment it re-executes the
    command and does not return; in the re-executed one it takes the
    variables from the handed-over descriptor and returns. It never fails
    open: where the secrets cannot be handed over (no ``sys.orig_argv``, no
    descriptor can be made, the exec fails) it says so on stderr in one line
    and exits with status 2, before anything runs.

    Raises:
        SystemExit: (status 2) the secrets could not be fenced.
    """
    handover = os.environ.pop(HANDOVER_ENV, None)
    if handover is not None:
        _receive(handover)
        return
    fenced = {name: value for name, value in os.environ.items() if is_fenced(name, value)}
    if not fenced:
        return
    if not getattr(sys, "orig_argv", None):
        _refuse("this interpreter does not say how it was started, so it cannot re-execute")
    try:
        fd = _handover(json.dumps(fenced).encode())
    except OSError as exc:
        _refuse(f"they cannot be handed over ({exc.strerror or exc})")
    env = {name: value for name, value in os.environ.items() if not is_fenced(name, value)}
    env[HANDOVER_ENV] = str(fd)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    except OSError as exc:
        os.close(fd)
        _refuse(f"re-executing failed ({exc.strerror or exc})")


def _refuse(why: str) -> NoReturn:
    print(f"tether: cannot keep the secrets out of reach of tools: {why}", file=sys.stderr)
    raise SystemExit(2)


def _handover(payload: bytes) -> int:
    """An inheritable descriptor to read ``payload`` from, whatever its size.

    An anonymous memory file (``memfd``: never on disk) where the platform has
    one; elsewhere a pipe, which must hold the whole payload, as nobody reads
    it until the exec.

    Raises:
        OSError: no descriptor could be made, or the payload does not fit the pipe.
    """
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None:
        fd: int = memfd_create("tether-fenced", getattr(os, "MFD_CLOEXEC", 1))
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.lseek(fd, 0, os.SEEK_SET)
        except BaseException:
            os.close(fd)
            raise
    else:
        fd, write_end = os.pipe()
        try:
            if len(payload) > _pipe_capacity(write_end):
                os.close(fd)
                raise OSError(errno.E2BIG, "the secrets do not fit in a pipe")
            os.write(write_end, payload)
        finally:
            os.close(write_end)
    os.set_inheritable(fd, True)
    return fd


def _pipe_capacity(fd: int) -> int:
    try:
        import fcntl

        return int(fcntl.fcntl(fd, getattr(fcntl, "F_GETPIPE_SZ", 1032)))
    except (OSError, ImportError):
        return 4096


def _receive(handover: str) -> None:
    try:
        fd = int(handover)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        os.close(fd)
        received = json.loads(b"".join(chunks))
    except (OSError, ValueError) as exc:
        print(f"tether: the fenced environment could not be read: {exc}", file=sys.stderr)
        return
    if isinstance(received, dict):
        _fenced.update({str(k): str(v) for k, v in received.items()})
    _not_dumpable()


def _not_dumpable() -> None:
    """Refuse same-user ptrace and ``/proc/PID/mem`` (not root's): the keys are in memory."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass
