"""Tools: what a model can call, who may call it, and how a call runs.

* :mod:`tether.tools.definition` — :class:`Tool` (and the :func:`tool`
  decorator), :class:`ToolExec`, :class:`ToolOutput`, :class:`ToolResult`,
  :class:`ToolSpec`.
* :mod:`tether.tools.registry` — :class:`ToolRegistry`, the ``tools``
  service, and the plugin that provides it (mount ``tether.tools.registry``).
* :mod:`tether.tools.execute` — the execution pipeline and its events
  (``tool/before-execute``, ``tool/after-execute``), with
  :class:`ToolInvocation`.
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
from tether.tools.registry import ToolRegistry

__all__ = [
    "AFTER_EXECUTE",
    "BEFORE_EXECUTE",
    "Tool",
    "ToolConflictError",
    "ToolError",
    "ToolExec",
    "ToolFunction",
    "ToolInvocation",
    "ToolOutput",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "tool",
]
