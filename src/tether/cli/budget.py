"""The spend budget on the command line: its flags, and the checks before anything runs.

``--max-budget-usd``, ``--max-turn-usd``, ``--max-day-usd``,
``--max-cluster-day-usd`` and their ``-tokens`` forms set the ``budget`` of
the composition's ``agent_loop`` row (over what ``tether.yml`` sets, limit
by limit) for the sessions the command runs. A budget in US dollars needs
the prices of the model: without them the command refuses to start, in one
line (exit 2). See docs/budget.md.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

from tether.cli.boot import AGENT_LOOP_ROW, BUDGET_FLAGS, UsageError, composed_model

if TYPE_CHECKING:
    from tether.host import Tether

__all__ = ["FLAGS", "check_budget", "with_budget"]

FLAGS: Mapping[str, str] = dict(
    zip(
        BUDGET_FLAGS,
        (
            "usd",
            "turn_usd",
            "day_usd",
            "tokens",
            "turn_tokens",
            "day_tokens",
            "cluster_day_usd",
            "cluster_day_tokens",
        ),
        strict=True,
    )
)
"""Each flag's attribute, and the budget limit it sets."""


def with_budget(document: Mapping[str, object], args: argparse.Namespace) -> Mapping[str, object]:
    """``document`` with the budget flags of ``args`` set on its ``agent_loop`` row
    (``document`` itself is not changed); as it is when no flag is given."""
    limits = {
        limit: getattr(args, flag)
        for flag, limit in FLAGS.items()
        if getattr(args, flag, None) is not None
    }
    if not limits:
        return document
    rows = document.get("plugins")
    if not isinstance(rows, list):
        return document
    copied = [dict(row) if isinstance(row, Mapping) else row for row in rows]
    for row in copied:
        if isinstance(row, dict) and row.get("id") == AGENT_LOOP_ROW:
            config = dict(cast("Mapping[str, object]", row.get("config") or {}))
            budget = config.get("budget")
            config["budget"] = {**(budget if isinstance(budget, Mapping) else {}), **limits}
            row["config"] = config
    return {**document, "plugins": copied}


def check_budget(tether: Tether) -> None:
    """After boot: a budget in US dollars needs the USD prices of the composed model.

    Raises:
        UsageError: it has none (the message says where to set them).
    """
    from tether.llm.service import LLM

    if not tether.has_row(AGENT_LOOP_ROW):
        return
    loop = tether.composer.row(AGENT_LOOP_ROW).fiber
    budget = None if loop is None or loop.config is None else loop.config.budget
    llm = tether.runtime.ctx.get(LLM)
    model = composed_model(tether)
    if budget is None or not budget.keeps_usd or llm is None or model is None:
        return
    entry = llm.catalog.get(model)
    prices = None if entry is None else entry.prices
    if prices is None or prices.currency != "USD":
        raise UsageError(
            f"a budget in USD needs the prices of {model}, and none are set in USD "
            "(set them under the llm row's models, see docs/models.md; or use a token budget)"
        )
