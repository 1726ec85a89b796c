"""Tools: what a model can call, who may call it, and how a call runs.

* :mod:`tether.tools.definition` — :class:`Tool` (and the :func:`tool`
  decorator), :class:`ToolExec`, :class:`ToolOutput`, :class:`ToolResult`,
  :class:`ToolSpec`.
* :mod:`tether.tools.registry` — :class:`ToolRegistry`, the ``tools``
  service, and the plugin that provides it (mount ``tether.tools.registry``).
* :mod:`tether.tools.execute` — the execution pipeline and its events
  (``tool/before-execute``, ``tool/after-execute``), with
  :class:`ToolInvocation`.
* :mod:`tether.tools.presentation` — :class:`ToolShown`, how a tool's calls
  are shown by every front end.
"""

from tether.tools.definition import (
    Tool,
    ToolExec,
    ToolFunction,
    ToolOutput,
    ToolResult,
    ToolSpec,
    tool,
)
from tether.tools.errors import ToolConflictError, ToolError
from tether.tools.execute import AFTER_EXECUTE, BEFORE_EXECUTE, ToolInvocation
from tether.tools.presentation import DEFAULT_SHOWN, Change, ToolShown
from tether.tools.registry import ToolRegistry

__all__ = [
    "AFTER_EXECUTE",
    "BEFORE_EXECUTE",
    "DEFAULT_SHOWN",
    "Change",
    "Tool",
    "ToolConflictError",
    "ToolError",
    "ToolExec",
    "ToolFunction",
    "ToolInvocation",
    "ToolOutput",
    "ToolRegistry",
    "ToolResult",
    "ToolShown",
    "ToolSpec",
    "tool",
]
