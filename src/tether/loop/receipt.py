"""The stop receipt of one stop, assembled by the loop from the parts its listeners answer.

A stop can reach work owned by several plugins at once: the bash tools'
processes, the subagent tools' children. Each plugin answers what its part
of the stop reached as :class:`~tether.session.StopParts`, and the loop writes
them as **one** ``tool/stopped`` (:class:`~tether.session.ToolStopped`):

* a cancelled turn: the answers of ``agent/turn-aborting``, just before the
  turn's ``turn/end`` (after ``agent/turn-closing``);
* an idle agent's disposal: the answers of ``agent/stopping``, between
  turns (``turn`` is the last one that ran, 0 before any).

A stop that reached nothing writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from tether.session import Aborted, StopParts, ToolStopped, TurnEndReason
from tether.session.log import Session

log = logging.getLogger(__name__)


def stop_cause(reason: TurnEndReason) -> str:
    """The ``cause`` a receipt gives for a turn that ended with ``reason``."""
    return reason.cause if isinstance(reason, Aborted) else reason.kind


def write_receipt(
    session: Session, turn: int, cause: str, parts: Iterable[StopParts]
) -> ToolStopped | None:
    """Append the one receipt of ``parts`` to ``session``; ``None`` when they reached nothing.

    A session whose registry maps ``tool/stopped`` to another payload (a
    plugin's own vocabulary) gets a log line instead of the event.
    """
    parts = tuple(parts)
    stopped = tuple(entry for part in parts for entry in part.stopped)
    agents = tuple(entry for part in parts for entry in part.agents)
    if not stopped and not agents:
        return None
    if session.registry.payload_class(ToolStopped.type) is not ToolStopped:
        log.info(
            "session %s: the stop reached %d command(s) and %d child agent(s)",
            session.id,
            len(stopped),
            len(agents),
        )
        return None
    receipt = ToolStopped(turn=turn, cause=cause, stopped=stopped, agents=agents)
    session.append(receipt)
    return receipt
