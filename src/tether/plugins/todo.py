"""The ``todo`` tool: the task list the model keeps while it works (a plugin).

The model sends the whole list each time (content, priority ``high`` /
``medium`` / ``low``, status ``pending`` / ``in_progress`` / ``completed``);
the tool appends it to the session as ``plan/updated``
(:mod:`tether.session.settings`), so the plan is part of the log: an editor
shows it as an ACP ``plan`` update, live and on a replay. An empty list clears
the plan. At most one task should be ``in_progress``; more is allowed (the
model may work on several), but the tool says so in its answer.

The tool needs an agent (it writes to the agent's session); called by a
program without one, it answers an error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from msgspec import Meta

from tether.runtime.schema import Schema
from tether.session.settings import PlanEntry, PlanUpdated
from tether.tools import Tool, ToolExec, ToolOutput, ToolShown
from tether.tools.registry import TOOLS

if TYPE_CHECKING:
    from tether.runtime import Context

name = "todo"
inject = ("tools",)

MAX_TASKS = 100
"""The longest list the tool accepts."""


class Task(Schema, frozen=True):
    """One task of the list."""

    content: Annotated[str, Meta(description="what the task is, in a short imperative sentence")]
    status: Annotated[
        Literal["pending", "in_progress", "completed"],
        Meta(description="pending, in_progress (being worked on now) or completed"),
    ]
    priority: Annotated[
        Literal["high", "medium", "low"], Meta(description="high, medium or low")
    ] = "medium"


class TodoArgs(Schema, frozen=True):
    """Replace the session's task list."""

    tasks: Annotated[
        tuple[Task, ...],
        Meta(description="the whole task list, in order, with every task's current status"),
    ]


async def todo(args: TodoArgs, exec: ToolExec) -> ToolOutput:
    """Log the list as the session's plan; tell the model what it now holds."""
    if exec.agent is None:
        return ToolOutput("todo keeps an agent's task list; there is no agent here", is_error=True)
    if len(args.tasks) > MAX_TASKS:
        return ToolOutput(
            f"too many tasks ({len(args.tasks)}); keep the list to {MAX_TASKS}", is_error=True
        )
    blank = [index for index, task in enumerate(args.tasks) if not task.content.strip()]
    if blank:
        return ToolOutput(
            f"task {blank[0]} has no content; call todo again with content for every task",
            is_error=True,
        )
    entries = tuple(
        PlanEntry(task.content.strip(), task.priority, task.status) for task in args.tasks
    )
    exec.agent.session.append(PlanUpdated(entries=entries))
    if not entries:
        return ToolOutput("The task list is cleared.")
    done = sum(entry.status == "completed" for entry in entries)
    working = sum(entry.status == "in_progress" for entry in entries)
    summary = f"The task list has {len(entries)} tasks: {done} completed, {working} in progress."
    if working > 1:
        summary += " Keep one task in progress at a time where you can."
    return ToolOutput(summary)


TODO_SHOWN = ToolShown(kind="think", hidden=("tasks",))
"""``todo``: planning, which changes nothing outside the session; its list is shown
from the ``plan/updated`` event it logs, not from the call's arguments."""


async def apply(ctx: Context, config: None) -> None:
    """Register the ``todo`` tool."""
    await ctx.service(TOOLS).register(
        Tool(
            name="todo",
            description="Keep a task list for multi-step work: send the whole list, with each "
            "task's status, whenever it changes. The user sees it as your plan.",
            args=TodoArgs,
            execute=todo,
            shown=TODO_SHOWN,
        )
    )
