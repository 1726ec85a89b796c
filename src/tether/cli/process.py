"""The ``tether`` process: how its start-up runs and how it ends.

Start-up creates the objects that live as long as the process — modules,
classes, plugin fibers, config schemas — hundreds of thousands of them. The
cyclic garbage collector would scan that growing heap again and again while
it is built, and find next to nothing to free (a few hundred objects): it is
paused for start-up (:func:`begin_startup`) and resumed once tether has
booted, or failed to (:func:`end_startup`), with everything start-up made
moved out of its sight (``gc.freeze``), so later collections only scan what
the work itself allocates. The little garbage start-up left stays: collecting
it first would delay the first answer by about 10 ms. So does a reference
cycle among start-up's objects that becomes garbage later, such as the old
code of a plugin that ``--dev`` reloads: a bounded cost, paid in development.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
from typing import NoReturn

_startup = {"gc_paused": False}


def begin_startup() -> None:
    """Pause the cyclic garbage collector until :func:`end_startup`.

    Only the ``tether`` command calls it, first thing; a program that embeds
    tether keeps its own collector settings.
    """
    if gc.isenabled():
        gc.disable()
        _startup["gc_paused"] = True


def end_startup() -> None:
    """Resume the garbage collector paused by :func:`begin_startup` (if it was).

    What start-up allocated is frozen first: it lives as long as the process,
    so collections need not scan it again.
    """
    if _startup["gc_paused"]:
        _startup["gc_paused"] = False
        gc.freeze()
        gc.enable()


def exit_now(status: int) -> NoReturn:
    """End the process without the interpreter's teardown.

    Call it only when everything that must outlive the process is settled:
    tether has stopped (every session log flushed to disk, persistence
    closed, background processes killed) and the output is flushed here. What
    the interpreter's teardown would add is freeing every object one by one,
    which takes longer than all of tether's own shutdown and delays whoever
    waits for the exit.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            # A closed pipe or a full device: the command has reported what
            # it could not write; the exit status stands.
            if stream is sys.stdout and status == 0:
                status = 1
    os._exit(status)
