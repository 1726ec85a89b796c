"""The stop receipt: ``tool/stopped``, what a cancel or a disposal did to running processes.

When a turn is cancelled (by the user, or because its agent is disposed),
the event is written just before the closing ``turn/end``; when an idle agent
is disposed, it is written between turns (``turn`` is the last turn that ran,
0 before any). It lists every
command the stop reached: each foreground tool call that was running
(``kind: "call"``, by its call id) and each background task that was killed
(``kind: "task"``, by its task id), with its process group, the signals
sent, how the leader ended, and the seconds from the stop to the end of the
command (``null`` if it had not ended when the receipt was written)::

    {"turn": 3, "cause": "user", "stopped": [
      {"kind": "call", "id": "call-1", "pgid": 4242, "signals": ["SIGTERM"],
       "exit_code": null, "exit_signal": "SIGTERM", "seconds": 0.004}]}

It is part of the core vocabulary: every `EventRegistry` knows it, so a log
holding a receipt loads without the plugin that wrote it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal, Self, get_args

from tether.session.errors import EventFormatError
from tether.session.vocabulary import EventPayload

StoppedKind = Literal["call", "task"]
_KINDS: tuple[str, ...] = get_args(StoppedKind)
_TYPE = "tool/stopped"


@dataclass(frozen=True, slots=True)
class Stopped:
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
        if not _int(self.pgid) or self.pgid <= 0:
            raise EventFormatError(f"{where}: pgid must be a positive int, got {self.pgid!r}")
        if not isinstance(self.signals, tuple) or not all(isinstance(s, str) for s in self.signals):
            raise EventFormatError(f"{where}: signals must be strings, got {self.signals!r}")
        if self.exit_code is not None and not _int(self.exit_code):
            raise EventFormatError(f"{where}: exit_code must be an int, got {self.exit_code!r}")
        if not isinstance(self.exit_signal, str | None):
            raise EventFormatError(
                f"{where}: exit_signal must be a string, got {self.exit_signal!r}"
            )
        seconds = self.seconds
        if seconds is not None and not (
            isinstance(seconds, int | float)
            and not isinstance(seconds, bool)
            and 0 <= seconds < math.inf
        ):
            raise EventFormatError(f"{where}: seconds must be a number >= 0, got {seconds!r}")

    def to_data(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "id": self.id,
            "pgid": self.pgid,
            "signals": list(self.signals),
            "exit_code": self.exit_code,
            "exit_signal": self.exit_signal,
            "seconds": None if self.seconds is None else float(self.seconds),
        }

    @classmethod
    def from_data(cls, data: object) -> Stopped:
        if not isinstance(data, Mapping):
            raise EventFormatError(f"{_TYPE}: an entry must be an object, got {data!r}")
        try:
            signals = data["signals"]
            if not isinstance(signals, list | tuple):
                raise EventFormatError(f"{_TYPE} entry: signals must be a list, got {signals!r}")
            return cls(
                kind=data["kind"],
                id=data["id"],
                pgid=data["pgid"],
                signals=tuple(signals),
                exit_code=data["exit_code"],
                exit_signal=data["exit_signal"],
                seconds=data["seconds"],
            )
        except KeyError as exc:
            raise EventFormatError(f"{_TYPE} entry: missing field {exc}") from None


@dataclass(frozen=True, slots=True)
class ToolStopped(EventPayload):
    """The receipt of one stop (see the module docstring)."""

    type: ClassVar[str] = _TYPE

    turn: int
    cause: str
    stopped: tuple[Stopped, ...]

    def __post_init__(self) -> None:
        if not _int(self.turn) or self.turn < 0:
            raise EventFormatError(f"{_TYPE}: turn must be an int >= 0, got {self.turn!r}")
        if not isinstance(self.cause, str):
            raise EventFormatError(f"{_TYPE}: cause must be a string, got {self.cause!r}")
        if not isinstance(self.stopped, tuple) or not all(
            isinstance(entry, Stopped) for entry in self.stopped
        ):
            raise EventFormatError(f"{_TYPE}: stopped must be a tuple of entries")

    def to_data(self) -> dict[str, object]:
        return {
            "turn": self.turn,
            "cause": self.cause,
            "stopped": [entry.to_data() for entry in self.stopped],
        }

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Self:
        try:
            entries = data["stopped"]
            if not isinstance(entries, list | tuple):
                raise EventFormatError(f"{_TYPE}: stopped must be a list, got {entries!r}")
            return cls(
                turn=data["turn"],  # type: ignore[arg-type]
                cause=data["cause"],  # type: ignore[arg-type]
                stopped=tuple(Stopped.from_data(entry) for entry in entries),
            )
        except KeyError as exc:
            raise EventFormatError(f"{_TYPE}: missing field {exc}") from None


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
