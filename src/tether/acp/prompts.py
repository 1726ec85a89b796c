"""A ``session/prompt`` in flight, and how its turn's end answers it."""

from __future__ import annotations

import asyncio

import msgspec
from acp.schema import StopReason

from tether.loop.turn import step_limit_reached
from tether.session import Aborted, Blocked, Completed, Errored, MaxTokens, TurnEndReason


class TurnFailed(msgspec.Struct, frozen=True):
    """A prompt whose turn failed (a model or tool-infrastructure error)."""

    error: str


Outcome = StopReason | TurnFailed
"""How a prompt ended."""


class PendingPrompt(msgspec.Struct, eq=False):
    """A ``session/prompt`` waiting for its turn to end; ``future`` gets the outcome."""

    message_id: str
    future: asyncio.Future[Outcome]
    turn: int | None = None
    """The turn that claimed the prompt, once one has."""
    cancel_requested: bool = False


def outcome_of(reason: TurnEndReason) -> Outcome:
    """The answer to a prompt whose turn ended with ``reason``."""
    if isinstance(reason, Completed):
        return "end_turn"
    if isinstance(reason, Aborted):
        return "cancelled"
    if isinstance(reason, MaxTokens):
        return "max_tokens"
    if isinstance(reason, Blocked):
        return "refusal"
    if step_limit_reached(reason):
        return "max_turn_requests"
    if isinstance(reason, Errored):
        return TurnFailed(reason.error)
    return TurnFailed(f"the turn ended: {reason.kind}")
