"""Shell: the executor Service Definition (``ctx.shell``), its local Provider, process mechanics.

* :mod:`tether.shell.definition` — the :class:`ShellExecutor` protocol, its
  values (:class:`ShellExecRequest`, :class:`ShellExecSpec`,
  :class:`ShellResult`, :class:`BashTask`, :class:`OutputRead`,
  :class:`TaskDone`) and errors.
* :mod:`tether.shell.local` — :class:`LocalShell`, the provider that runs
  commands on this machine (mount ``tether.shell.local``; plugin ``shell``).
* :mod:`tether.shell.process` — one ``bash -c`` in its own process group:
  environment, output capture and spill, stopping the group.
"""

from tether.shell.definition import (
    BashTask,
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
from tether.shell.local import LocalShell
from tether.shell.process import TERMINAL_ENV

__all__ = [
    "TERMINAL_ENV",
    "BashTask",
    "LocalShell",
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
