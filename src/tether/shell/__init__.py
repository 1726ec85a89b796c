"""Shell: the executor Service Definition (``ctx.shell``), its local Provider, process mechanics.

* :mod:`tether.shell.definition` — the :class:`ShellExecutor` protocol, its
  values (:class:`ShellExecRequest`, :class:`ShellExecSpec`,
  :class:`ShellResult`, :class:`BashTask`, :class:`OutputRead`,
  :class:`TaskDone`) and errors.
* :mod:`tether.shell.local` — :class:`LocalShell`, the provider that runs
  commands on this machine (mount ``tether.shell.local``; plugin ``shell``).
* :mod:`tether.shell.process` — one ``bash -c`` in its own process group,
  and stopping the group;
* :mod:`tether.shell.environment`, :mod:`tether.shell.output`,
  :mod:`tether.shell.parent_death` — its environment, its output capture
  and spill, its parent-death signal;
* :mod:`tether.shell.guard`, :mod:`tether.shell.orphans` — the record of
  running groups, the watchdog and the sweep that leave no orphans.
"""

from tether.shell.definition import (
    BashTask,
    OutputListener,
    OutputRead,
    ShellError,
    ShellExecRequest,
    ShellExecSpec,
    ShellExecutor,
    ShellRequestError,
    ShellResult,
    StopReport,
    TaskDone,
    TaskDoneListener,
    TaskLimitError,
    TaskNotFoundError,
    TaskStatus,
)
from tether.shell.environment import TERMINAL_ENV
from tether.shell.local import LocalShell

__all__ = [
    "TERMINAL_ENV",
    "BashTask",
    "LocalShell",
    "OutputListener",
    "OutputRead",
    "ShellError",
    "ShellExecRequest",
    "ShellExecSpec",
    "ShellExecutor",
    "ShellRequestError",
    "ShellResult",
    "StopReport",
    "TaskDone",
    "TaskDoneListener",
    "TaskLimitError",
    "TaskNotFoundError",
    "TaskStatus",
]
