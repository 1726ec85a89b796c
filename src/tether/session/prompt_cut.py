"""``llm/prompt-cut``: the provider counted far fewer prompt tokens than tether sent.

A local server given a prompt longer than its context may drop the front of
it, system prompt included, and answer anyway (llama.cpp's server before it
disabled context shift by default). The answer then comes from a model that
never saw its instructions. The agent loop notices it from the usage the
server reports and appends one ``PromptCut`` event (once per agent), which
the front ends show as :func:`prompt_cut_notice`::

    {"model": "local:qwen2.5-coder", "sent": 9400, "counted": 4096}

``sent`` is tether's estimate of the request (four characters a token),
``counted`` the prompt tokens the server reported. The event is a notice
only: the model never sees it, and a reader may skip it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from tether.session.errors import EventFormatError
from tether.session.fields import check_str
from tether.session.vocabulary import EventStruct

__all__ = ["PROMPT_CUT_TYPE", "PromptCut", "prompt_cut_notice"]

_TYPE = "llm/prompt-cut"
PROMPT_CUT_TYPE = _TYPE


class PromptCut(EventStruct, frozen=True):
    """The provider counted ``counted`` prompt tokens of about ``sent`` (see the module docs)."""

    type: ClassVar[str] = _TYPE

    model: str
    sent: int
    counted: int

    def __post_init__(self) -> None:
        check_str(_TYPE, "model", self.model)
        for name in ("sent", "counted"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise EventFormatError(f"{_TYPE}: {name} must be an int >= 0, got {value!r}")


def prompt_cut_notice(data: Mapping[str, object]) -> str:
    """The one line a front end shows for an ``llm/prompt-cut`` event's data."""
    sent, counted = data.get("sent"), data.get("counted")
    figures = (
        f"{counted:,} prompt tokens of about {sent:,} sent"
        if isinstance(sent, int) and isinstance(counted, int)
        else "far fewer prompt tokens than were sent"
    )
    return (
        f"(the model server counted {figures}: it dropped the front of the conversation, "
        "instructions included; give the server a larger context (llama-server: -c N) and "
        "make it refuse an over-long prompt (--no-context-shift), and tell tether the "
        "model's context window: see docs/models.md, Local models)"
    )
