"""The retry policy plugin: model requests that a retry may cure are retried.

It listens to the agent loop's ``agent/request-error`` waterfall (see
:mod:`tether.loop.turn`). For a failed request whose
:attr:`~tether.loop.turn.RequestError.code` is retryable (by default the
normalized ``rate-limit``, ``server``, ``timeout`` and ``transport`` of
:mod:`tether.llm.adapters.errors`) and that has attempts left, it answers
``retry=True`` with a delay:

* capped exponential backoff: ``min(max_delay, base_delay * 2 ** (attempt - 1))``,
  less a random part of up to ``jitter`` of it, so that clients that failed
  together do not retry together;
* never shorter than the provider's ``Retry-After``
  (:attr:`~tether.loop.turn.RequestError.retry_after`); a ``Retry-After``
  longer than ``max_retry_after`` gives up at once instead.

A ``timeout`` (a provider that could not be reached in time, or an answer
that stalled) is retried only while the step has made fewer than
``timeout_attempts`` requests (2: one retry): each such attempt already
waited a whole timeout, and a provider that stalled once is likely to again,
so a stall holds a turn about twice the adapter's ``idle_timeout``, not
``max_attempts`` times it.

Later listeners of the waterfall see that decision and may change it. When
the final decision is a retry, the loop writes it to the agent's session as
an ``llm/retry`` event (:class:`RetryEvent`, part of the built-in session
vocabulary, so logs that hold it load without this plugin); the plugin logs
it. The loop waits out the delay
on the turn's cancel signal: a cancel during the wait ends the turn at once,
``aborted``.

Mount it beside the agent loop::

    - id: retry
      plugin: tether.loop.retry
      config: {max_attempts: 5, base_delay: 1.0, max_delay: 30.0}
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated

import msgspec
from msgspec import Meta
from msgspec.structs import replace

from tether.loop.hooks import REQUEST_ERROR, RequestError
from tether.runtime.schema import Schema
from tether.session.vocabulary import RetryEvent

if TYPE_CHECKING:
    from tether.agent.types import Agent
    from tether.runtime import Context

__all__ = ["RETRYABLE", "Config", "RetryEvent", "RetryPolicy", "apply", "inject", "name"]

log = logging.getLogger(__name__)

TIMEOUT = "timeout"
RETRYABLE = ("rate-limit", "server", TIMEOUT, "transport")
"""The error codes retried by default."""


class RetryPolicy(msgspec.Struct, frozen=True):
    """Which failed requests to retry, and after how long; see the module docstring.

    ``max_attempts`` counts every request of one step, the first included.
    Equality, hashing and ``repr`` leave ``rng`` out: two policies with the same
    settings are the same policy, whatever their random state.
    """

    max_attempts: int = 5
    base_delay: float = 1.0
    max_delay: float = 30.0
    jitter: float = 0.5
    max_retry_after: float = 120.0
    retry_on: frozenset[str] = frozenset(RETRYABLE)
    timeout_attempts: int = 2
    rng: random.Random = msgspec.field(default_factory=random.Random)

    def _settings(self) -> tuple[tuple[str, object], ...]:
        return tuple(
            (field, getattr(self, field)) for field in self.__struct_fields__ if field != "rng"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RetryPolicy) or type(other) is not type(self):
            return NotImplemented
        return self._settings() == other._settings()

    def __hash__(self) -> int:
        return hash(self._settings())

    def __repr__(self) -> str:
        shown = ", ".join(f"{field}={value!r}" for field, value in self._settings())
        return f"{type(self).__name__}({shown})"

    def backoff(self, attempt: int) -> float:
        """The delay after failed request number ``attempt``, before the ``Retry-After`` floor."""
        ceiling = min(self.max_delay, self.base_delay * 2.0 ** min(attempt - 1, 64))
        return ceiling * (1.0 - self.jitter * self.rng.random())

    def decide(self, error: RequestError) -> RequestError:
        """``error`` with ``retry`` and ``delay`` set by this policy."""
        limit = self.attempts_for(error.code)
        if error.code not in self.retry_on or error.attempt >= limit:
            return replace(error, retry=False, delay=0.0)
        delay = self.backoff(error.attempt)
        if error.retry_after is not None:
            if error.retry_after > self.max_retry_after:
                return replace(error, retry=False, delay=0.0)
            delay = max(delay, error.retry_after)
        return replace(error, retry=True, delay=delay, max_attempts=limit)

    def attempts_for(self, code: str | None) -> int:
        """The requests a step may make when the last one failed with ``code``."""
        if code == TIMEOUT:
            return min(self.max_attempts, self.timeout_attempts)
        return self.max_attempts


name = "retry"
inject: tuple[str, ...] = ()


class Config(Schema, frozen=True):
    """Configuration of the retry policy."""

    max_attempts: Annotated[
        int, Meta(ge=1, description="requests per step, the first included")
    ] = 5
    base_delay: Annotated[float, Meta(ge=0, description="seconds before the first retry")] = 1.0
    max_delay: Annotated[float, Meta(ge=0, description="the backoff's ceiling, in seconds")] = 30.0
    jitter: Annotated[float, Meta(ge=0, le=1, description="share of the delay randomized")] = 0.5
    max_retry_after: Annotated[
        float, Meta(ge=0, description="a longer Retry-After gives up instead of waiting")
    ] = 120.0
    retry_on: tuple[str, ...] = tuple(sorted(RETRYABLE))
    timeout_attempts: Annotated[
        int,
        Meta(ge=1, description="requests per step when they time out or stall, the first included"),
    ] = 2

    def policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.max_attempts,
            base_delay=self.base_delay,
            max_delay=self.max_delay,
            jitter=self.jitter,
            max_retry_after=self.max_retry_after,
            retry_on=frozenset(self.retry_on),
            timeout_attempts=self.timeout_attempts,
        )


async def apply(ctx: Context, config: Config) -> None:
    """Answer ``agent/request-error`` until this plugin unloads."""
    policy = config.policy()

    async def on_request_error(
        error: RequestError, next_: Callable[[RequestError], Awaitable[RequestError]], agent: Agent
    ) -> RequestError:
        decision = await next_(policy.decide(error))
        if decision.retry:
            _record(agent, decision, policy)
        return decision

    ctx.on(REQUEST_ERROR, on_request_error)


def _record(agent: Agent, decision: RequestError, policy: RetryPolicy) -> None:
    # Info, not a warning: every front end shows the retry from the session's
    # own event; this line is for --verbose and service logs.
    log.info(
        "agent %s: model request %d of %d failed (%s), retrying in %.2fs: %s",
        agent.id,
        decision.attempt,
        decision.max_attempts,
        decision.code,
        decision.delay,
        decision.error,
    )
