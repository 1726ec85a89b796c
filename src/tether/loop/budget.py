"""Spend budgets, kept by the agent loop: reserve before a request, settle after.

Each root session with a :class:`~tether.session.budget.Budget` (an agent's
:attr:`~tether.agent.AgentOptions.budget`) has one :class:`BudgetLedger`. Its
spending is folded from the root's log when the ledger is made (a resumed
session keeps what it spent) and kept as requests reserve and settle. Child
agents (whose header names a delegator) draw on their root's ledger, and so
does every model request made while one of their turns runs: the loop sets
the ledger's gate (:data:`~tether.llm.spend.SPENDING`) for the turn, so
compaction summaries and plugins calling ``ctx.llm`` from a tool are
covered too (see :mod:`tether.llm.spend`).

**Reserving.** A request's worst case is its estimated input (four
characters a token, as the compactor estimates) plus its ``max_tokens``; a
request that sets none is sent with ``max_tokens`` set to ``reserve_output``,
so the reservation bounds what it can produce. In US dollars the input is
priced at the higher of the model's input and cache-write prices. The
reservation is appended to the root's log as ``budget/reserved`` and flushed
*before* the request is sent: a crash never forgets spending.

**Refusing.** A reservation that would take a session or turn total past its
limit is not made: ``budget/exhausted`` (the receipt) is appended to the
requesting session and the request is not sent; the turn then ends
``budget``. A USD limit with a model that has no prices refuses every
request with the error code ``unpriced``.

**Per day.** With a per-day limit, the reservation also goes to the host's
ledger of the UTC day (:mod:`tether.loop.day_budget`), under its lock, after
the session and turn limits fit; the day's limit refuses it the same way.

**For all hosts.** With a cluster limit (PostgreSQL only), the reservation
carries a claim on the UTC day (:class:`~tether.session.budget.ClusterClaim`)
and the database grants or refuses it in the transaction of the batch that
logs it; once the flush returns, the ledger reads the decision
(:meth:`~tether.persist.cluster.Cluster.budget_outcome`). A refused
reservation is settled at nothing at once, its receipt names the ``cluster``
budget, and the request is not sent. Reservations of the root a dead process
left unsettled are settled at their worst case when the ledger is made (the
session was resumed or taken over), which closes them in the database too.

**Settling.** After the stream ends, ``budget/settled`` records what the
request used, priced by the catalog; a request that reported no usage is
settled at nothing when no answer streamed (the provider refused it), else at
its reservation (its real cost is unknown; the worst case is kept).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import weakref
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from msgspec.structs import replace

from tether.llm.catalog import PER_TOKENS, ModelCatalog, Prices
from tether.llm.chunks import Usage
from tether.llm.request import ModelRequest
from tether.llm.spend import SPENDING, Admission, SpendGate, purpose
from tether.loop.context import message_tokens, text_tokens, tools_tokens
from tether.runtime.keys import ServiceKey
from tether.session.budget import (
    BUDGET_TYPES,
    Budget,
    BudgetExhausted,
    BudgetReserved,
    BudgetScope,
    BudgetSettled,
    BudgetUnit,
    ClusterClaim,
    Spending,
    amount_text,
    set_in,
)

if TYPE_CHECKING:
    from tether.loop.day_budget import DayLedger, DaySpent
    from tether.loop.driver import AgentDriver
    from tether.persist.backends.postgres_budget import DayTotals
    from tether.persist.cluster import Cluster
    from tether.session.log import Session

__all__ = [
    "BUDGETS",
    "DEFAULT_RESERVE_OUTPUT",
    "NO_CLUSTER",
    "UNPRICED",
    "BudgetBook",
    "BudgetLedger",
    "drawing_on",
    "reservation_of",
]

log = logging.getLogger(__name__)

DEFAULT_RESERVE_OUTPUT = 8192
"""Output tokens reserved for (and allowed to) a request that sets no ``max_tokens``."""

UNPRICED = "unpriced"
"""The error code of a request refused because a USD limit is kept and its model has
no prices."""

NO_CLUSTER = "no_cluster"
"""The error code of a request refused because a cluster limit is kept and sessions are
not stored in PostgreSQL (there are no other hosts to share the limit with)."""

NO_CLUSTER_MESSAGE = (
    "a cluster budget (cluster_day_usd, cluster_day_tokens) needs sessions stored in "
    "PostgreSQL (the tether.persist.postgres plugin, or TETHER_DATABASE_URL); "
    "use day_usd or day_tokens for one host"
)
"""Why a cluster limit cannot be kept without PostgreSQL: one line."""

_SCOPES: tuple[BudgetScope, ...] = ("session", "turn")
_UNITS: tuple[BudgetUnit, ...] = ("usd", "tokens")

Flush = Callable[["Session"], Awaitable[None]]

BUDGETS = ServiceKey["BudgetBook"]("budgets")
"""``ctx.budgets``: the agent loop's :class:`BudgetBook`, for model requests made on a
session's behalf outside its turns (a title, a compaction asked for between turns)."""


@contextlib.contextmanager
def drawing_on(gate: SpendGate | None, name: str) -> Iterator[None]:
    """Within the block, model requests pass ``gate`` (unless a gate is set already, as
    in a turn) and are reserved as being for ``name``."""
    token = SPENDING.set(gate) if gate is not None and SPENDING.get() is None else None
    try:
        with purpose(name):
            yield
    finally:
        if token is not None:
            SPENDING.reset(token)


def reservation_of(request: ModelRequest, prices: Prices | None) -> tuple[int, float | None]:
    """The worst case of ``request`` (whose ``max_tokens`` is set): its tokens, and its
    cost in the prices' currency (``None`` without prices)."""
    assert request.max_tokens is not None
    estimate = sum(map(message_tokens, request.messages)) + tools_tokens(request.tools)
    if request.system:
        estimate += text_tokens(request.system)
    tokens = estimate + request.max_tokens
    if prices is None:
        return tokens, None
    written = prices.input if prices.cache_creation is None else prices.cache_creation
    usd = (estimate * max(prices.input, written) + request.max_tokens * prices.output) / PER_TOKENS
    return tokens, usd


class _Ticket:
    __slots__ = ("day", "id", "prices", "tokens", "usd")

    def __init__(
        self, id: str, tokens: int, usd: float | None, prices: Prices | None, day: str | None
    ) -> None:
        self.id, self.tokens, self.usd, self.prices, self.day = id, tokens, usd, prices, day


class BudgetLedger:
    """The budget of one root session (see the module docs)."""

    def __init__(
        self,
        budget: Budget,
        root: Session,
        *,
        flush: Flush,
        catalog: Callable[[], ModelCatalog],
        reserve_output: int = DEFAULT_RESERVE_OUTPUT,
        day: DayLedger | None = None,
        cluster: Cluster | None = None,
    ) -> None:
        self._configured = budget
        self._day = day
        self._cluster = cluster
        self.root = root
        self._flush = flush
        self._catalog = catalog
        self._reserve_output = reserve_output
        self.spending = Spending(root.events.of_types(BUDGET_TYPES))
        self.turn = root.last_turn
        """The root's current (or last) turn: what per-turn limits count in."""
        self._close_abandoned()

    def _close_abandoned(self) -> None:
        """Settle, at their worst case, the cluster reservations of the root a dead
        process left open: no request of this ledger is under way yet, so whatever
        is open was reserved by a process that stopped before it settled. The
        request may have been sent and paid for, so it keeps counting in full; its
        settlement closes its row in the database."""
        for reserved in self.spending.unsettled():
            if reserved.cluster is None:
                continue
            settled = BudgetSettled(id=reserved.id, tokens=reserved.tokens, usd=reserved.usd)
            self.spending.settle(settled)
            self.root.append(settled)
            log.info(
                "session %s: reservation %s of a stopped process settled at its worst case",
                self.root.id,
                reserved.id,
            )

    @property
    def budget(self) -> Budget:
        """The limits now: the configured ones, as the root's ``session/config`` sets them."""
        return set_in(self._configured, self.root.settings.options) or Budget()

    @property
    def configured(self) -> Budget:
        """The limits the session was given (before its ``session/config``)."""
        return self._configured

    def describe(self) -> str:
        """One line for a person: what the session and its current turn spent of each
        limit (``budget: 0.1200 of 5.0000 USD this session; …``)."""
        budget = self.budget
        parts = []
        scopes: tuple[tuple[BudgetScope, str], ...] = (
            ("session", "this session"),
            ("turn", "this turn"),
        )
        for scope, where in scopes:
            for unit in _UNITS:
                limit = budget.limit(scope, unit)
                if limit is None:
                    continue
                spent = self.spending.spent(unit, turn=self.turn if scope == "turn" else None)
                parts.append(f"{amount_text(unit, spent)} of {amount_text(unit, limit)} {where}")
        daily: tuple[tuple[BudgetScope, str], ...] = (("day", "the host"), ("cluster", "all hosts"))
        day = [
            f"{amount_text(unit, limit)} a day for {whom}"
            for scope, whom in daily
            for unit in _UNITS
            if (limit := budget.limit(scope, unit)) is not None
        ]
        return "budget: " + "; ".join(parts + day or ["no limit"])

    def gate(self, requester: Session) -> SpendGate:
        """The gate of requests made for ``requester`` (the root or one of its children)."""
        return _Gate(self, requester)

    async def admit(self, requester: Session, request: ModelRequest, purpose: str) -> Admission:
        """Reserve ``request``'s worst case in the root's log (flushed), or refuse it."""
        if request.max_tokens is None:
            request = replace(request, max_tokens=self._reserve_output)
        prices = self._prices(request.model)
        budget = self.budget
        if budget.keeps_usd and prices is None:
            return Admission(request, refusal=self._unpriced(request.model), code=UNPRICED)
        if budget.keeps_cluster and self._cluster is None:
            return Admission(request, refusal=NO_CLUSTER_MESSAGE, code=NO_CLUSTER)
        tokens, usd = reservation_of(request, prices)
        receipt = self._overrun(budget, tokens, usd, request.model, requester)
        if receipt is not None:
            requester.append(receipt)
            log.info("session %s: %s", requester.id, receipt.describe())
            return Admission(request, refusal=receipt.describe())
        reserved = BudgetReserved(
            id=os.urandom(6).hex(),
            model=request.model,
            tokens=tokens,
            usd=usd,
            purpose=purpose,
            turn=self.turn,
            session=None if requester is self.root else requester.id,
            cluster=_claim(budget),
        )
        self.spending.reserve(reserved)
        day = self._day.today() if budget.keeps_day and self._day is not None else None
        if day is not None:
            refused = await self._reserve_day(day, budget, reserved, requester)
            if refused is not None:
                zero = None if usd is None else 0.0
                self.spending.settle(BudgetSettled(id=reserved.id, tokens=0, usd=zero))
                requester.append(refused)
                log.info("session %s: %s", requester.id, refused.describe())
                return Admission(request, refusal=refused.describe())
        self.root.append(reserved)
        await self._flush(self.root)
        if reserved.cluster is not None:
            refused = await self._cluster_refusal(budget, reserved, requester)
            if refused is not None:
                self._release(reserved, day)
                requester.append(refused)
                log.info("session %s: %s", requester.id, refused.describe())
                return Admission(request, refusal=refused.describe())
        return Admission(request, ticket=_Ticket(reserved.id, tokens, usd, prices, day))

    async def _cluster_refusal(
        self, budget: Budget, reserved: BudgetReserved, requester: Session
    ) -> BudgetExhausted | None:
        """The receipt when the database refused ``reserved`` (logged and committed
        now) against the cluster budget; ``None`` when it granted it."""
        assert self._cluster is not None
        outcome = await self._cluster.budget_outcome(self.root.id, reserved.id)
        if outcome is None:
            raise RuntimeError(
                f"reservation {reserved.id} of session {self.root.id} was committed "
                "without a cluster budget row"
            )
        if outcome.granted:
            return None
        return self._cluster_receipt(budget, outcome.day, reserved, requester)

    def _cluster_receipt(
        self, budget: Budget, totals: DayTotals, reserved: BudgetReserved, requester: Session
    ) -> BudgetExhausted:
        """The receipt of ``reserved``, refused by the cluster budget: the first limit it
        does not fit now (others may have settled since the refusal: then the first
        limit kept)."""
        kept = [unit for unit in _UNITS if budget.limit("cluster", unit) is not None]
        amounts = {"tokens": float(reserved.tokens), "usd": reserved.usd or 0.0}
        over = [
            unit
            for unit in kept
            if totals.of(unit) + amounts[unit] > (budget.limit("cluster", unit) or 0)
        ]
        unit = (over or kept)[0]
        return BudgetExhausted(
            budget="cluster",
            unit=unit,
            limit=float(budget.limit("cluster", unit) or 0),
            spent=round(totals.of(unit), 6),
            reserving=round(amounts[unit], 6),
            model=reserved.model,
            session=None if requester is self.root else self.root.id,
        )

    def _release(self, reserved: BudgetReserved, day: str | None) -> None:
        """Settle ``reserved``, refused after it was logged, at nothing (in the root's
        log, which closes its row in the database, and in the host's day)."""
        zero = None if reserved.usd is None else 0.0
        settled = BudgetSettled(id=reserved.id, tokens=0, usd=zero)
        self.spending.settle(settled)
        self.root.append(settled)
        if day is not None and self._day is not None:
            self._day.settle(day, {"id": reserved.id, "tokens": 0, "usd": zero})

    async def _reserve_day(
        self, day: str, budget: Budget, reserved: BudgetReserved, requester: Session
    ) -> BudgetExhausted | None:
        """Reserve in the host's ledger of ``day`` (under its lock); the receipt when
        the day's limit does not fit."""
        assert self._day is not None

        def fits(spent: DaySpent) -> bool:
            return self._day_overrun(budget, spent, reserved, requester) is None

        entry: dict[str, object] = {
            "id": reserved.id,
            "tokens": reserved.tokens,
            "usd": reserved.usd,
            "session": requester.id,
        }
        spent = await asyncio.to_thread(self._day.reserve, day, entry, fits)
        return None if spent is None else self._day_overrun(budget, spent, reserved, requester)

    def _day_overrun(
        self, budget: Budget, spent: DaySpent, reserved: BudgetReserved, requester: Session
    ) -> BudgetExhausted | None:
        for unit in _UNITS:
            limit = budget.limit("day", unit)
            reserving = float(reserved.tokens) if unit == "tokens" else reserved.usd
            if limit is None or reserving is None or spent.of(unit) + reserving <= limit:
                continue
            return BudgetExhausted(
                budget="day",
                unit=unit,
                limit=float(limit),
                spent=round(spent.of(unit), 6),
                reserving=round(reserving, 6),
                model=reserved.model,
                session=None if requester is self.root else self.root.id,
            )
        return None

    def settle(self, admission: Admission, usage: Usage | None, answered: bool) -> None:
        """Record what the admitted request used (see the module docs)."""
        ticket = admission.ticket
        if not isinstance(ticket, _Ticket):
            return
        if usage is not None:
            tokens = usage.input_tokens + usage.output_tokens
            prices = ticket.prices
            usd = None if prices is None else prices.cost(usage.figures())
        elif answered:
            tokens, usd = ticket.tokens, ticket.usd
        else:
            tokens, usd = 0, None if ticket.usd is None else 0.0
        settled = BudgetSettled(id=ticket.id, tokens=tokens, usd=usd)
        self.spending.settle(settled)
        self.root.append(settled)
        if ticket.day is not None and self._day is not None:
            self._day.settle(ticket.day, {"id": ticket.id, "tokens": tokens, "usd": usd})

    def _prices(self, model: str) -> Prices | None:
        entry = self._catalog().get(model)
        prices = None if entry is None else entry.prices
        return prices if prices is not None and prices.currency == "USD" else None

    def _unpriced(self, model: str) -> str:
        return (
            f"{model} has no prices in USD, so the budget in USD cannot be kept "
            "(set its prices in the llm row's models, see docs/models.md)"
        )

    def _overrun(
        self, budget: Budget, tokens: int, usd: float | None, model: str, requester: Session
    ) -> BudgetExhausted | None:
        """The receipt of the first limit the reservation would pass, else ``None``."""
        for scope in _SCOPES:
            for unit in _UNITS:
                limit = budget.limit(scope, unit)
                reserving = float(tokens) if unit == "tokens" else usd
                if limit is None or reserving is None:
                    continue
                turn = self.turn if scope == "turn" else None
                spent = self.spending.spent(unit, turn=turn)
                if spent + reserving > limit:
                    return BudgetExhausted(
                        budget=scope,
                        unit=unit,
                        limit=float(limit),
                        spent=round(spent, 6),
                        reserving=round(reserving, 6),
                        model=model,
                        session=None if requester is self.root else self.root.id,
                    )
        return None


def _claim(budget: Budget) -> ClusterClaim | None:
    """The cluster claim of a reservation under ``budget`` today (``None``: no cluster
    limit)."""
    if not budget.keeps_cluster:
        return None
    from tether.loop.day_budget import today

    return ClusterClaim(day=today(), usd=budget.cluster_day_usd, tokens=budget.cluster_day_tokens)


class _Gate:
    """A ledger's :class:`~tether.llm.spend.SpendGate` for one requesting session."""

    __slots__ = ("_ledger", "_requester")

    def __init__(self, ledger: BudgetLedger, requester: Session) -> None:
        self._ledger = ledger
        self._requester = requester

    async def admit(self, request: ModelRequest, purpose: str) -> Admission:
        return await self._ledger.admit(self._requester, request, purpose)

    def settle(self, admission: Admission, usage: Usage | None, answered: bool) -> None:
        self._ledger.settle(admission, usage, answered)


class BudgetBook:
    """The ledgers of an agent loop's sessions: which one each agent draws on.

    A root agent with a budget has its own; a child draws on its delegator's
    (and so on up to the root). An agent with neither draws on none.
    """

    def __init__(
        self,
        *,
        flush: Flush,
        catalog: Callable[[], ModelCatalog],
        reserve_output: int = DEFAULT_RESERVE_OUTPUT,
        day: DayLedger | None = None,
        cluster: Callable[[], Cluster | None] = lambda: None,
    ) -> None:
        self._flush = flush
        self._catalog = catalog
        self._reserve_output = reserve_output
        self._day = day
        """The host's per-day ledger (:mod:`tether.loop.day_budget`)."""
        self._cluster = cluster
        """The hosts' cluster, when sessions are stored in PostgreSQL (the cluster budget)."""
        self._held: weakref.WeakKeyDictionary[AgentDriver, BudgetLedger] = (
            weakref.WeakKeyDictionary()
        )
        self._by_id: weakref.WeakValueDictionary[str, BudgetLedger] = weakref.WeakValueDictionary()

    def ledger(self, driver: AgentDriver) -> BudgetLedger | None:
        """The ledger ``driver``'s requests draw on, made on first use; ``None``: none."""
        ledger = self._held.get(driver)
        if ledger is not None:
            return ledger
        delegator = driver.session.header.delegator
        ledger = None if delegator is None else self._by_id.get(delegator)
        budget = set_in(driver.options.budget, driver.session.settings.options)
        if ledger is None and budget is not None and budget.limits:
            ledger = BudgetLedger(
                driver.options.budget or Budget(),
                driver.session,
                flush=self._flush,
                catalog=self._catalog,
                reserve_output=self._reserve_output,
                day=self._day,
                cluster=self._cluster() if budget.keeps_cluster else None,
            )
        if ledger is not None:
            self._held[driver] = ledger
            self._by_id[driver.id] = ledger
        return ledger

    def of(self, session_id: str) -> BudgetLedger | None:
        """The ledger the live agent ``session_id`` draws on, if any."""
        return self._by_id.get(session_id)

    def gate_of(self, session: Session) -> SpendGate | None:
        """The gate of requests made for the live agent of ``session``; ``None``: no budget."""
        ledger = self._by_id.get(session.id)
        return None if ledger is None else ledger.gate(session)
