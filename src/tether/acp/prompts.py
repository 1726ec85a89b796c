"""How a ``session/prompt`` is answered: the stop reason its turn handle's outcome maps to."""

from __future__ import annotations

import msgspec

from tether.acp.wire import StopReason
from tether.agent import NeverRan, TurnOutcome
from tether.loop.turn import step_limit_reached
from tether.session import Aborted, Blocked, Completed, Errored, MaxTokens, OverBudget


class TurnFailed(msgspec.Struct, frozen=True):
    """A prompt whose turn failed (a model or tool-infrastructure error)."""

    error: str


Outcome = StopReason | TurnFailed
"""How a prompt ended."""


def outcome_of(outcome: TurnOutcome) -> Outcome:
    """The answer to a prompt whose turn handle settled with ``outcome``: ``cancelled``
    when no turn took it, else by the reason its turn ended."""
    if isinstance(outcome, NeverRan):
        return "cancelled"
    reason = outcome.reason
    if isinstance(reason, Completed):
        return "end_turn"
    if isinstance(reason, Aborted):
        return "cancelled"
    if isinstance(reason, MaxTokens):
        return "max_tokens"
    if isinstance(reason, Blocked):
        return "refusal"
    if isinstance(reason, OverBudget):
        # ACP has no budget reason; "the turn may make no more requests" is the
        # closest (docs/editors.md says why, and the budget/exhausted receipt is shown).
        return "max_turn_requests"
    if step_limit_reached(reason):
        return "max_turn_requests"
    if isinstance(reason, Errored):
        return TurnFailed(reason.error)
    return TurnFailed(f"the turn ended: {reason.kind}")
