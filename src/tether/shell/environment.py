"""The environment a command gets: the inherited one without secrets, and a plain terminal."""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextvars import ContextVar
from types import MappingProxyType

from tether.fence import is_internal, is_secret

TERMINAL_ENV: Mapping[str, str] = MappingProxyType(
    {"TERM": "dumb", "NO_COLOR": "1", "PAGER": "cat"}
)
"""Set for every command: no colors, no pager, no terminal tricks in captured output."""

CONTEXT_ENV: ContextVar[Mapping[str, str]] = ContextVar("context_env", default=MappingProxyType({}))
"""Variables the current task adds to every command it starts (the trace context,
``TRACEPARENT``, set by telemetry for a tool call: docs/telemetry.md)."""


def child_environment(
    extra: Mapping[str, str], inherited: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a command: ``inherited`` (default ``os.environ``) without the
    variables whose names look secret and without tether's own ``TETHER_*`` settings
    (see :mod:`tether.fence`), then :data:`TERMINAL_ENV`, then :data:`CONTEXT_ENV`,
    then ``extra``.

    ``extra`` is what the caller asked for explicitly, so it is neither
    scrubbed nor overridden.
    """
    source = os.environ if inherited is None else inherited
    env = {
        name: value
        for name, value in source.items()
        if not is_secret(name) and not is_internal(name)
    }
    env.update(TERMINAL_ENV)
    env.update(CONTEXT_ENV.get())
    env.update(extra)
    return env
