"""A parent-death signal for every command: SIGKILL when tether dies, however it dies.

:func:`parent_death` says how to arm it for one spawn (``setpriv`` where it
is installed, else a ``preexec_fn`` around ``prctl(PR_SET_PDEATHSIG)``).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from signal import SIGKILL

_PR_SET_PDEATHSIG = 1


@functools.cache
def _load_prctl() -> Callable[[int, int, int, int, int], int] | None:
    """libc's ``prctl`` (Linux), ready to call; ``None`` elsewhere.

    Loaded on the first spawn that needs it, not at import: ``ctypes`` costs
    every command a few milliseconds of start-up, and with ``setpriv`` no
    spawn needs it.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    function: Callable[[int, int, int, int, int], int] = prctl
    return function


def die_with_parent(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when ``parent`` (this process's
    spawning thread) dies; ``None`` where the platform has no parent-death signal.

    It runs in the child between fork and exec. If the parent died before the
    signal was armed (the child has already been re-parented), the child
    exits at once instead of running unwatched. The signal is cleared by a
    fork, so it reaches the group's leader (bash, or the one command bash
    execs in its place); the rest of the group is the watchdog's
    (:mod:`tether.shell.orphans`).

    A ``preexec_fn`` makes every spawn a full ``fork`` of tether (no
    ``vfork``): about 10 ms each on the development machine. So
    :func:`parent_death` prefers ``setpriv``.
    """
    prctl = _load_prctl()
    if prctl is None:
        return None

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(125)

    return arm


_setpriv: list[str | None] = []


def _setpriv_path() -> str | None:
    """util-linux's ``setpriv``, if it is on PATH and knows ``--pdeathsig`` (checked once)."""
    if not _setpriv:
        found = shutil.which("setpriv")
        if found is not None:
            try:
                probe = subprocess.run(
                    [found, "--pdeathsig", "KILL", "--", "true"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=5,
                    check=False,
                )
            except (OSError, subprocess.SubprocessError):
                found = None
            else:
                found = found if probe.returncode == 0 else None
        _setpriv.append(found)
    return _setpriv[0]


def parent_death(parent: int) -> tuple[list[str], Callable[[], None] | None]:
    """How to give a child SIGKILL at ``parent``'s death: an argv prefix, or a ``preexec_fn``.

    ``setpriv --pdeathsig KILL --`` (one more exec, about 2 ms) where it is
    available, else :func:`die_with_parent`. With ``setpriv`` the signal is
    armed just after the fork rather than before the exec, so a tether that
    dies in that moment is not noticed by the child (its group is not yet
    recorded either): the residual window of a few milliseconds at a crash.
    """
    setpriv = _setpriv_path()
    if setpriv is not None:
        return [setpriv, "--pdeathsig", "KILL", "--"], None
    return [], die_with_parent(parent)
