"""The stop receipt of the bash tools: what a cancel did to their processes, logged.

:class:`StopReceipts` collects, per agent, what a stop reached while a turn
was being cancelled — each foreground ``bash`` call the cancel stopped, with
the shell's :class:`~tether.shell.StopReport`, and each background task a
disposal stopped, and each call whose command ran in a client's terminal —
and writes it as one ``tool/stopped`` event
(:class:`~tether.session.ToolStopped`) when the turn closes, just before its
``turn/end``. Order of events for a disposal: ``agent/cancel-requested``
(cause ``disposed``) stops the agent's background tasks at once, alongside
its running tool calls; ``agent/turn-closing`` writes the receipt, with the
final status of every command that has ended by then (``seconds`` is
``null`` for one still exiting; its end follows in the agent's teardown).

A disposal of an idle agent (no turn to close) kills its tasks in its
teardown without a receipt; the log line of that teardown is the record.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tether.agent import AgentStatus, CancelCause
from tether.session import Aborted, Stopped, ToolStopped, TurnEndReason
from tether.session.receipt import StoppedKind

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.shell import ShellExecutor, StopReport

log = logging.getLogger(__name__)


class StopReceipts:
    """Per-agent receipts of stops, written when each agent's turn closes."""

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

    async def on_stopping(self, agent: Agent) -> None:
        """An agent torn down while idle: stop its background tasks and write the receipt now.

        No turn will close to carry it, so it stands between turns (its
        ``turn`` is the last one that ran, 0 before any).
        """
        if agent.status is AgentStatus.RUNNING:
            return  # its turn closes with the receipt (see on_cancel_requested)
        stopped = await self._shell.kill_owned_by(agent.id)
        entries = [_entry("task", task.id, task.stop) for task in stopped if task.stop is not None]
        self._write(agent, agent.session.last_turn, CancelCause.DISPOSED.value, entries)

    def on_turn_closing(self, agent: Agent, turn: int, reason: TurnEndReason) -> None:
        """Write what this turn's stop did (nothing when it stopped no command)."""
        calls = self._calls.pop(agent.id, [])
        tasks = self._tasks.pop(agent.id, [])
        entries = list(calls)
        for task_id in tasks:
            snapshot = self._shell.get(task_id)
            if snapshot is not None and snapshot.stop is not None:
                entries.append(_entry("task", task_id, snapshot.stop))
        cause = reason.cause if isinstance(reason, Aborted) else reason.kind
        self._write(agent, turn, cause, entries)

    def _write(self, agent: Agent, turn: int, cause: str, entries: list[Stopped]) -> None:
        if not entries:
            return
        session = agent.session
        if session.registry.payload_class(ToolStopped.type) is not ToolStopped:
            log.info("agent %s: stopped %d command(s): %s", agent.id, len(entries), entries)
            return
        session.append(ToolStopped(turn=turn, cause=cause, stopped=tuple(entries)))

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
