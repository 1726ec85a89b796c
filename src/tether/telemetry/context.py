"""The trace context of owned processes, as other layers see it: small and dependency-free.

The live exporter (:mod:`tether.telemetry.plugin`) provides ``ctx.tracing``
(:data:`TRACING`) while it runs; a plugin that starts processes outside a tool
call (the MCP servers of an agent) asks it for their variables and starts them
inside :func:`process_context`, and the hooks runner asks it for the context of
the call or turn a hook runs for. Importing this module loads nothing of the
exporter.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from tether.runtime.keys import ServiceKey
from tether.shell.environment import CONTEXT_ENV

if TYPE_CHECKING:
    from tether.session import Session

__all__ = ["TRACING", "Tracing", "process_context"]


class Tracing(Protocol):
    """``ctx.tracing``: the trace context of processes the shell executor does not start."""

    def session_environment(self, session_id: str) -> Mapping[str, str]:
        """The variables (``TRACEPARENT``) of a process started for ``session_id``."""
        ...

    async def agent_environment(self, session: Session, call_id: str | None) -> Mapping[str, str]:
        """The variables of a process started for ``session`` while it runs (a hook):
        in tool call ``call_id``'s span when given and logged in the last turn, else
        in the open turn's ``invoke_agent`` span, else in the session's own context."""
        ...


TRACING = ServiceKey[Tracing]("tracing")
"""``ctx.tracing``: provided only while telemetry is on."""


@contextmanager
def process_context(variables: Mapping[str, str]) -> Iterator[None]:
    """Within the block, every process the current task starts gets ``variables``
    (and so does every task it creates meanwhile, which copies the context)."""
    token = CONTEXT_ENV.set({**CONTEXT_ENV.get(), **variables})
    try:
        yield
    finally:
        CONTEXT_ENV.reset(token)
