"""How a turn ended, in one line, as every front end says it: what failed and what to do.

A failed model request (a bad key, a spent quota, a conversation too long, a
network down) carries a normalized code (:mod:`tether.llm.adapters.errors`);
:func:`model_failure` adds the advice for it. The terminal prints
:func:`turn_outcome` under a turn, the web page shows it as the turn's end.
"""

from __future__ import annotations

from tether.session import Aborted, Blocked, Completed, Errored, OverBudget, TurnEndReason

MODEL_ADVICE = {
    "auth": "check the API key (the provider's key variable, or TETHER_API_KEY) and the "
    "account's quota",
    "rate-limit": "the provider is limiting requests or the quota is spent; wait, or check it",
    "server": "the provider is failing; try again later",
    "timeout": "the provider did not answer in time; check the network or --base-url",
    "transport": "the connection to the endpoint dropped; check the network, then try again",
    "unreachable": "nothing answers there; check --base-url and that the server is running",
    "endpoint": "check --base-url: it goes up to the API's version path, e.g. "
    "http://127.0.0.1:8000/v1",
    "bad-request": "the provider refused the request; check the model name",
    "context-overflow": "the conversation is too long for the model; /compact it, or start "
    "a new session",
}
"""What to do about a failed model request, by its normalized error code
(:mod:`tether.llm.adapters.errors`)."""


def model_failure(error: str, code: str | None) -> str:
    """One line for a failed model request: what failed, and what to do when the code says."""
    advice = MODEL_ADVICE.get(code or "")
    return f"{error} — {advice}" if advice else error


def turn_outcome(reason: TurnEndReason) -> str | None:
    """How a turn ended, in one line, when it did not complete (``None`` when it did),
    from its ``turn/end`` reason: ``error: …`` saying what failed and what to do,
    ``cancelled by user``, ``refused: …``, or ``turn ended: KIND``."""
    match reason:
        case Completed():
            return None
        case Errored(error=error, code=code):
            return f"error: {model_failure(error, code)}"
        case Aborted(cause=cause):
            return f"cancelled by {cause}"
        case Blocked():
            return "refused: a hook or the provider would not let the turn go on"
        case OverBudget():
            return "stopped: the spend budget is exhausted (see docs/budget.md)"
    return f"turn ended: {reason.kind}"
