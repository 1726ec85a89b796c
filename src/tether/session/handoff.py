"""``session/handed-off``: a draining host let the session go, for another host to go on.

Appended by a host that drains (``tether drain``, see ``docs/deploy.md``) as
the last event it writes to a session, just before it releases the
session's lease::

    {"host": "worker-3:4242", "turn": 2, "stopped": true}

``host`` is the holder that let the session go (``HOST:PID``), ``turn`` the
last turn it ran (0 before any), ``stopped`` whether that turn was stopped
by the hand-off (its ``turn/end`` is ``aborted {handoff}``; any command or
child agent the stop reached is in the ``tool/stopped`` receipt before it)
rather than ended on its own within the grace period. The host that takes
the session over writes after it. Not model-visible (the model is told by
the message that continues the session). Part of the core vocabulary.
"""

from __future__ import annotations

from typing import ClassVar

from tether.session.fields import bad_field, check_bool, check_id
from tether.session.payload import EventStruct

__all__ = ["SessionHandedOff"]

_TYPE = "session/handed-off"


class SessionHandedOff(EventStruct, frozen=True):
    """A draining host let the session go (see the module docstring)."""

    type: ClassVar[str] = _TYPE

    host: str
    turn: int
    stopped: bool

    def __post_init__(self) -> None:
        check_id(_TYPE, "host", self.host)
        if type(self.turn) is not int or self.turn < 0:  # bool is an int subclass
            raise bad_field(_TYPE, "turn", "an int >= 0", self.turn)
        check_bool(_TYPE, "stopped", self.stopped)
