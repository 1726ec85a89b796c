"""The presentations the built-in tools declare, by tool name, for tests that render
calls without a running tether."""

from tether.plugins.todo import TODO_SHOWN
from tether.plugins.tool_bash import BASH_KILL_SHOWN, BASH_OUTPUT_SHOWN, BASH_SHOWN
from tether.plugins.tool_fs import EDIT_SHOWN, READ_SHOWN, SEARCH_SHOWN, WRITE_SHOWN
from tether.plugins.tool_subagent import TASK_ID_SHOWN, TASK_SHOWN
from tether.tools import DEFAULT_SHOWN, ToolShown

BUILTIN: dict[str, ToolShown] = {
    "bash": BASH_SHOWN,
    "bash_output": BASH_OUTPUT_SHOWN,
    "bash_kill": BASH_KILL_SHOWN,
    "read": READ_SHOWN,
    "write": WRITE_SHOWN,
    "edit": EDIT_SHOWN,
    "glob": SEARCH_SHOWN,
    "grep": SEARCH_SHOWN,
    "todo": TODO_SHOWN,
    "task": TASK_SHOWN,
    "task_output": TASK_ID_SHOWN,
    "task_kill": TASK_ID_SHOWN,
}


def builtin_shown(name: str) -> ToolShown:
    """How the built-in tool ``name`` is shown (a tool that is not built in, by default)."""
    return BUILTIN.get(name, DEFAULT_SHOWN)
