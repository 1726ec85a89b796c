"""A session's configuration options (ACP ``configOptions``): the model and the mode.

================  ===========  ================================================
option id         category     values
================  ===========  ================================================
``model``         ``model``    the model the agent loop was configured with,
                               the session's current model, then every model
                               of the settings' catalog (:mod:`tether.llm.catalog`)
``mode``          ``mode``     ``ask``, ``auto`` (:class:`~tether.acp.permissions.Mode`)
``sandbox``       (none)       ``read-only``, ``workspace-write``, ``full-access``
                               (:class:`~tether.shell.sandbox.SandboxMode`), offered
                               when the ``sandbox`` service is there; its
                               description names the network policy
``budget_usd``    (none)       ``off``, the session's current limit, then
                               :data:`BUDGET_CHOICES` (US dollars the session
                               may spend; see ``docs/budget.md``)
``budget_turn_usd``  (none)    the same for US dollars a turn may spend
``budget_tokens``    (none)    the same for tokens the session may spend
``budget_turn_tokens`` (none)  the same for tokens a turn may spend
================  ===========  ================================================

All are ``select`` options. The sandbox and budget options have no category:
the protocol reserves the names without ``_`` and clients' SDKs accept only
those. A value outside the listed ones is refused
(:class:`UnknownOptionError`, with the choices in its message); a model the
provider then rejects fails the next prompt, and the session stays usable.
Options are built as the JSON the wire carries, like the updates.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import NamedTuple, TypeVar

from tether.acp.errors import BridgeError
from tether.acp.permissions import MODE_DESCRIPTIONS, Mode
from tether.llm.catalog import ModelCatalog
from tether.session.budget import BUDGET_OPTIONS, NO_LIMIT, parse_limit
from tether.session.settings import MODE_OPTION, MODEL_OPTION, SANDBOX_OPTION
from tether.shell.sandbox import SandboxMode

__all__ = [
    "BUDGET_CHOICES",
    "OPTION_IDS",
    "UnknownOptionError",
    "budget_option",
    "check_budget",
    "check_model",
    "config_options",
    "model_choices",
    "parse_mode",
    "parse_sandbox",
]

OPTION_IDS = (MODEL_OPTION, MODE_OPTION, SANDBOX_OPTION, *BUDGET_OPTIONS)

BUDGET_CHOICES: dict[str, tuple[str, ...]] = {
    "budget_usd": ("1", "5", "20", "100"),
    "budget_turn_usd": ("0.1", "0.5", "1", "5"),
    "budget_tokens": ("100000", "1000000", "10000000"),
    "budget_turn_tokens": ("50000", "200000", "1000000"),
}
"""The limits each budget option offers beside ``off`` and the current one."""

_BUDGET_TEXT = {
    "budget_usd": ("Budget (USD)", "What this session's model requests may spend"),
    "budget_turn_usd": ("Turn budget (USD)", "What one turn's model requests may spend"),
    "budget_tokens": ("Budget (tokens)", "The tokens this session's model requests may use"),
    "budget_turn_tokens": ("Turn budget (tokens)", "The tokens one turn's model requests may use"),
}
"""Each budget option's name and the start of its description."""

_Modes = TypeVar("_Modes", bound=enum.StrEnum)

SANDBOX_DESCRIPTIONS = {
    SandboxMode.READ_ONLY: ("Read-only", "Commands write nothing but their temp dir."),
    SandboxMode.WORKSPACE_WRITE: (
        "Workspace write",
        "Commands write the workspace; git hooks and agent settings stay read-only.",
    ),
    SandboxMode.FULL_ACCESS: ("Full access", "No sandbox: commands do what the user may."),
}


class SandboxShown(NamedTuple):
    """The sandbox of a session as its option shows it: the mode, the network in words."""

    mode: SandboxMode
    network: str


class UnknownOptionError(BridgeError):
    """A configuration option or a value the session does not offer."""


def model_choices(catalog: ModelCatalog, configured: str, current: str) -> tuple[str, ...]:
    """The models a session offers: the configured one, the current one, the catalog's."""
    return tuple(dict.fromkeys((configured, current, *catalog.models)))


def budget_option(option: str, current: str) -> dict[str, object]:
    """Budget option ``option`` (wire JSON; one of :data:`~tether.session.budget.BUDGET_OPTIONS`),
    set to ``current`` (an amount or ``off``)."""
    values = dict.fromkeys((NO_LIMIT, current, *BUDGET_CHOICES[option]))
    name, does = _BUDGET_TEXT[option]
    return {
        "id": option,
        "name": name,
        "description": f"{does}, child agents included; a request that would pass it is not sent.",
        "type": "select",
        "currentValue": current,
        "options": [{"value": value, "name": _amount_name(option, value)} for value in values],
    }


def _amount_name(option: str, value: str) -> str:
    """How a value of budget option ``option`` is named: ``No limit``, ``5 USD``,
    ``1,000,000 tokens``."""
    if value == NO_LIMIT:
        return "No limit"
    if BUDGET_OPTIONS[option][1] == "usd":
        return f"{value} USD"
    return f"{int(value):,} tokens" if value.isdigit() else f"{value} tokens"


def check_budget(option: str, value: str, priced: bool) -> str:
    """``value`` as a value of budget option ``option``; ``priced``: the session's model
    has USD prices.

    Raises:
        UnknownOptionError: it is neither an amount nor ``off``, or an amount in US
            dollars for a model without prices.
    """
    try:
        amount = parse_limit(option, value)
    except ValueError as exc:
        raise UnknownOptionError(str(exc)) from None
    if amount is not None and BUDGET_OPTIONS[option][1] == "usd" and not priced:
        raise UnknownOptionError(
            "a budget in USD needs the prices of the session's model, and none are set "
            "(see docs/models.md)"
        )
    return value


def config_options(
    catalog: ModelCatalog,
    *,
    configured: str,
    model: str,
    mode: Mode,
    sandbox: SandboxShown | None = None,
    budgets: Mapping[str, str] | None = None,
) -> list[dict[str, object]]:
    """The ``configOptions`` of a session now (wire JSON); the sandbox's when it has one;
    ``budgets``: each budget option's current value (``off`` when missing)."""
    models = []
    for choice in model_choices(catalog, configured, model):
        entry = catalog.get(choice)
        option: dict[str, object] = {"value": choice, "name": catalog.label(choice)}
        if entry is not None and entry.description:
            option["description"] = entry.description
        models.append(option)
    return [
        {
            "id": MODEL_OPTION,
            "name": "Model",
            "description": "The model of the next request on.",
            "category": "model",
            "type": "select",
            "currentValue": model,
            "options": models,
        },
        {
            "id": MODE_OPTION,
            "name": "Mode",
            "description": "When tool calls need the user's approval.",
            "category": "mode",
            "type": "select",
            "currentValue": mode.value,
            "options": [
                {"value": each.value, "name": label, "description": description}
                for each, (label, description) in MODE_DESCRIPTIONS.items()
            ],
        },
        *([] if sandbox is None else [sandbox_option(sandbox)]),
        *(budget_option(each, (budgets or {}).get(each, NO_LIMIT)) for each in BUDGET_OPTIONS),
    ]


def sandbox_option(sandbox: SandboxShown) -> dict[str, object]:
    """The ``sandbox`` option (wire JSON): the mode of the session's next processes."""
    return {
        "id": SANDBOX_OPTION,
        "name": "Sandbox",
        "description": f"What the next commands may write and reach ({sandbox.network}).",
        "type": "select",
        "currentValue": sandbox.mode.value,
        "options": [
            {"value": each.value, "name": label, "description": description}
            for each, (label, description) in SANDBOX_DESCRIPTIONS.items()
        ],
    }


def parse_sandbox(value: str) -> SandboxMode:
    """The sandbox mode named ``value``.

    Raises:
        UnknownOptionError: there is none; the message lists the modes.
    """
    return _named(SandboxMode, value, "sandbox mode")


def parse_mode(value: str) -> Mode:
    """The mode named ``value``.

    Raises:
        UnknownOptionError: there is none; the message lists the modes.
    """
    return _named(Mode, value, "mode")


def _named(kind: type[_Modes], value: str, what: str) -> _Modes:
    """The member of ``kind`` whose value is ``value``; else a refusal listing them."""
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(repr(m.value) for m in kind)
        raise UnknownOptionError(f"unknown {what} {value!r}; the modes are {known}") from None


def check_model(value: str, choices: tuple[str, ...]) -> str:
    """``value`` if the session offers that model.

    Raises:
        UnknownOptionError: it does not; the message lists the models offered.
    """
    if value not in choices:
        listed = ", ".join(repr(choice) for choice in choices)
        raise UnknownOptionError(
            f"unknown model {value!r}; this session offers {listed} "
            "(add models to the llm settings, see docs/models.md)"
        )
    return value
