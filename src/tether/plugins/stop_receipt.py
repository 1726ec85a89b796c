"""The bash tools' part of a stop receipt: what a cancel did to their processes.

:class:`StopReceipts` collects, per agent, what a stop reached while a turn
was being cancelled — each foreground ``bash`` call the cancel stopped, with
the shell's :class:`~tether.shell.StopReport`, and each background task a
disposal stopped, and each call whose command ran in a client's terminal —
and answers it as :class:`~tether.session.StopParts` to
``agent/turn-aborting``; the loop writes the turn's one ``tool/stopped``
(:mod:`tether.loop.receipt`) just before its ``turn/end``. Order of events
for a disposal: ``agent/cancel-requested`` (cause ``disposed``) stops the
agent's background tasks at once, alongside its running tool calls;
``agent/turn-aborting`` answers them, with the final status of every
command that has ended by then (``seconds`` is ``null`` for one still
exiting; its end follows in the agent's teardown).

A disposal of an idle agent (no turn to close) kills its tasks in its
teardown (``agent/stopping``), and answers them for a receipt between turns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.agent import AgentStatus, CancelCause
from tether.session import StopParts, Stopped
from tether.session.receipt import StoppedKind

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.shell import ShellExecutor, StopReport


class StopReceipts:
    """Per agent, what a stop did to its commands, answered when its turn aborts."""

    def __init__(self, shell: ShellExecutor) -> None:
        self._shell = shell
        self._calls: dict[str, list[Stopped]] = {}
        self._tasks: dict[str, list[str]] = {}

    def call_stopped(
        self, agent: Agent, call_id: str, report: StopReport, *, kind: StoppedKind = "call"
    ) -> None:
        """Record that the cancel of ``agent``'s turn stopped the command of ``call_id``
        (``kind`` ``terminal`` when it ran in a client's terminal)."""
        self._calls.setdefault(agent.id, []).append(_entry(kind, call_id, report))

    def on_cancel_requested(self, agent: Agent, cause: object) -> None:
        """A disposal mid-turn stops the agent's background tasks now, so the turn's receipt
        can tell (an idle agent's are stopped by :meth:`on_stopping`)."""
        if cause != CancelCause.DISPOSED or agent.status is not AgentStatus.RUNNING:
            return
        stopped = self._shell.stop_owned_by(agent.id)
        if stopped:
            self._tasks.setdefault(agent.id, []).extend(task.id for task in stopped)

    async def on_stopping(self, agent: Agent) -> StopParts | None:
        """An agent torn down while idle: stop its background tasks; what that did.

        No turn will close to carry it, so the loop writes it between turns.
        """
        if agent.status is AgentStatus.RUNNING:
            return None  # its turn's receipt carries it (see on_cancel_requested)
        stopped = await self._shell.kill_owned_by(agent.id)
        entries = [_entry("task", task.id, task.stop) for task in stopped if task.stop is not None]
        return StopParts(stopped=tuple(entries)) if entries else None

    def on_turn_aborting(self, agent: Agent, turn: int) -> StopParts | None:
        """What this turn's stop did to the agent's commands (``None``: it stopped none)."""
        entries = self._calls.pop(agent.id, [])
        for task_id in self._tasks.pop(agent.id, []):
            snapshot = self._shell.get(task_id)
            if snapshot is not None and snapshot.stop is not None:
                entries.append(_entry("task", task_id, snapshot.stop))
        return StopParts(stopped=tuple(entries)) if entries else None

    def forget(self, agent: Agent) -> None:
        """Drop what was collected for ``agent`` (it is gone)."""
        self._calls.pop(agent.id, None)
        self._tasks.pop(agent.id, None)


def _entry(kind: StoppedKind, command_id: str, report: StopReport) -> Stopped:
    return Stopped(
        kind=kind,
        id=command_id,
        pgid=report.pgid,
        signals=report.signals,
        exit_code=report.exit_code,
        exit_signal=report.exit_signal,
        seconds=report.seconds,
    )
