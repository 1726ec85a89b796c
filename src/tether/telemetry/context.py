"""The trace context of owned processes, as other layers see it: small and dependency-free.

The live exporter (:mod:`tether.telemetry.plugin`) provides ``ctx.tracing``
(:data:`TRACING`) while it runs; a plugin that starts processes outside a tool
call (the MCP servers of an agent) asks it for their variables and starts them
inside :func:`process_context`. Importing this module loads nothing of the
exporter.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol

from tether.runtime.keys import ServiceKey
from tether.shell.environment import CONTEXT_ENV

__all__ = ["TRACING", "Tracing", "process_context"]


class Tracing(Protocol):
    """``ctx.tracing``: the trace context of processes started outside a tool call."""

    def session_environment(self, session_id: str) -> Mapping[str, str]:
        """The variables (``TRACEPARENT``) of a process started for ``session_id``."""
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
