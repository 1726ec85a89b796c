"""What chat's ``/model``, ``/clear`` and ``/new`` do to the conversation.

``/model M`` logs ``session/config`` ``model`` (as an editor's switch does):
the next request goes to ``M``, and a later resume keeps it. ``M`` is any
model reference tether can reach (``provider:model``, ``docs/models.md``):
the provider's rows are composed for it first, with its key from the
environment, and a model that cannot be reached is refused in one line
with the reason, the session unchanged. ``/clear`` logs ``history/cleared``:
later requests start from an empty history while the earlier turns stay in
the log. ``/new`` opens a new session in the same chat, on the model the
chat was using.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.agent import AgentStatus
from tether.agent.commands import CommandError

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.host import Tether
    from tether.session.model import ModelChoice

__all__ = ["clear_history", "go_on_with", "list_models", "switch_model"]


def list_models(tether: Tether, agent: Agent) -> str:
    """``/model`` alone: the model in use, and the models the settings describe."""
    from tether.cli.boot import session_choice
    from tether.llm.service import LLM

    current = session_choice(tether, agent.session).model
    llm = tether.runtime.ctx.get(LLM)
    known = [model for model in (llm.catalog.models if llm is not None else ()) if model != current]
    lines = [f"* {current} (the next request's)", *(f"- {model}" for model in known)]
    lines.append("/model PROVIDER:MODEL switches the next request to any model (docs/models.md)")
    return "\n".join(lines)


async def switch_model(tether: Tether, agent: Agent, model: str) -> str:
    """``/model M``: the next request goes to ``model``; what to say.

    Raises:
        CommandError: tether cannot reach ``model`` (the reason, in one line).
    """
    from tether.cli.boot import reach, session_choice
    from tether.session.model import ModelChoice
    from tether.session.settings import MODEL_OPTION, ConfigChanged

    if model == session_choice(tether, agent.session).model:
        return f"(the next request already goes to {model})"
    unreachable = await reach(tether, ModelChoice(model), session=None)
    if unreachable is not None:
        raise CommandError(unreachable)
    agent.session.append(ConfigChanged(option=MODEL_OPTION, value=model))
    return f"(the next request goes to {model})"


def clear_history(agent: Agent) -> str:
    """``/clear``: later requests start from an empty history; what to say.

    Raises:
        CommandError: a turn is running.
    """
    from tether.session.settings import HistoryCleared

    if agent.status is AgentStatus.RUNNING:
        raise CommandError("a turn is running: wait for it to end, or cancel it, then /clear")
    agent.session.append(HistoryCleared())
    return (
        "(the conversation is cleared: the next request starts from an empty history; "
        "earlier turns stay in the session log)"
    )


def go_on_with(agent: Agent, before: ModelChoice, now: ModelChoice) -> None:
    """A new session of ``/new`` goes on with the model the chat used (``before``),
    logged as ``session/config`` when it is not the one it starts on (``now``)."""
    from tether.session.settings import BASE_URL_OPTION, MODEL_OPTION, ConfigChanged

    if before.model != now.model:
        agent.session.append(ConfigChanged(option=MODEL_OPTION, value=before.model))
    if before.base_url is not None and before.base_url != now.base_url:
        agent.session.append(ConfigChanged(option=BASE_URL_OPTION, value=before.base_url))
