"""After ``authenticate``: ``tether acp`` uses the key just signed in, without a restart.

A ``tether acp`` started with no model configured and no key runs the
offline model (the fallback of ``docs/models.md``). When the person then
signs in (``tether auth login deepseek``, in the editor's terminal or any
other) and the editor calls ``authenticate``, :func:`use_signed_in_model`
makes the sessions created from then on use the model a start would now
choose:

1. the choice is made again (:func:`tether.cli.boot.model_settings`), the
   configuration, the environment and the stored keys read anew;
2. the rows it needs (the adapter plugins, the key in its provider's config,
   the retry policy) are added to the running composition, or merged into
   the rows it has — a row whose config that changes (a new key) is
   restarted, and requests in flight through it fail; the agent loop's row
   is left as it is, so no session is restarted;
3. when a key made the choice — nothing names a model: not ``--model``, not
   ``TETHER_MODEL``, not the configuration — the bridge creates every later
   session on that model.

Sessions already open, and sessions loaded later, keep their own model (with
the key of step 2 for their next request). A model that is configured — the
offline one too (``--model offline``, ``TETHER_MODEL=offline``, ``model:
offline`` in ``tether.yml``) — is never replaced; step 2 still gives its
provider a key signed in again.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tether.cli.boot import composed, configured_model, model_settings

if TYPE_CHECKING:
    from tether.acp.bridge import Bridge
    from tether.host import Tether

__all__ = ["ModelSwitchError", "use_signed_in_model"]

CHOSEN_BY_A_KEY = ("DEEPSEEK_API_KEY", "stored key")
"""The sources of a model choice made by a key, not by a configured model."""


class ModelSwitchError(Exception):
    """The model the key makes usable could not be set up; the message says why."""


async def use_signed_in_model(
    tether: Tether, bridge: Bridge, args: argparse.Namespace
) -> str | None:
    """Set ``tether`` up for the model a start with ``args`` would choose now, and
    make ``bridge`` create new sessions on it when a key chose it (see the module
    docs); returns that model, or ``None`` when new sessions keep the model they had.

    Raises:
        ModelSwitchError: the choice cannot work (a malformed ``TETHER_BASE_URL``,
            an unreadable configuration), or the rows it needs did not start;
            new sessions keep the model they had.
    """
    from tether.cli.boot import UsageError
    from tether.llm.service import LLM
    from tether.runtime.compose import parse_composition
    from tether.runtime.errors import CompositionError

    try:
        document = composed(args, with_model=False)
        settings = model_settings(
            document, args.model or configured_model(document), getattr(args, "base_url", None)
        )
    except (UsageError, CompositionError) as exc:
        raise ModelSwitchError(str(exc)) from None
    if settings.source == "default" or bridge.closing:
        return None  # Still no key (authenticate found one: it was removed since).
    started = tether.document
    assert isinstance(started, Mapping), "tether acp starts from a composed document"
    document = settings.with_rows(started)
    report = await tether.composer.apply(parse_composition(document, source="sign-in"))
    added = {repr(row) for row in (*report.mounted, *report.remounted)}
    problems = [problem.message for problem in report.problems if problem.row in added]
    llm = tether.runtime.ctx.get(LLM)
    if not problems and (llm is None or settings.provider not in llm.providers()):
        problems.append(f"no provider {settings.provider!r} is registered")
    if problems:
        raise ModelSwitchError(f"model {settings.model!r}: {'; '.join(problems)}")
    if settings.source not in CHOSEN_BY_A_KEY:
        return None
    bridge.use_model(settings.model)
    return settings.model
