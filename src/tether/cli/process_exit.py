"""Ending the ``tether`` process once everything durable is settled."""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn


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
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
