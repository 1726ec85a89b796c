"""A child agent's progress, shown inside its parent's ``task`` tool call.

A child agent (one the ``task`` tool started, :mod:`tether.plugins.tool_subagent`)
has no ACP session of its own. While the parent's ``task`` call runs, the
child's work is shown in that call as ``tool_call_update`` content: the
child's text as it streams, and one line per tool call the child makes
(``▸ bash: ls -l``). The content of a ``tool_call_update`` replaces the
call's content, so every update carries the progress so far, cut to its last
:data:`PROGRESS_LIMIT` characters; the call's result replaces it when the
child is done, as it does on a replay.

Only the events of a **direct** child of a bridge session are shown, and
only while the call that started it is open: a grandchild's work appears as
its parent's ``task`` line, and a background child (its header labelled
``background``: its call answered at once) is told of by its completion
notice.
"""

from __future__ import annotations

from collections.abc import Mapping

from tether.acp.updates import SessionUpdate
from tether.session import AssistantChunk, Event, ToolCallEvent
from tether.tools.presentation import ToolShown
from tether.tools.registry import Shown, shown_in

PROGRESS_LIMIT = 8_000
"""The most characters of a child's progress a single update carries."""

_SUMMARY_LIMIT = 120
"""The longest summary of one tool call, in characters."""

_NAMING_ARGUMENTS = ("description", "path", "pattern", "url", "query")
"""Arguments that say what a call is about, for tools whose title is only their name."""


class ChildProgress:
    """What a child agent has done so far, as the text its parent's tool call shows.

    ``shown`` is how the child's tool calls are shown (by default as tools
    that declare nothing).
    """

    __slots__ = ("_shown", "_text")

    def __init__(self, shown: Shown | None = None) -> None:
        self._text = ""
        self._shown = shown if shown is not None else shown_in(None)

    @property
    def text(self) -> str:
        """The progress so far, its last :data:`PROGRESS_LIMIT` characters (``…`` first if cut)."""
        if len(self._text) <= PROGRESS_LIMIT:
            return self._text
        return "…" + self._text[-(PROGRESS_LIMIT - 1) :]

    def advance(self, event: Event) -> bool:
        """Take in the child's ``event``; whether it changed the progress.

        A streamed text delta is added as it is; a tool call adds a line of its
        own. Everything else (reasoning, results, bookkeeping) is not shown.
        """
        payload = event.payload
        if isinstance(payload, AssistantChunk):
            if payload.kind != "text" or not payload.delta:
                return False
            self._append(payload.delta)
            return True
        if isinstance(payload, ToolCallEvent):
            summary = call_summary(payload.name, payload.arguments, self._shown(payload.name))
            line = f"▸ {summary}\n"
            self._append(line if not self._text or self._text.endswith("\n") else "\n" + line)
            return True
        return False

    def _append(self, text: str) -> None:
        self._text += text
        if len(self._text) > 2 * PROGRESS_LIMIT:
            # Keep what can still be shown: appends stay cheap however long it runs.
            self._text = self._text[-PROGRESS_LIMIT:]

    def update(self, tool_call_id: str) -> SessionUpdate:
        """The ``tool_call_update`` showing the progress in the call ``tool_call_id``."""
        return {
            "sessionUpdate": "tool_call_update",
            "toolCallId": tool_call_id,
            "content": [{"type": "content", "content": {"type": "text", "text": self.text}}],
        }


def call_summary(tool: str, arguments: Mapping[str, object], shown: ToolShown) -> str:
    """One line saying what a call does (``shown`` is its tool's presentation):
    ``bash: ls -l``, ``task: review the parser``."""
    title = shown.title_of(tool, arguments)
    if title == tool:
        for name in _NAMING_ARGUMENTS:
            value = arguments.get(name)
            if isinstance(value, str) and value:
                title = value
                break
    summary = tool if title == tool else f"{tool}: {title}"
    summary = " ".join(summary.split())
    if len(summary) > _SUMMARY_LIMIT:
        summary = summary[: _SUMMARY_LIMIT - 1].rstrip() + "…"
    return summary
