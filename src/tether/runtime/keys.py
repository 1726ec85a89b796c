"""Typed keys: each event and each service declared once, with its signature.

An event key names an event and fixes its dispatch mode and signature; a
service key names a service and fixes the type its readers get::

    AGENT_STATUS = Notice[Agent, AgentStatus]("agent/status")
    REQUEST_ERROR = Waterfall[RequestError, Agent]("agent/request-error")
    TURN_STOP = Serial[TurnEndReason, Agent, int, int]("agent/turn-stop")
    SHELL = ServiceKey[ShellExecutor]("shell")

    ctx.on(AGENT_STATUS, on_status)       # on_status(agent, status) -> None
    ctx.emit(AGENT_STATUS, agent, status)
    shell = ctx.service(SHELL)            # ShellExecutor, for mypy too

A listener with the wrong signature, an emit with the wrong arguments or a
misspelt key is a type error. The string in a key stays the event's or the
service's identity on the wire and in configuration (composition rows,
``inject`` lists, logs): two keys with one name are one event.

The four modes (see :mod:`tether.runtime.events`):

* ``Notice[*Args]`` — ``emit``: synchronous listeners ``(*args) -> None``, isolated.
* ``Serial[R, *Args]`` — ``serial``: listeners ``(*args) -> R | None`` (or
  awaitable), in order; the first non-``None`` result wins.
* ``Parallel[*Args]`` — ``parallel``: listeners ``(*args) -> None`` (or
  awaitable), awaited together.
* ``Gather[R, *Args]`` — ``gather``: listeners ``(*args) -> R | None`` (or
  awaitable), awaited together; the caller gets every non-``None`` ``R``.
* ``Waterfall[T, *Args]`` — ``waterfall``: middleware ``(value, next, *args) -> T``
  (or awaitable).

The argument types are a variadic tuple (``TypeVarTuple``), so a listener
that takes one argument too few or of the wrong type does not match.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Generic, TypeVar, TypeVarTuple

Args = TypeVarTuple("Args")
T = TypeVar("T")
R = TypeVar("R")
S = TypeVar("S")

Next = Callable[[T], Awaitable[T]]
"""What a waterfall listener calls to pass its (possibly replaced) value on."""


class _Key:
    """A name with a kind; equal keys have the same class and name."""

    __slots__ = ("name",)
    kind = "key"

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {type(self).__name__} needs a non-empty name, got {name!r}")
        self.name = name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Key) and type(other) is type(self) and other.name == self.name

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.name))

    if not TYPE_CHECKING:

        def __class_getitem__(cls, parameters: object) -> type:
            # The parameters are for type checkers alone: a key's behaviour is
            # its class and its name. typing's own subscription (with a
            # variadic tuple) costs about 30 us per key, and every module
            # declaring keys pays it at import, on every command's start-up.
            return cls


class EventKey(_Key):
    """The base of the four event keys; ``mode`` is the dispatch it is made for."""

    __slots__ = ()
    mode = "event"


class Notice(EventKey, Generic[*Args]):
    """An ``emit`` event whose listeners take ``Args`` and return nothing."""

    __slots__ = ()
    mode = "emit"


class Serial(EventKey, Generic[R, *Args]):
    """A ``serial`` event: listeners take ``Args``; the first non-``None`` ``R`` wins."""

    __slots__ = ()
    mode = "serial"


class Parallel(EventKey, Generic[*Args]):
    """A ``parallel`` event: listeners take ``Args`` and are awaited together."""

    __slots__ = ()
    mode = "parallel"


class Gather(EventKey, Generic[R, *Args]):
    """A ``gather`` event: listeners take ``Args``, awaited together; each may answer an ``R``."""

    __slots__ = ()
    mode = "gather"


class Waterfall(EventKey, Generic[T, *Args]):
    """A ``waterfall`` event over a ``T``: listeners take ``(T, next, *Args)``."""

    __slots__ = ()
    mode = "waterfall"


class ServiceKey(_Key, Generic[S]):
    """A service, and the type ``S`` a reader of it gets (its caller-bound view, if any)."""

    __slots__ = ()
    kind = "service"


def service_name(key: ServiceKey[object] | str) -> str:
    """The name a service key (or a plain name, as ``inject`` lists hold) stands for."""
    return key if isinstance(key, str) else key.name
