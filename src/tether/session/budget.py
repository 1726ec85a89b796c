"""Spend budgets: the limits, and the reservations and settlements that keep them.

A :class:`Budget` limits what the model requests of one session may spend, in
US dollars and/or tokens, over the whole session and within one turn. It is
enforced *before* spending: each request reserves its worst case first, and
the reservation is logged (and flushed) before the request is sent, so a
crash never forgets spending. After the answer, the reservation is settled
with the real usage. Three event types hold it, all in the core vocabulary
and none model-visible:

==========================  ====================================================
type                        data
==========================  ====================================================
``budget/reserved``         ``{id, model, tokens, usd, purpose, turn, session,
                            cluster}``: a request's worst case is reserved
                            (``usd`` is ``null`` when no USD limit is kept;
                            ``session`` is the requesting session's id when it
                            is not the one logging: a child agent's, drawing
                            on its root; ``cluster``, the day and limits of
                            the cluster budget it is reserved against).
``budget/settled``          ``{id, tokens, usd}``: reservation ``id`` is settled
                            at what the request really used.
``budget/exhausted``        ``{budget, unit, limit, spent, reserving, model,
                            session}``: the receipt of a request that was not
                            sent because its reservation did not fit.
==========================  ====================================================

:class:`Spending` folds a log's reservations into what is spent: settled
amounts plus every reservation not settled (a request whose answer was never
recorded counts at its worst case).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Annotated, ClassVar, Literal, get_args

import msgspec
from msgspec import Meta

from tether.runtime.schema import FieldError, Schema
from tether.session.errors import EventFormatError
from tether.session.events import Event
from tether.session.fields import check_choice, check_id, check_str
from tether.session.vocabulary import EventStruct

__all__ = [
    "BUDGET_OPTIONS",
    "BUDGET_PAYLOADS",
    "BUDGET_TYPES",
    "BUDGET_USD_OPTION",
    "NO_LIMIT",
    "Budget",
    "BudgetExhausted",
    "BudgetReserved",
    "BudgetScope",
    "BudgetSettled",
    "BudgetUnit",
    "ClusterClaim",
    "Spending",
    "amount_text",
    "exhausted_notice",
    "parse_limit",
    "set_in",
]

BudgetScope = Literal["session", "turn", "day", "cluster"]
BudgetUnit = Literal["usd", "tokens"]
_SCOPES: tuple[str, ...] = get_args(BudgetScope)
_UNITS: tuple[str, ...] = get_args(BudgetUnit)


class Budget(Schema, frozen=True, omit_defaults=True):
    """What a session's model requests may spend; an unset limit is no limit.

    ``usd`` and ``tokens`` cover the whole session (its child agents and
    internal model calls included), ``turn_usd`` and ``turn_tokens`` one turn
    of it, ``day_usd`` and ``day_tokens`` every session of the host in one UTC
    day (:mod:`tether.loop.day_budget`), ``cluster_day_usd`` and
    ``cluster_day_tokens`` every session of every host of one PostgreSQL
    database in one UTC day. Tokens count input and output.
    """

    usd: Annotated[float, Meta(gt=0, description="US dollars per session")] | None = None
    tokens: Annotated[int, Meta(ge=1, description="tokens per session")] | None = None
    turn_usd: Annotated[float, Meta(gt=0, description="US dollars per turn")] | None = None
    turn_tokens: Annotated[int, Meta(ge=1, description="tokens per turn")] | None = None
    day_usd: (
        Annotated[float, Meta(gt=0, description="US dollars per UTC day, host-wide")] | None
    ) = None
    day_tokens: Annotated[int, Meta(ge=1, description="tokens per UTC day, host-wide")] | None = (
        None
    )
    cluster_day_usd: (
        Annotated[float, Meta(gt=0, description="US dollars per UTC day, all hosts of a database")]
        | None
    ) = None
    cluster_day_tokens: (
        Annotated[int, Meta(ge=1, description="tokens per UTC day, all hosts of a database")] | None
    ) = None

    def __post_init__(self) -> None:
        for name in ("usd", "turn_usd", "day_usd", "cluster_day_usd"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise FieldError((name,), f"must be a finite amount, got {value!r}")

    @property
    def keeps_usd(self) -> bool:
        """Whether a limit in US dollars is set (requests then need prices)."""
        return any(
            limit is not None
            for limit in (self.usd, self.turn_usd, self.day_usd, self.cluster_day_usd)
        )

    @property
    def limits(self) -> bool:
        """Whether any limit is set."""
        return (
            self.keeps_usd
            or self.keeps_day
            or self.keeps_cluster
            or self.tokens is not None
            or (self.turn_tokens is not None)
        )

    @property
    def keeps_day(self) -> bool:
        """Whether a per-day limit is set."""
        return self.day_usd is not None or self.day_tokens is not None

    @property
    def keeps_cluster(self) -> bool:
        """Whether a per-day limit for all hosts of the database is set."""
        return self.cluster_day_usd is not None or self.cluster_day_tokens is not None

    def limit(self, scope: BudgetScope, unit: BudgetUnit) -> float | None:
        """The limit of ``scope`` in ``unit``, ``None`` when unset."""
        if scope == "session":
            return self.usd if unit == "usd" else self.tokens
        if scope == "day":
            return self.day_usd if unit == "usd" else self.day_tokens
        if scope == "cluster":
            return self.cluster_day_usd if unit == "usd" else self.cluster_day_tokens
        return self.turn_usd if unit == "usd" else self.turn_tokens


BUDGET_USD_OPTION = "budget_usd"
"""The ``session/config`` option that sets a session's limit in US dollars over the
configured one (an editor's config option): an amount, or :data:`NO_LIMIT`."""

BUDGET_OPTIONS: Mapping[str, tuple[str, BudgetUnit]] = MappingProxyType(
    {
        BUDGET_USD_OPTION: ("usd", "usd"),
        "budget_turn_usd": ("turn_usd", "usd"),
        "budget_tokens": ("tokens", "tokens"),
        "budget_turn_tokens": ("turn_tokens", "tokens"),
    }
)
"""The ``session/config`` options that set a limit of :class:`Budget` over the configured
one (an editor's config options), each with the field it sets and its unit; each takes
an amount or :data:`NO_LIMIT`."""

NO_LIMIT = "off"
"""The value of a budget option (:data:`BUDGET_OPTIONS`) that lifts its limit."""


def parse_limit(option: str, value: str) -> float | int | None:
    """A value of budget option ``option`` (one of :data:`BUDGET_OPTIONS`) as a limit: the
    amount, ``None`` for :data:`NO_LIMIT`.

    Raises:
        ValueError: neither (the message says what is expected).
    """
    if value == NO_LIMIT:
        return None
    if BUDGET_OPTIONS[option][1] == "tokens":
        tokens = int(value) if value.isascii() and value.isdigit() else 0
        if tokens < 1:
            raise ValueError(
                f"a budget in tokens is a whole number more than 0 or {NO_LIMIT!r}, not {value!r}"
            )
        return tokens
    try:
        amount = float(value)
    except ValueError:
        amount = math.nan
    if not 0 < amount < math.inf:
        raise ValueError(f"a budget in USD is an amount more than 0 or {NO_LIMIT!r}, not {value!r}")
    return amount


def set_in(budget: Budget | None, options: Mapping[str, str]) -> Budget | None:
    """``budget`` as a session's ``session/config`` options set it (see
    :data:`BUDGET_OPTIONS`); a value that cannot be read leaves its limit as it is."""
    changes: dict[str, float | int | None] = {}
    for option, (field, _) in BUDGET_OPTIONS.items():
        value = options.get(option)
        if value is None:
            continue
        try:
            changes[field] = parse_limit(option, value)
        except ValueError:
            continue
    if not changes:
        return budget
    return msgspec.structs.replace(budget or Budget(), **changes)


def _check_amounts(type_name: str, tokens: object, usd: object) -> None:
    if type(tokens) is not int or tokens < 0:
        raise EventFormatError(f"{type_name}: tokens must be an int >= 0, got {tokens!r}")
    if usd is not None and (not isinstance(usd, int | float) or not 0 <= usd < math.inf):
        raise EventFormatError(f"{type_name}: usd must be a number >= 0 or null, got {usd!r}")


class ClusterClaim(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The cluster budget a reservation is made against: the UTC day, and the limits of
    the host that reserved (``None``: no limit in that unit). The database grants the
    reservation, or refuses it, in the transaction that stores it."""

    day: str
    usd: float | None = None
    tokens: int | None = None

    def check(self, type_name: str) -> None:
        """Raise :class:`EventFormatError` when a field is out of range."""
        if type(self.day) is not str or len(self.day) != 10:
            raise EventFormatError(f"{type_name}: cluster.day must be YYYY-MM-DD, got {self.day!r}")
        if self.usd is not None and not 0 < self.usd < math.inf:
            raise EventFormatError(f"{type_name}: cluster.usd must be > 0, got {self.usd!r}")
        if self.tokens is not None and (type(self.tokens) is not int or self.tokens < 1):
            raise EventFormatError(f"{type_name}: cluster.tokens must be >= 1, got {self.tokens!r}")


class BudgetReserved(EventStruct, frozen=True):
    """``budget/reserved``: the worst case of one request, before it is sent."""

    type: ClassVar[str] = "budget/reserved"

    id: str
    model: str
    tokens: int
    usd: float | None
    purpose: str
    turn: int
    session: str | None = None
    cluster: ClusterClaim | None = None

    def __post_init__(self) -> None:
        check_id(self.type, "id", self.id)
        check_id(self.type, "model", self.model)
        check_id(self.type, "purpose", self.purpose)
        _check_amounts(self.type, self.tokens, self.usd)
        if type(self.turn) is not int or self.turn < 0:
            raise EventFormatError(f"{self.type}: turn must be an int >= 0, got {self.turn!r}")
        if self.session is not None:
            check_id(self.type, "session", self.session)
        if self.cluster is not None:
            self.cluster.check(self.type)


class BudgetSettled(EventStruct, frozen=True):
    """``budget/settled``: reservation ``id`` at what its request really used."""

    type: ClassVar[str] = "budget/settled"

    id: str
    tokens: int
    usd: float | None

    def __post_init__(self) -> None:
        check_id(self.type, "id", self.id)
        _check_amounts(self.type, self.tokens, self.usd)


class BudgetExhausted(EventStruct, frozen=True):
    """``budget/exhausted``: a request was not sent; its reservation did not fit."""

    type: ClassVar[str] = "budget/exhausted"

    budget: BudgetScope
    unit: BudgetUnit
    limit: float
    spent: float
    reserving: float
    model: str
    session: str | None = None

    def __post_init__(self) -> None:
        check_choice(self.type, "budget", self.budget, _SCOPES)
        check_choice(self.type, "unit", self.unit, _UNITS)
        for name in ("limit", "spent", "reserving"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value < 0:
                raise EventFormatError(f"{self.type}: {name} must be a number >= 0, got {value!r}")
        check_str(self.type, "model", self.model)
        if self.session is not None:
            check_id(self.type, "session", self.session)

    def describe(self) -> str:
        """One line for a person: which budget ran out, spent and reserved."""
        return exhausted_notice(self)


def amount_text(unit: str, value: float) -> str:
    """``value`` in ``unit`` for a person: ``0.1200 USD``, ``12,000 tokens``."""
    return f"{value:.4f} USD" if unit == "usd" else f"{int(value):,} tokens"


def exhausted_notice(receipt: BudgetExhausted) -> str:
    """The one line the front ends show for a ``budget/exhausted`` receipt."""
    unit = receipt.unit
    whose = {
        "session": "this session's",
        "turn": "this turn's",
        "day": "today's",
        "cluster": "all hosts' daily",
    }[receipt.budget]
    return (
        f"budget exhausted: {amount_text(unit, receipt.spent)} of {whose} "
        f"{amount_text(unit, receipt.limit)} spent; the next request to {receipt.model} "
        f"would reserve {amount_text(unit, receipt.reserving)}, so it was not sent"
    )


BUDGET_PAYLOADS: tuple[type[EventStruct], ...] = (BudgetReserved, BudgetSettled, BudgetExhausted)
"""The payload classes of this module, all in the core vocabulary."""

BUDGET_TYPES = frozenset(cls.type for cls in BUDGET_PAYLOADS)


class _Open(msgspec.Struct, frozen=True):
    tokens: int
    usd: float
    turn: int
    reserved: BudgetReserved


class Spending:
    """What a log's reservations say is spent: settled plus still reserved.

    :meth:`spent` answers for the session, or for one turn (the turn numbers
    reservations carry). Fold events with :meth:`advance`, in log order.
    """

    __slots__ = ("_open", "_tokens", "_turn", "_turn_no", "_usd")

    def __init__(self, events: Iterable[Event] = ()) -> None:
        self._open: dict[str, _Open] = {}
        self._tokens = 0
        self._usd = 0.0
        self._turn_no = -1
        self._turn: list[float] = [0, 0.0]
        for event in events:
            self.advance(event)

    def advance(self, event: Event) -> bool:
        """Fold ``event`` in; whether it was a reservation or a settlement."""
        if event.type not in BUDGET_TYPES:
            return False
        payload = event.payload
        if isinstance(payload, BudgetReserved):
            self.reserve(payload)
        elif isinstance(payload, BudgetSettled):
            self.settle(payload)
        else:
            return False
        return True

    def reserve(self, reserved: BudgetReserved) -> None:
        """Count ``reserved`` as spent until it is settled."""
        entry = _Open(reserved.tokens, reserved.usd or 0.0, reserved.turn, reserved)
        self._open[reserved.id] = entry
        self._add(entry.turn, entry.tokens, entry.usd)

    def settle(self, settled: BudgetSettled) -> None:
        """Replace the reservation ``settled`` names by what was really used."""
        entry = self._open.pop(settled.id, None)
        if entry is None:
            return
        self._add(entry.turn, settled.tokens - entry.tokens, (settled.usd or 0.0) - entry.usd)

    def unsettled(self) -> list[BudgetReserved]:
        """The reservations not settled yet, oldest first."""
        return [entry.reserved for entry in self._open.values()]

    def _add(self, turn: int, tokens: int, usd: float) -> None:
        self._tokens += tokens
        self._usd += usd
        if turn != self._turn_no:
            if turn < self._turn_no:
                return  # a late settlement of an earlier turn: the session total is enough
            self._turn_no, self._turn = turn, [0, 0.0]
        self._turn[0] += tokens
        self._turn[1] += usd

    def spent(self, unit: BudgetUnit, *, turn: int | None = None) -> float:
        """Spent in ``unit`` by the session, or by turn ``turn`` (0 for none yet)."""
        if turn is None:
            return self._usd if unit == "usd" else float(self._tokens)
        if turn != self._turn_no:
            return 0.0
        return self._turn[1] if unit == "usd" else float(self._turn[0])
