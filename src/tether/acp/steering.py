"""tether's ACP extension methods: steering a running turn, queueing a prompt.

Both are requests with params ``{"sessionId", "prompt"}`` (``prompt``: content
blocks, as in ``session/prompt``) and answer ``{"messageId", "queue"}`` once
the message is on disk (durable before acknowledged; the agent's
``submit``). A message that cannot be stored is answered with a one-line
error (``-32603``) and withdrawn: it never runs, and neither does one whose
request is cancelled before it is stored.

* ``_tether/steer`` — the message reaches the running turn at its next step
  boundary (after the tool calls in progress), as input the model sees before
  its next request. A session with no turn running and no prompt in flight
  has nothing to steer: invalid params (``-32602``), nothing is queued.
* ``_tether/queue`` — the message is queued as its own turn, after whatever
  is queued before it, and the request answers at once (it does not wait for
  the turn). Its updates stream like a prompt's.

``session/cancel`` clears both queues, per the cancel contract: a steered or
queued message that had not been claimed never runs. tether does not echo
these messages back live (the client sent them); a replay shows them as
``user_message_chunk``.

They are advertised in the ``initialize`` result's ``_meta``:
:data:`ADVERTISED`.
"""

from __future__ import annotations

__all__ = ["ADVERTISED", "QUEUE", "STEER"]

STEER = "tether/steer"
"""The method ``_tether/steer`` as the connection hands it over (without its underscore)."""

QUEUE = "tether/queue"
"""The method ``_tether/queue`` as the connection hands it over."""

ADVERTISED: dict[str, object] = {
    "tether": {"extensions": [f"_{STEER}", f"_{QUEUE}"], "version": 1},
}
"""``initialize`` ``_meta``: the extension methods tether serves."""
