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
from typing import NamedTuple, TypeVar

from tether.acp.errors import BridgeError
from tether.acp.permissions import MODE_DESCRIPTIONS, Mode
from tether.llm.catalog import ModelCatalog
from tether.session.budget import BUDGET_USD_OPTION, NO_LIMIT, parse_usd
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

OPTION_IDS = (MODEL_OPTION, MODE_OPTION, SANDBOX_OPTION, BUDGET_USD_OPTION)

BUDGET_CHOICES = ("1", "5", "20", "100")
"""The limits in US dollars the ``budget_usd`` option offers beside ``off`` and the current one."""

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


def budget_option(current: str) -> dict[str, object]:
    """The ``budget_usd`` option (wire JSON), set to ``current`` (an amount or ``off``)."""
    values = dict.fromkeys((NO_LIMIT, current, *BUDGET_CHOICES))
    return {
        "id": BUDGET_USD_OPTION,
        "name": "Budget (USD)",
        "description": "What this session's model requests may spend, child agents "
        "included; a request that would pass it is not sent.",
        "type": "select",
        "currentValue": current,
        "options": [
            {"value": value, "name": "No limit" if value == NO_LIMIT else f"{value} USD"}
            for value in values
        ],
    }


def check_budget(value: str, priced: bool) -> str:
    """``value`` as a ``budget_usd`` value; ``priced``: the session's model has USD prices.

    Raises:
        UnknownOptionError: it is neither an amount nor ``off``, or an amount for a
            model without prices.
    """
    try:
        amount = parse_usd(value)
    except ValueError as exc:
        raise UnknownOptionError(str(exc)) from None
    if amount is not None and not priced:
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
    budget: str = NO_LIMIT,
) -> list[dict[str, object]]:
    """The ``configOptions`` of a session now (wire JSON); the sandbox's when it has one."""
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
        budget_option(budget),
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
