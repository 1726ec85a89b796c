"""The stop receipt: ``tool/stopped``, what a cancel or a disposal did to running processes.

When a turn is cancelled (by the user, or because its agent is disposed),
the event is written just before the closing ``turn/end``; when an idle agent
is disposed, it is written between turns (``turn`` is the last turn that ran,
0 before any). It lists every
command the stop reached: each foreground tool call that was running
(``kind: "call"``, by its call id) and each background task that was killed
(``kind: "task"``, by its task id), with its process group, the signals
sent, how the leader ended, and the seconds from the stop to the end of the
command (``null`` if it had not ended when the receipt was written). A
foreground call that ran in a terminal of the ACP client is
``kind: "terminal"``: its processes are the client's, so ``pgid`` is 0 and
``signals`` names the protocol method sent (``terminal/kill``). A user hook
that was running (see ``docs/hooks.md``) is ``kind: "hook"``, by its event
and, for a tool's hook, the call's id (``PreToolUse:call-1``)::

    {"turn": 3, "cause": "user", "stopped": [
      {"kind": "call", "id": "call-1", "pgid": 4242, "signals": ["SIGTERM"],
       "exit_code": null, "exit_signal": "SIGTERM", "seconds": 0.004}]}

A stop that reached child agents (see ``tether.plugins.tool_subagent``) lists
them under ``agents``, each with how its turn ended (absent when there were
none, as in logs written before children existed)::

    {"turn": 2, "cause": "user", "stopped": [], "agents": [
      {"id": "20261201-…", "call_id": "call-4", "ended": "aborted",
       "cause": "parent", "seconds": 0.003,
       "worktree": "/src/app/.git/tether-worktrees/20261201-…", "branch": "tether/20261201-…"}]}

(``worktree`` and ``branch`` only for a child whose git worktree was kept.)

One stop writes one receipt. What each plugin's stop reached comes back to
the loop as :class:`StopParts` (from ``agent/turn-aborting`` for a turn,
``agent/stopping`` for an idle agent's disposal), and the loop merges them
into the receipt (:mod:`tether.loop.receipt`).

It is part of the core vocabulary: every `EventRegistry` knows it, so a log
holding a receipt loads without the plugin that wrote it.
"""

from __future__ import annotations

from typing import ClassVar, Literal, get_args

import msgspec

from tether.session.errors import EventFormatError
from tether.session.fields import check_seconds
from tether.session.payload import EventStruct

StoppedKind = Literal["call", "task", "terminal", "hook"]
_KINDS: tuple[str, ...] = get_args(StoppedKind)
_TYPE = "tool/stopped"


class Stopped(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One command a stop reached."""

    kind: StoppedKind
    id: str
    pgid: int
    signals: tuple[str, ...]
    exit_code: int | None
    exit_signal: str | None
    seconds: float | None

    def __post_init__(self) -> None:
        where = f"{_TYPE} entry"
        if self.kind not in _KINDS:
            raise EventFormatError(f"{where}: kind must be one of {_KINDS}, got {self.kind!r}")
        if not isinstance(self.id, str) or not self.id:
            raise EventFormatError(f"{where}: id must be a non-empty string, got {self.id!r}")
        if self.kind == "terminal":
            if not _int(self.pgid) or self.pgid != 0:
                raise EventFormatError(f"{where}: a terminal's pgid is 0, got {self.pgid!r}")
        elif not _int(self.pgid) or self.pgid <= 0:
            raise EventFormatError(f"{where}: pgid must be a positive int, got {self.pgid!r}")
        if not isinstance(self.signals, tuple) or not all(isinstance(s, str) for s in self.signals):
            raise EventFormatError(f"{where}: signals must be strings, got {self.signals!r}")
        if self.exit_code is not None and not _int(self.exit_code):
            raise EventFormatError(f"{where}: exit_code must be an int, got {self.exit_code!r}")
        if not isinstance(self.exit_signal, str | None):
            raise EventFormatError(
                f"{where}: exit_signal must be a string, got {self.exit_signal!r}"
            )
        if self.seconds is not None:
            msgspec.structs.force_setattr(
                self, "seconds", check_seconds(where, "seconds", self.seconds)
            )


class StoppedAgent(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One child agent a stop reached: its id (its session's id), the tool
    call that started it, how its turn ended (``ended``, with ``cause`` when
    it was aborted) and the seconds from the stop to its end; ``worktree`` and
    ``branch`` name the git worktree it owned when it was kept (it had
    changes), and are left out otherwise."""

    id: str
    call_id: str | None
    ended: str
    cause: str | None
    seconds: float | None
    worktree: str | None = None
    branch: str | None = None

    def __post_init__(self) -> None:
        where = f"{_TYPE} agent entry"
        for name in ("id", "ended"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise EventFormatError(f"{where}: {name} must be a non-empty string, got {value!r}")
        for name in ("call_id", "cause", "worktree", "branch"):
            if not isinstance(getattr(self, name), str | None):
                raise EventFormatError(f"{where}: {name} must be a string or null")
        if self.seconds is not None:
            msgspec.structs.force_setattr(
                self, "seconds", check_seconds(where, "seconds", self.seconds)
            )


class StopParts(msgspec.Struct, frozen=True):
    """What one listener's part of a stop reached: its commands and its child agents.

    A listener of ``agent/turn-aborting`` or ``agent/stopping`` answers one;
    the loop writes the parts of one stop as one :class:`ToolStopped`.
    """

    stopped: tuple[Stopped, ...] = ()
    agents: tuple[StoppedAgent, ...] = ()


class ToolStopped(EventStruct, frozen=True):
    """The receipt of one stop (see the module docstring)."""

    type: ClassVar[str] = _TYPE

    turn: int
    cause: str
    stopped: tuple[Stopped, ...]
    agents: tuple[StoppedAgent, ...] = ()

    def __post_init__(self) -> None:
        if not _int(self.turn) or self.turn < 0:
            raise EventFormatError(f"{_TYPE}: turn must be an int >= 0, got {self.turn!r}")
        if not isinstance(self.cause, str):
            raise EventFormatError(f"{_TYPE}: cause must be a string, got {self.cause!r}")
        if not isinstance(self.stopped, tuple) or not all(
            isinstance(entry, Stopped) for entry in self.stopped
        ):
            raise EventFormatError(f"{_TYPE}: stopped must be a tuple of entries")
        if not isinstance(self.agents, tuple) or not all(
            isinstance(entry, StoppedAgent) for entry in self.agents
        ):
            raise EventFormatError(f"{_TYPE}: agents must be a tuple of entries")

    def stored(self) -> object:
        if self.agents:
            return self
        # Receipts that stopped no child agent are stored as before children existed.
        return {"turn": self.turn, "cause": self.cause, "stopped": self.stopped}


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
