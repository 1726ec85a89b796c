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

Later listeners of the waterfall see that decision and may change it. When
the final decision is a retry, it is written to the agent's session as an
``llm/retry`` event (:class:`RetryEvent`; an ignorable type, so logs that
hold it load without this plugin) and logged. The loop waits out the delay
on the turn's cancel signal: a cancel during the wait ends the turn at once,
``aborted``.

Mount it beside the agent loop::

    - id: retry
      plugin: tether.loop.retry
      config: {max_attempts: 5, base_delay: 1.0, max_delay: 30.0}
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar, Self

from tether.loop.hooks import REQUEST_ERROR, RequestError
from tether.runtime.checked import Checked, meta
from tether.session.errors import EventFormatError
from tether.session.events import DEFAULT_REGISTRY, EventRegistry
from tether.session.vocabulary import EventPayload

if TYPE_CHECKING:
    from tether.agent.types import Agent
    from tether.runtime import Context

__all__ = ["RETRYABLE", "Config", "RetryEvent", "RetryPolicy", "apply", "inject", "name"]

log = logging.getLogger(__name__)

RETRYABLE = ("rate-limit", "server", "timeout", "transport")
"""The error codes retried by default."""


@dataclass(frozen=True, slots=True)
class RetryEvent(EventPayload):
    """A failed model request that is retried: ``llm/retry``.

    ``attempt`` is the number of the request that failed (1 for the step's
    first); ``delay`` the seconds waited before the next; ``retry_after`` the
    provider's hint, if it gave one.
    """

    type: ClassVar[str] = "llm/retry"

    attempt: int
    code: str | None
    error: str
    delay: float
    retry_after: float | None = None

    def __post_init__(self) -> None:
        if type(self.attempt) is not int or self.attempt < 1:
            raise EventFormatError(f"llm/retry: attempt must be an int >= 1, got {self.attempt!r}")
        if not isinstance(self.code, str | None) or not isinstance(self.error, str):
            raise EventFormatError(f"llm/retry: bad code or error: {self.code!r}, {self.error!r}")
        if not _seconds(self.delay):
            raise EventFormatError(f"llm/retry: delay must be a number >= 0, got {self.delay!r}")
        if self.retry_after is not None and not _seconds(self.retry_after):
            raise EventFormatError(
                f"llm/retry: retry_after must be a number >= 0, got {self.retry_after!r}"
            )

    def to_data(self) -> dict[str, object]:
        return {
            "attempt": self.attempt,
            "code": self.code,
            "error": self.error,
            "delay": float(self.delay),
            "retry_after": None if self.retry_after is None else float(self.retry_after),
        }

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Self:
        try:
            return cls(
                attempt=data["attempt"],  # type: ignore[arg-type]
                code=data["code"],  # type: ignore[arg-type]
                error=data["error"],  # type: ignore[arg-type]
                delay=data["delay"],  # type: ignore[arg-type]
                retry_after=data.get("retry_after"),  # type: ignore[arg-type]
            )
        except KeyError as exc:
            raise EventFormatError(f"llm/retry: missing field {exc}") from None


def _seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < math.inf


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Which failed requests to retry, and after how long; see the module docstring.

    ``max_attempts`` counts every request of one step, the first included.
    """

    max_attempts: int = 5
    base_delay: float = 1.0
    max_delay: float = 30.0
    jitter: float = 0.5
    max_retry_after: float = 120.0
    retry_on: frozenset[str] = frozenset(RETRYABLE)
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def backoff(self, attempt: int) -> float:
        """The delay after failed request number ``attempt``, before the ``Retry-After`` floor."""
        ceiling = min(self.max_delay, self.base_delay * 2.0 ** min(attempt - 1, 64))
        return ceiling * (1.0 - self.jitter * self.rng.random())

    def decide(self, error: RequestError) -> RequestError:
        """``error`` with ``retry`` and ``delay`` set by this policy."""
        if error.code not in self.retry_on or error.attempt >= self.max_attempts:
            return replace(error, retry=False, delay=0.0)
        delay = self.backoff(error.attempt)
        if error.retry_after is not None:
            if error.retry_after > self.max_retry_after:
                return replace(error, retry=False, delay=0.0)
            delay = max(delay, error.retry_after)
        return replace(error, retry=True, delay=delay)


name = "retry"
inject: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Config(Checked):
    """Configuration of the retry policy."""

    max_attempts: int = field(
        default=5, metadata=meta("requests per step, the first included", ge=1)
    )
    base_delay: float = field(default=1.0, metadata=meta("seconds before the first retry", ge=0))
    max_delay: float = field(default=30.0, metadata=meta("the backoff's ceiling, in seconds", ge=0))
    jitter: float = field(default=0.5, metadata=meta("share of the delay randomized", ge=0, le=1))
    max_retry_after: float = field(
        default=120.0, metadata=meta("a longer Retry-After gives up instead of waiting", ge=0)
    )
    retry_on: tuple[str, ...] = tuple(sorted(RETRYABLE))

    def policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.max_attempts,
            base_delay=self.base_delay,
            max_delay=self.max_delay,
            jitter=self.jitter,
            max_retry_after=self.max_retry_after,
            retry_on=frozenset(self.retry_on),
        )


class _SharedType:
    """One registration of a payload class, shared by every live retry plugin.

    Several runtimes in one process (tests, embedding programs) may mount
    this plugin at once; the type stays registered until the last unloads.
    """

    def __init__(self, registry: EventRegistry, payload: type[EventPayload]) -> None:
        self._registry = registry
        self._payload = payload
        self._holders = 0
        self._unregister: Callable[[], None] | None = None

    def acquire(self) -> Callable[[], None]:
        if self._holders == 0:
            self._unregister = self._registry.register(self._payload, ignorable=True)
        self._holders += 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self._holders -= 1
            if self._holders == 0 and self._unregister is not None:
                self._unregister()
                self._unregister = None

        return release


_EVENT_TYPE = _SharedType(DEFAULT_REGISTRY, RetryEvent)


async def apply(ctx: Context, config: Config) -> None:
    """Register ``llm/retry`` and answer ``agent/request-error`` until this plugin unloads."""
    policy = config.policy()
    await ctx.effect(_EVENT_TYPE.acquire, label="llm/retry event type")

    async def on_request_error(
        error: RequestError, next_: Callable[[RequestError], Awaitable[RequestError]], agent: Agent
    ) -> RequestError:
        decision = await next_(policy.decide(error))
        if decision.retry:
            _record(agent, decision, policy)
        return decision

    ctx.on(REQUEST_ERROR, on_request_error)


def _record(agent: Agent, decision: RequestError, policy: RetryPolicy) -> None:
    log.warning(
        "agent %s: model request %d of %d failed (%s), retrying in %.2fs: %s",
        agent.id,
        decision.attempt,
        policy.max_attempts,
        decision.code,
        decision.delay,
        decision.error,
    )
    session = agent.session
    if session.registry.payload_class(RetryEvent.type) is not RetryEvent:
        # A session with a registry of its own that lacks the type: the log
        # line above is the record.
        return
    session.append(
        RetryEvent(
            attempt=decision.attempt,
            code=decision.code,
            error=decision.error,
            delay=decision.delay,
            retry_after=decision.retry_after,
        )
    )
